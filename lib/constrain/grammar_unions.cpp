#include "constrain/grammar_unions.h"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>

#include "constrain/grammar.h"
#include "constrain/grammar_lengths.h"

namespace ib::constrain {
namespace {

// The callee when `n` is exactly one call (re_call's five bytes), else -1.
int32_t only_call(const RegexNode& n) {
  if (n.kind != RegexNode::Kind::Concat || n.kids.size() != 5) return -1;
  return call_marker_at(n.kids, 0);
}

// Whether a body starts with a call rather than a byte at its top: one call, or an alternative
// with a call among its branches (what forwards a value to other rules).
bool forwards(const Re& body) {
  if (only_call(*body) >= 0) return true;
  if (body->kind != RegexNode::Kind::Alt) return false;
  return std::any_of(body->kids.begin(), body->kids.end(), [](const Re& k) { return only_call(*k) >= 0; });
}

class UnionWriter {
 public:
  explicit UnionWriter(CallUnions& g) : g_(g), originals_(g.bodies.size()), joins_(g.bodies.size(), 0) {
    RegexCallReader reader;
    for (size_t i = 0; i < originals_; ++i) joins_[i] = reader.readable(g_.bodies[i]) && !forwards(g_.bodies[i]);
  }

  void run() {
    // The original bodies stay alive while rewriting: the memo is keyed by their nodes' addresses
    // (and union_of appends to g_.bodies).
    const std::vector<Re> original(g_.bodies.begin(), g_.bodies.end());
    for (size_t i = 0; i < originals_; ++i) g_.bodies[i] = rewrite(original[i]);
    // A union's members start with a byte at their top, so the union of their bodies holds no
    // alternative of calls at its top: nothing there to merge again.
    for (size_t u = originals_; u < g_.bodies.size(); ++u) {
      std::vector<Re> alts;
      for (int32_t m : g_.members[u]) alts.push_back(g_.bodies[static_cast<size_t>(m)]);
      g_.bodies[u] = re_alt(std::move(alts));
    }
  }

 private:
  Re rewrite(const Re& n) {
    if (!n->non_text || n->kids.empty()) return n;  // no call below
    if (auto it = done_.find(n.get()); it != done_.end()) return it->second;
    std::vector<Re> kids;
    kids.reserve(n->kids.size());
    bool changed = false;
    for (const auto& k : n->kids) {
      kids.push_back(rewrite(k));
      changed = changed || kids.back() != k;
    }
    Re out = n;
    if (n->kind == RegexNode::Kind::Alt) {
      std::vector<int32_t> members;
      for (const auto& k : kids) {
        const int32_t c = only_call(*k);
        if (c < 0) continue;
        const auto cu = static_cast<size_t>(c);
        if (cu < g_.members.size() && !g_.members[cu].empty())
          members.insert(members.end(), g_.members[cu].begin(), g_.members[cu].end());
        else if (cu < originals_ && joins_[cu])
          members.push_back(c);
      }
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      const int32_t u = members.size() >= 2 ? union_of(members) : -1;
      if (u >= 0) {
        std::vector<Re> rest;
        for (const auto& k : kids) {
          const int32_t c = only_call(*k);
          const bool merged = c >= 0 && std::binary_search(members.begin(), members.end(), c);
          const bool a_union = c >= 0 && static_cast<size_t>(c) >= originals_;
          if (!merged && !a_union) rest.push_back(k);
        }
        rest.push_back(re_call(u));
        out = re_alt(std::move(rest));
      } else if (changed) {
        out = re_alt(std::move(kids));
      }
    } else if (changed) {
      out = n->kind == RegexNode::Kind::Concat ? re_concat(std::move(kids)) : re_repeat(kids[0], n->min, n->max);
    }
    done_.emplace(n.get(), out);
    return out;
  }

  // The union rule of these members (sorted), made on first use; -1 past the limits.
  int32_t union_of(const std::vector<int32_t>& members) {
    if (auto it = unions_.find(members); it != unions_.end()) return it->second;
    if (unions_.size() >= kMaxUnions || g_.bodies.size() >= static_cast<size_t>(kMaxGrammarRules)) return -1;
    const auto id = static_cast<int32_t>(g_.bodies.size());
    g_.bodies.push_back(re_never());  // written once every original body is rewritten
    std::string name = "either of";
    for (size_t i = 0; i < members.size() && name.size() < 200; ++i)
      name += (i ? " | " : " ") + g_.names[static_cast<size_t>(members[i])];
    g_.names.push_back(std::move(name));
    g_.members.resize(g_.bodies.size());
    g_.members.back() = members;
    unions_.emplace(members, id);
    return id;
  }

  CallUnions& g_;
  const size_t originals_;
  std::vector<uint8_t> joins_;
  std::unordered_map<const RegexNode*, Re> done_;
  std::map<std::vector<int32_t>, int32_t> unions_;
};

}  // namespace

CallUnions merge_call_unions(std::vector<Re> bodies, std::vector<std::string> names) {
  CallUnions g;
  names.resize(bodies.size());
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i].empty()) names[i] = "rule " + std::to_string(i);
  g.bodies = std::move(bodies);
  g.names = std::move(names);
  g.members.resize(g.bodies.size());
  UnionWriter(g).run();
  return g;
}

}  // namespace ib::constrain
