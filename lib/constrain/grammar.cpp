#include "constrain/grammar.h"

#include "constrain/grammar_lengths.h"

#include <algorithm>
#include <array>
#include <unordered_set>

namespace ib::constrain {
namespace {

// Bytes no UTF-8 text holds: 0xFF opens a call, four base-12 digits from the others name the callee.
constexpr uint8_t kCallOpen = 0xFF;
constexpr std::array<uint8_t, 12> kDigits = {0xC0, 0xC1, 0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE};
constexpr int kCallDigits = 4;

bool contains(const GrammarStacks& set, const GrammarStack& s) { return std::find(set.begin(), set.end(), s) != set.end(); }

// Whether state s of rule r takes some byte on the way to finishing the rule (live set first).
bool state_reads(const GrammarRule& r, int32_t s) {
  const size_t row = static_cast<size_t>(s) * static_cast<size_t>(r.dfa.num_classes);
  for (int32_t c = 0; c < r.dfa.num_classes; ++c) {
    const int32_t t = r.dfa.next[row + static_cast<size_t>(c)];
    if (t >= 0 && r.live[static_cast<size_t>(t)]) return true;
  }
  return false;
}

}  // namespace

Re re_call(int32_t rule) {
  if (rule < 0 || rule >= kMaxGrammarRules)
    throw RegexError("a grammar holds at most " + std::to_string(kMaxGrammarRules) + " rules");
  std::string marker(1, static_cast<char>(kCallOpen));
  std::string digits;
  for (int i = 0; i < kCallDigits; ++i, rule /= 12) digits += static_cast<char>(kDigits[static_cast<size_t>(rule % 12)]);
  marker.append(digits.rbegin(), digits.rend());
  return re_literal(marker);
}

bool dfa_holds_call(const Dfa& dfa) {
  const size_t c = dfa.byte_class[kCallOpen];
  for (int32_t s = 0; s < dfa.num_states; ++s)
    if (dfa.next[static_cast<size_t>(s) * static_cast<size_t>(dfa.num_classes) + c] >= 0) return true;
  return false;
}

bool re_holds_call(const Re& re) {
  std::vector<const RegexNode*> todo = {re.get()};
  std::unordered_set<const RegexNode*> seen;
  while (!todo.empty()) {
    const RegexNode* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->kind == RegexNode::Kind::Bytes && n->bytes.test(kCallOpen)) return true;
    if (n->kind == RegexNode::Kind::Automaton && n->dfa && dfa_holds_call(*n->dfa)) return true;
    for (const auto& k : n->kids) todo.push_back(k.get());
  }
  return false;
}

int32_t decode_call_marker(const std::vector<Re>& kids, size_t i) {
  auto single = [&](size_t k) -> int {
    const RegexNode& n = *kids[k];
    if (n.kind != RegexNode::Kind::Bytes || n.bytes.count() != 1) return -1;
    for (int b = 0; b < 256; ++b)
      if (n.bytes.test(static_cast<size_t>(b))) return b;
    return -1;
  };
  if (i + kCallDigits >= kids.size() || !kids[i]->non_text) return -1;  // a marker's bytes are not text
  if (single(i) != kCallOpen) return -1;
  int32_t rule = 0;
  for (int d = 1; d <= kCallDigits; ++d) {
    const int b = single(i + static_cast<size_t>(d));
    const auto* at = std::find(kDigits.begin(), kDigits.end(), b);
    if (b < 0 || at == kDigits.end()) return -1;
    rule = rule * 12 + static_cast<int32_t>(at - kDigits.begin());
  }
  return rule;
}

bool is_call_marker_byte(uint8_t b) {
  // The marker bytes are exactly the bytes no UTF-8 text holds (regex.h's non_text_byte).
  static_assert(non_text_byte(kCallOpen));
  return non_text_byte(b);
}

size_t Grammar::states() const {
  size_t n = 0;
  for (size_t i = 0; i < size(); ++i)
    if (const GrammarRule* r = rules_.peek(i)) n += static_cast<size_t>(r->dfa.num_states);
  return n;
}

size_t Grammar::table_bytes() const {
  size_t n = 0;
  for (size_t i = 0; i < size(); ++i)
    if (const GrammarRule* r = rules_.peek(i)) n += r->dfa.table_bytes() + r->calls.size() * sizeof(GrammarRule::Call);
  return n;
}

namespace {

// Rule i's DFA with its call marker paths taken out as call edges; liveness is left to the caller
// (it needs the callees' lengths).
GrammarRule compile_structure(const Re& body, const std::string& name, size_t rules, const CompileLimits& limits) {
  GrammarRule r;
  r.name = name;
  r.dfa = compile_dfa(body, limits);
  // The calls: every path 0xFF d1 d2 d3 d4 from a state.
  std::vector<std::vector<GrammarRule::Call>> at(static_cast<size_t>(r.dfa.num_states));
  for (int32_t s = 0; s < r.dfa.num_states; ++s) {
    const int32_t open = r.dfa.step(s, kCallOpen);
    if (open < 0) continue;
    std::vector<std::pair<int32_t, int32_t>> level = {{open, 0}};  // (state, callee digits so far)
    for (int d = 0; d < kCallDigits; ++d) {
      std::vector<std::pair<int32_t, int32_t>> next;
      for (const auto& [t, so_far] : level)
        for (size_t k = 0; k < kDigits.size(); ++k) {
          const int32_t u = r.dfa.step(t, kDigits[k]);
          if (u >= 0) next.emplace_back(u, so_far * 12 + static_cast<int32_t>(k));
        }
      level = std::move(next);
    }
    for (const auto& [ret, callee] : level) {
      if (callee >= static_cast<int32_t>(rules))
        throw RegexError(r.name + ": a call of rule " + std::to_string(callee) + ", past the grammar's " + std::to_string(rules) +
                         " rules");
      at[static_cast<size_t>(s)].push_back({callee, ret});
    }
  }
  r.call_begin.assign(static_cast<size_t>(r.dfa.num_states) + 1, 0);
  for (int32_t s = 0; s < r.dfa.num_states; ++s) {
    r.call_begin[static_cast<size_t>(s)] = static_cast<int32_t>(r.calls.size());
    r.calls.insert(r.calls.end(), at[static_cast<size_t>(s)].begin(), at[static_cast<size_t>(s)].end());
  }
  r.call_begin.back() = static_cast<int32_t>(r.calls.size());
  // The marker bytes lead nowhere now: a column of -1 of their own (the states only markers
  // reached stay, unreachable).
  const int32_t dead = r.dfa.num_classes;
  std::vector<int32_t> next(static_cast<size_t>(r.dfa.num_states) * static_cast<size_t>(dead + 1), -1);
  for (int32_t s = 0; s < r.dfa.num_states; ++s)
    std::copy_n(r.dfa.next.begin() + static_cast<std::ptrdiff_t>(s) * dead, dead,
                next.begin() + static_cast<std::ptrdiff_t>(s) * (dead + 1));
  // The marker bytes' old classes are emptied too: a class that holds a marker byte the body
  // uses holds no text byte (no text byte has its transitions), else its column is all -1.
  std::vector<int32_t> marker_classes = {r.dfa.byte_class[kCallOpen]};
  for (uint8_t d : kDigits) marker_classes.push_back(r.dfa.byte_class[d]);
  for (int32_t s = 0; s < r.dfa.num_states; ++s)
    for (int32_t c : marker_classes) next[static_cast<size_t>(s) * static_cast<size_t>(dead + 1) + static_cast<size_t>(c)] = -1;
  r.dfa.next = std::move(next);
  r.dfa.num_classes = dead + 1;
  if (dead + 1 > 256) throw RegexError(r.name + ": more than 256 byte classes");
  r.dfa.byte_class[kCallOpen] = static_cast<uint8_t>(dead);
  for (uint8_t d : kDigits) r.dfa.byte_class[d] = static_cast<uint8_t>(dead);
  return r;
}

// Liveness: a state is live where some bytes and calls of productive rules finish the rule.
void set_liveness(GrammarRule& r, const std::vector<int64_t>& lengths) {
  const std::vector<int32_t> d = rule_state_distances(r, lengths, nullptr);
  r.live.assign(static_cast<size_t>(r.dfa.num_states), 0);
  r.plain.assign(static_cast<size_t>(r.dfa.num_states), 0);
  for (size_t s = 0; s < r.live.size(); ++s) {
    r.live[s] = d[s] != kNoDistance;
    r.plain[s] = r.live[s] && !r.dfa.accepting[s] && r.call_begin[s] == r.call_begin[s + 1];
  }
  r.reads.assign(static_cast<size_t>(r.dfa.num_states), 0);
  for (size_t s = 0; s < r.reads.size(); ++s) r.reads[s] = state_reads(r, static_cast<int32_t>(s));
}

}  // namespace

Grammar::Grammar(std::vector<Re> bodies, std::vector<std::string> names, int32_t start_rule, const CompileLimits& limits)
    : Grammar(start_rule >= 0 && static_cast<size_t>(start_rule) < bodies.size()
                  ? merge_call_unions(std::move(bodies), std::move(names))
                  : CallUnions{},
              start_rule, limits) {}

Grammar::Grammar(CallUnions rules, int32_t start_rule, const CompileLimits& limits)
    : start(start_rule),
      bodies_(std::move(rules.bodies)),
      names_(std::move(rules.names)),
      members_(std::move(rules.members)),
      fallbacks_(std::move(rules.fallbacks)),
      limits_(limits),
      rules_(bodies_.size()) {
  const size_t n = bodies_.size();
  if (start < 0 || static_cast<size_t>(start) >= n) throw RegexError("the start rule is not in the grammar");
  names_.resize(n);
  members_.resize(n);
  fallbacks_.resize(n);
  for (size_t i = 0; i < n; ++i)
    if (names_[i].empty()) names_[i] = "rule " + std::to_string(i);
  // The rules the start reaches (a rule the schema compiler compiled inline leaves the rules of
  // its first attempt unreached: they are never compiled). A body whose regex hides its calls is
  // compiled now, for its calls and its length.
  readable_.assign(n, 0);
  reached_.assign(n, 0);
  std::vector<std::unique_ptr<GrammarRule>> now(n);
  std::vector<const GrammarRule*> compiled(n, nullptr);
  RegexCallReader calls;
  std::vector<size_t> todo = {static_cast<size_t>(start)};
  reached_[static_cast<size_t>(start)] = 1;
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    ++reachable_;
    std::vector<int32_t> callees;
    readable_[i] = calls.readable(bodies_[i]);
    if (readable_[i]) {
      callees = calls.callees(bodies_[i]);
    } else {
      now[i] = std::make_unique<GrammarRule>(compile_structure(bodies_[i], names_[i], n, limits_));
      compiled[i] = now[i].get();
      for (const auto& c : now[i]->calls) callees.push_back(c.rule);
    }
    // A union's members are entered by its fallback (the alternative of their calls).
    callees.insert(callees.end(), members_[i].begin(), members_[i].end());
    for (int32_t c : callees) {
      if (c >= static_cast<int32_t>(n))
        throw RegexError(names_[i] + ": a call of rule " + std::to_string(c) + ", past the grammar's " + std::to_string(n) +
                         " rules");
      if (!reached_[static_cast<size_t>(c)]) {
        reached_[static_cast<size_t>(c)] = 1;
        todo.push_back(static_cast<size_t>(c));
      }
    }
  }
  // Unreached rules hold no document here (they are never entered).
  std::vector<Re> measured(n, re_never());
  for (size_t i = 0; i < n; ++i)
    if (reached_[i]) measured[i] = bodies_[i];
  lengths_ = rule_min_lengths(measured, compiled, nullptr, calls);
  for (size_t i = 0; i < n; ++i)
    if (now[i]) {
      set_liveness(*now[i], lengths_);
      rules_.get(i, [&] { return std::move(*now[i]); });
    }
  // The start rule now: every parse begins there (and a schema whose top level alone is past the
  // limits or the compile budget is refused at compile time, as before).
  rule(start);
}

GrammarRule Grammar::compile_rule(int32_t i) const {
  const auto k = static_cast<size_t>(i);
  // A rule the start never reaches is never entered: no document.
  if (!reached_[k]) return compile_rule_body(re_never(), k, limits_);
  if (!members_[k].empty()) {
    // A union of bodies whose states multiply is compiled as the calls it stands for.
    CompileLimits merged = limits_;
    merged.max_dfa_states = std::min(merged.max_dfa_states, kMaxUnionStates);
    try {
      return compile_rule_body(bodies_[k], k, merged);
    } catch (const RegexError&) {
      return compile_rule_body(fallbacks_[k], k, limits_);
    }
  }
  return compile_rule_body(bodies_[k], k, limits_);
}

GrammarRule Grammar::compile_rule_body(const Re& body, size_t k, const CompileLimits& limits) const {
  GrammarRule r = compile_structure(body, names_[k], size(), limits);
  set_liveness(r, lengths_);
  return r;
}

const GrammarRule& Grammar::rule(int32_t i) const {
  return rules_.get(static_cast<size_t>(i), [&] { return compile_rule(i); });
}

void Grammar::compile_all() const {
  for (size_t i = 0; i < size(); ++i)
    if (reached_[i]) rule(static_cast<int32_t>(i));
}

Grammar build_grammar(const std::vector<Re>& bodies, const std::vector<std::string>& names, int32_t start,
                      const CompileLimits& limits) {
  return Grammar(bodies, names, start, limits);
}

void grammar_close(const Grammar& g, GrammarStacks& stacks) {
  // One stack whose tops make no call (most closures of a document: a byte inside a rule, or the
  // end of a value returning to its caller) closes without the search below: it stays, is
  // dropped, or pops its finished frames while they neither call nor read.
  if (stacks.size() == 1) {
    GrammarStack& st = stacks[0];
    for (;;) {
      const GrammarFrame top = st.back();
      const GrammarRule& r = g.rule(top.rule);
      const auto s = static_cast<size_t>(top.state);
      if (r.call_begin[s] != r.call_begin[s + 1]) break;
      const bool finished = r.dfa.accepting[s] != 0;
      if (finished && st.size() > 1) {
        if (r.reads[s]) break;  // it both stays and returns: two stacks
        st.pop_back();
        continue;
      }
      if (!r.reads[s] && !finished) stacks.clear();
      return;
    }
  }
  struct Item {
    GrammarStack stack;
    std::vector<int32_t> entered;  // rules entered on this closure path
  };
  std::vector<Item> work;
  for (auto& s : stacks) work.push_back({std::move(s), {}});
  stacks.clear();
  GrammarStacks seen;
  while (!work.empty()) {
    Item it = std::move(work.back());
    work.pop_back();
    if (contains(seen, it.stack)) continue;
    seen.push_back(it.stack);
    const GrammarFrame top = it.stack.back();
    const GrammarRule& r = g.rule(top.rule);
    const size_t s = static_cast<size_t>(top.state);
    if (r.reads[s] || (it.stack.size() == 1 && r.dfa.accepting[s])) stacks.push_back(it.stack);
    if (it.stack.size() < kMaxGrammarDepth)
      for (int32_t k = r.call_begin[s]; k < r.call_begin[s + 1]; ++k) {
        const auto& c = r.calls[static_cast<size_t>(k)];
        if (!r.live[static_cast<size_t>(c.ret)] || !g.productive(c.rule)) continue;
        if (std::find(it.entered.begin(), it.entered.end(), c.rule) != it.entered.end()) continue;
        Item n = it;
        n.stack.back().state = c.ret;
        n.stack.push_back({c.rule, g.rule(c.rule).dfa.start});
        n.entered.push_back(c.rule);
        work.push_back(std::move(n));
      }
    if (r.dfa.accepting[s] && it.stack.size() > 1) {
      Item n = std::move(it);
      n.stack.pop_back();
      work.push_back(std::move(n));
    }
  }
}

void grammar_step(const Grammar& g, const GrammarStacks& in, uint8_t b, GrammarStacks& out) {
  out.clear();
  bool all_plain = true;
  for (const auto& st : in) {
    const GrammarRule& r = g.rule(st.back().rule);
    const int32_t t = r.dfa.step(st.back().state, b);
    if (t < 0 || !r.live[static_cast<size_t>(t)]) continue;
    all_plain = all_plain && r.plain[static_cast<size_t>(t)];
    GrammarStack n = st;
    n.back().state = t;
    if (!contains(out, n)) out.push_back(std::move(n));
  }
  if (!out.empty() && !all_plain) grammar_close(g, out);
}

bool grammar_accepts(const Grammar& g, const GrammarStacks& stacks) {
  for (const auto& st : stacks)
    if (st.size() == 1 && st[0].rule == g.start && g.rule(g.start).dfa.accepting[static_cast<size_t>(st[0].state)]) return true;
  return false;
}

GrammarStacks grammar_start(const Grammar& g) {
  const GrammarRule& root = g.rule(g.start);
  if (!root.live[static_cast<size_t>(root.dfa.start)]) return {};  // no finite document (a false schema)
  GrammarStacks s = {{{g.start, root.dfa.start}}};
  grammar_close(g, s);
  return s;
}

bool grammar_walk(const Grammar& g, GrammarStacks& stacks, const std::string& bytes) {
  GrammarStacks next;
  for (unsigned char c : bytes) {
    // In place while every surviving top steps into a plain state (no closure, no copies): most
    // bytes of keys, strings and numbers.
    bool in_place = true;
    for (const auto& st : stacks) {
      const GrammarRule& r = g.rule(st.back().rule);
      const int32_t t = r.dfa.step(st.back().state, c);
      if (t >= 0 && r.live[static_cast<size_t>(t)] && !r.plain[static_cast<size_t>(t)]) {
        in_place = false;
        break;
      }
    }
    if (in_place) {
      size_t kept = 0;
      for (size_t i = 0; i < stacks.size(); ++i) {
        const GrammarRule& r = g.rule(stacks[i].back().rule);
        const int32_t t = r.dfa.step(stacks[i].back().state, c);
        if (t < 0 || !r.live[static_cast<size_t>(t)]) continue;
        stacks[i].back().state = t;
        if (std::find(stacks.begin(), stacks.begin() + static_cast<std::ptrdiff_t>(kept), stacks[i]) !=
            stacks.begin() + static_cast<std::ptrdiff_t>(kept))
          continue;
        if (kept != i) stacks[kept] = std::move(stacks[i]);
        ++kept;
      }
      stacks.resize(kept);
    } else {
      grammar_step(g, stacks, c, next);
      stacks.swap(next);
    }
    if (stacks.empty()) return false;
  }
  return true;
}

bool grammar_matches(const Grammar& g, const std::string& text) {
  GrammarStacks s = grammar_start(g);
  return grammar_walk(g, s, text) && grammar_accepts(g, s);
}

}  // namespace ib::constrain
