#include "constrain/grammar.h"

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

// Whether state s of rule r takes some byte on the way to finishing the rule.
bool reads(const GrammarRule& r, int32_t s) {
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

size_t Grammar::states() const {
  size_t n = 0;
  for (const auto& r : rules) n += static_cast<size_t>(r.dfa.num_states);
  return n;
}

size_t Grammar::table_bytes() const {
  size_t n = 0;
  for (const auto& r : rules) n += r.dfa.table_bytes() + r.calls.size() * sizeof(GrammarRule::Call);
  return n;
}

Grammar build_grammar(const std::vector<Re>& bodies, const std::vector<std::string>& names, int32_t start,
                      const CompileLimits& limits) {
  Grammar g;
  g.start = start;
  g.rules.resize(bodies.size());
  if (start < 0 || static_cast<size_t>(start) >= g.rules.size()) throw RegexError("the start rule is not in the grammar");
  // Only the rules the start rule reaches are compiled (a rule the schema compiler compiled inline
  // leaves the rules of its first attempt unreached): the others get a DFA of no document.
  std::vector<uint8_t> reached(bodies.size(), 0);
  std::vector<size_t> todo = {static_cast<size_t>(start)};
  reached[static_cast<size_t>(start)] = 1;
  while (!todo.empty()) {
    const size_t i = todo.back();
    todo.pop_back();
    GrammarRule& r = g.rules[i];
    r.name = i < names.size() ? names[i] : "rule " + std::to_string(i);
    r.dfa = compile_dfa(bodies[i], limits);
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
        if (callee >= static_cast<int32_t>(bodies.size()))
          throw RegexError(r.name + ": a call of rule " + std::to_string(callee) + ", past the grammar's " +
                           std::to_string(bodies.size()) + " rules");
        at[static_cast<size_t>(s)].push_back({callee, ret});
        if (!reached[static_cast<size_t>(callee)]) {
          reached[static_cast<size_t>(callee)] = 1;
          todo.push_back(static_cast<size_t>(callee));
        }
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
    ++g.compiled_rules;
  }
  for (size_t i = 0; i < bodies.size(); ++i) {
    if (reached[i]) continue;
    GrammarRule& r = g.rules[i];
    r.name = i < names.size() ? names[i] : "rule " + std::to_string(i);
    r.dfa = compile_dfa(re_never(), limits);
    r.call_begin.assign(static_cast<size_t>(r.dfa.num_states) + 1, 0);
  }
  // Liveness through productive calls, to a fixed point over all rules together.
  for (auto& r : g.rules) r.live.assign(static_cast<size_t>(r.dfa.num_states), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& r : g.rules)
      for (int32_t s = r.dfa.num_states - 1; s >= 0; --s) {
        if (r.live[static_cast<size_t>(s)]) continue;
        bool l = r.dfa.accepting[static_cast<size_t>(s)] != 0 || reads(r, s);
        for (int32_t k = r.call_begin[static_cast<size_t>(s)]; !l && k < r.call_begin[static_cast<size_t>(s) + 1]; ++k) {
          const auto& c = r.calls[static_cast<size_t>(k)];
          const GrammarRule& callee = g.rules[static_cast<size_t>(c.rule)];
          l = r.live[static_cast<size_t>(c.ret)] && callee.live[static_cast<size_t>(callee.dfa.start)];
        }
        if (l) {
          r.live[static_cast<size_t>(s)] = 1;
          changed = true;
        }
      }
  }
  for (auto& r : g.rules) {
    r.plain.assign(static_cast<size_t>(r.dfa.num_states), 0);
    for (int32_t s = 0; s < r.dfa.num_states; ++s) {
      const auto i = static_cast<size_t>(s);
      r.plain[i] = r.live[i] && !r.dfa.accepting[i] && r.call_begin[i] == r.call_begin[i + 1];
    }
  }
  return g;
}

void grammar_close(const Grammar& g, GrammarStacks& stacks) {
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
    const GrammarRule& r = g.rules[static_cast<size_t>(top.rule)];
    const size_t s = static_cast<size_t>(top.state);
    if (reads(r, top.state) || (it.stack.size() == 1 && r.dfa.accepting[s])) stacks.push_back(it.stack);
    if (it.stack.size() < kMaxGrammarDepth)
      for (int32_t k = r.call_begin[s]; k < r.call_begin[s + 1]; ++k) {
        const auto& c = r.calls[static_cast<size_t>(k)];
        const GrammarRule& callee = g.rules[static_cast<size_t>(c.rule)];
        if (!r.live[static_cast<size_t>(c.ret)] || !callee.live[static_cast<size_t>(callee.dfa.start)]) continue;
        if (std::find(it.entered.begin(), it.entered.end(), c.rule) != it.entered.end()) continue;
        Item n = it;
        n.stack.back().state = c.ret;
        n.stack.push_back({c.rule, callee.dfa.start});
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
    const GrammarRule& r = g.rules[static_cast<size_t>(st.back().rule)];
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
    if (st.size() == 1 && st[0].rule == g.start &&
        g.rules[static_cast<size_t>(g.start)].dfa.accepting[static_cast<size_t>(st[0].state)])
      return true;
  return false;
}

GrammarStacks grammar_start(const Grammar& g) {
  const GrammarRule& root = g.rules[static_cast<size_t>(g.start)];
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
      const GrammarRule& r = g.rules[static_cast<size_t>(st.back().rule)];
      const int32_t t = r.dfa.step(st.back().state, c);
      if (t >= 0 && r.live[static_cast<size_t>(t)] && !r.plain[static_cast<size_t>(t)]) {
        in_place = false;
        break;
      }
    }
    if (in_place) {
      size_t kept = 0;
      for (size_t i = 0; i < stacks.size(); ++i) {
        const GrammarRule& r = g.rules[static_cast<size_t>(stacks[i].back().rule)];
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
