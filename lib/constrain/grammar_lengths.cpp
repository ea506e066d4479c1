#include "constrain/grammar_lengths.h"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace ib::constrain {
namespace {

constexpr int64_t kNo = Grammar::kNoLength;

int64_t add(int64_t a, int64_t b) { return std::min(a + b, kNo); }

bool byte_usable(const std::array<bool, 256>* usable, int b) {
  return !is_call_marker_byte(static_cast<uint8_t>(b)) && (!usable || (*usable)[static_cast<size_t>(b)]);
}

// The fewest usable bytes of regex nodes given the rules' current lengths: nodes that hold no
// call are measured once; the others on every reading.
class LengthReader {
 public:
  explicit LengthReader(const std::array<bool, 256>* usable) : usable_(usable) {}
  int64_t body(const Re& re, const std::vector<int64_t>& rules) {
    rules_ = &rules;
    spine_.clear();
    return of(re.get());
  }

 private:
  int64_t of(const RegexNode* n) {
    // Below a node of text bytes only there is no call: its fewest bytes are the node's own when
    // every text byte counts, else measured once.
    if (!n->non_text && !usable_) return n->text_length;
    const bool spine = n->non_text;
    auto& memo = spine ? spine_ : fixed_;
    if (auto it = memo.find(n); it != memo.end()) return it->second;
    int64_t v = kNo;
    switch (n->kind) {
      case RegexNode::Kind::Empty:
        v = 0;
        break;
      case RegexNode::Kind::Never:
        break;
      case RegexNode::Kind::Bytes:
        for (int b = 0; b < 256 && v == kNo; ++b)
          if (n->bytes.test(static_cast<size_t>(b)) && byte_usable(usable_, b)) v = 1;
        break;
      case RegexNode::Kind::Concat:
        v = 0;
        for (size_t i = 0; i < n->kids.size() && v < kNo; ++i) {
          const int32_t c = call_marker_at(n->kids, i);
          if (c >= 0) {
            v = add(v, (*rules_)[static_cast<size_t>(c)]);
            i += 4;
          } else {
            v = add(v, of(n->kids[i].get()));
          }
        }
        break;
      case RegexNode::Kind::Alt:
        for (const auto& k : n->kids) v = std::min(v, of(k.get()));
        break;
      case RegexNode::Kind::Repeat:
        if (n->min == 0) {
          v = 0;
        } else {
          const int64_t k = of(n->kids[0].get());
          v = k >= kNo ? kNo : std::min(k * n->min, kNo);
        }
        break;
      case RegexNode::Kind::Automaton:
        v = dfa_length(*n->dfa);
        break;
    }
    memo[n] = v;
    return v;
  }
  // The fewest usable bytes of an automaton's language (automaton.h's distance_to_accept, from its start).
  int64_t dfa_length(const Dfa& d) {
    if (auto it = dfa_.find(&d); it != dfa_.end()) return it->second;
    std::array<bool, 256> bytes{};
    for (int b = 0; b < 256; ++b) bytes[static_cast<size_t>(b)] = byte_usable(usable_, b);
    const int32_t v = distance_to_accept(d, &bytes)[static_cast<size_t>(d.start)];
    return dfa_[&d] = v < 0 ? kNo : v;
  }

  const std::array<bool, 256>* usable_;
  const std::vector<int64_t>* rules_ = nullptr;
  std::unordered_map<const RegexNode*, int64_t> fixed_, spine_;
  std::unordered_map<const Dfa*, int64_t> dfa_;
};

}  // namespace

bool RegexCallReader::readable(const RegexNode* n) {
  if (!n->non_text) return true;  // no marker byte below
  if (auto it = readable_.find(n); it != readable_.end()) return it->second;
  bool ok = true;
  switch (n->kind) {
    case RegexNode::Kind::Bytes:      // a marker byte outside a call's five
    case RegexNode::Kind::Automaton:  // markers in transitions: calls the regex does not show
      ok = false;
      break;
    case RegexNode::Kind::Concat:
      for (size_t i = 0; i < n->kids.size() && ok; ++i) {
        if (call_marker_at(n->kids, i) >= 0)
          i += 4;
        else
          ok = readable(n->kids[i].get());
      }
      break;
    default:
      for (const auto& k : n->kids) ok = ok && readable(k.get());
  }
  return readable_[n] = ok;
}

bool RegexCallReader::readable(const Re& body) { return readable(body.get()); }

std::vector<int32_t> RegexCallReader::callees(const Re& body) {
  std::vector<int32_t> out;
  std::vector<const RegexNode*> todo = {body.get()};
  std::unordered_set<const RegexNode*> seen;
  while (!todo.empty()) {
    const RegexNode* n = todo.back();
    todo.pop_back();
    if (!n->non_text || !seen.insert(n).second) continue;  // no marker byte below, or seen
    for (size_t i = 0; i < n->kids.size(); ++i) {
      const int32_t c = n->kind == RegexNode::Kind::Concat ? call_marker_at(n->kids, i) : -1;
      if (c >= 0) {
        if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
        i += 4;
      } else {
        todo.push_back(n->kids[i].get());
      }
    }
  }
  return out;
}

std::vector<int64_t> rule_min_lengths(const std::vector<Re>& bodies, const std::vector<const GrammarRule*>& compiled,
                                      const std::array<bool, 256>* usable, RegexCallReader& calls) {
  const size_t n = bodies.size();
  std::vector<int64_t> len(n, kNo);
  std::vector<std::vector<int32_t>> callees(n), callers(n);
  for (size_t r = 0; r < n; ++r) {
    if (compiled[r]) {
      for (const auto& c : compiled[r]->calls)
        if (std::find(callees[r].begin(), callees[r].end(), c.rule) == callees[r].end()) callees[r].push_back(c.rule);
    } else {
      callees[r] = calls.callees(bodies[r]);
    }
    for (int32_t c : callees[r]) callers[static_cast<size_t>(c)].push_back(static_cast<int32_t>(r));
  }
  // Callees before their callers (depth-first postorder), so that a rule outside a recursion is
  // read once; a rule is read again only when a callee's length fell after it was read.
  std::vector<int32_t> order;
  std::vector<uint8_t> mark(n, 0);
  for (size_t root = 0; root < n; ++root) {
    if (mark[root]) continue;
    std::vector<std::pair<size_t, size_t>> stack = {{root, 0}};
    mark[root] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      if (next < callees[r].size()) {
        const auto c = static_cast<size_t>(callees[r][next++]);
        if (!mark[c]) {
          mark[c] = 1;
          stack.emplace_back(c, 0);
        }
        continue;
      }
      order.push_back(static_cast<int32_t>(r));
      stack.pop_back();
    }
  }
  LengthReader reader(usable);
  std::vector<uint8_t> read(n, 0), queued(n, 0);
  std::vector<int32_t> work;
  auto measure = [&](size_t r) {
    read[r] = 1;
    int64_t v;
    if (compiled[r]) {
      const int32_t d = rule_state_distances(*compiled[r], len, usable)[static_cast<size_t>(compiled[r]->dfa.start)];
      v = d == kNoDistance ? kNo : d;
    } else {
      v = reader.body(bodies[r], len);
    }
    if (v >= len[r]) return;
    len[r] = v;
    for (int32_t c : callers[r])
      if (read[static_cast<size_t>(c)] && !queued[static_cast<size_t>(c)]) {
        queued[static_cast<size_t>(c)] = 1;
        work.push_back(c);
      }
  };
  for (int32_t r : order) measure(static_cast<size_t>(r));
  while (!work.empty()) {
    const auto r = static_cast<size_t>(work.back());
    work.pop_back();
    queued[r] = 0;
    measure(r);
  }
  return len;
}

std::vector<int32_t> rule_state_distances(const GrammarRule& r, const std::vector<int64_t>& lengths,
                                          const std::array<bool, 256>* usable) {
  const Dfa& d = r.dfa;
  const auto states = static_cast<size_t>(d.num_states);
  std::vector<uint8_t> class_ok(static_cast<size_t>(d.num_classes), 0);
  for (int b = 0; b < 256; ++b)
    if (byte_usable(usable, b)) class_ok[d.byte_class[static_cast<size_t>(b)]] = 1;
  // Edges reversed: (from, weight) into each state.
  std::vector<std::vector<std::pair<int32_t, int64_t>>> into(states);
  for (int32_t s = 0; s < d.num_states; ++s) {
    for (int32_t c = 0; c < d.num_classes; ++c) {
      const int32_t t = d.next[static_cast<size_t>(s) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(c)];
      if (t >= 0 && class_ok[static_cast<size_t>(c)]) into[static_cast<size_t>(t)].emplace_back(s, 1);
    }
    for (int32_t k = r.call_begin[static_cast<size_t>(s)]; k < r.call_begin[static_cast<size_t>(s) + 1]; ++k) {
      const auto& call = r.calls[static_cast<size_t>(k)];
      const int64_t w = lengths[static_cast<size_t>(call.rule)];
      if (w < kNo) into[static_cast<size_t>(call.ret)].emplace_back(s, w);
    }
  }
  std::vector<int64_t> dist(states, kNo);
  using Item = std::pair<int64_t, int32_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
  for (int32_t s = 0; s < d.num_states; ++s)
    if (d.accepting[static_cast<size_t>(s)]) {
      dist[static_cast<size_t>(s)] = 0;
      q.emplace(0, s);
    }
  while (!q.empty()) {
    const auto [ds, s] = q.top();
    q.pop();
    if (ds > dist[static_cast<size_t>(s)]) continue;
    for (const auto& [from, w] : into[static_cast<size_t>(s)]) {
      const int64_t nd = add(ds, w);
      if (nd < dist[static_cast<size_t>(from)]) {
        dist[static_cast<size_t>(from)] = nd;
        q.emplace(nd, from);
      }
    }
  }
  std::vector<int32_t> out(states, kNoDistance);
  for (size_t s = 0; s < states; ++s)
    if (dist[s] < kNo) out[s] = static_cast<int32_t>(std::min<int64_t>(dist[s], kNoDistance - 1));
  return out;
}

}  // namespace ib::constrain
