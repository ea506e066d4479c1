// The Thompson NFA that compile_dfa's subset construction (automaton.cpp) starts from: flat
// arrays, the interned byte sets of its edges, and the continuation-passing build from a regex AST.
// Apart from the subset construction because it is an idea of its own; internal, not public.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/regex.h"
#include "numerics/random.h"

namespace ib::constrain::detail {

// The distinct byte sets of an NFA's edges, interned: an edge stores a small id, and the byte
// classes are computed once per distinct set instead of once per edge (a schema's NFA has tens of
// thousands of edges over a few dozen sets).
class ByteSetTable {
 public:
  ByteSetTable() : slots_(64, -1) {}
  int32_t intern(const ByteSet& b) {
    static_assert(std::is_trivially_copyable_v<ByteSet> && sizeof(ByteSet) == 4 * sizeof(uint64_t),
                  "ByteSet is hashed through its four words");
    uint64_t w[4];
    std::memcpy(w, &b, sizeof w);
    const uint64_t h = mix64(w[0] ^ mix64(w[1] ^ mix64(w[2] ^ mix64(w[3]))));
    size_t mask = slots_.size() - 1;
    size_t i = static_cast<size_t>(h) & mask;
    for (; slots_[i] >= 0; i = (i + 1) & mask)
      if (hash_[static_cast<size_t>(slots_[i])] == h && sets_[static_cast<size_t>(slots_[i])] == b) return slots_[i];
    const int32_t id = static_cast<int32_t>(sets_.size());
    sets_.push_back(b);
    hash_.push_back(h);
    if (sets_.size() * 2 > slots_.size()) {
      slots_.assign(slots_.size() * 2, -1);
      mask = slots_.size() - 1;
      for (size_t j = 0; j < sets_.size(); ++j) {
        size_t k = static_cast<size_t>(hash_[j]) & mask;
        while (slots_[k] >= 0) k = (k + 1) & mask;
        slots_[k] = static_cast<int32_t>(j);
      }
    } else {
      slots_[i] = id;
    }
    return id;
  }
  const std::vector<ByteSet>& sets() const { return sets_; }

 private:
  std::vector<ByteSet> sets_;
  std::vector<uint64_t> hash_;
  std::vector<int32_t> slots_;
};

// Thompson NFA in flat arrays: state s has the epsilon edges pool[eps_at[s] .. + eps_n[s]) (set
// once, when its targets are known) and at most one byte-set edge, bytes set[s] (an id in `sets`,
// -1 for none) to state to[s].
struct Nfa {
  std::vector<int32_t> eps_at, eps_n, set, to;
  std::vector<int32_t> pool;
  ByteSetTable sets;
  int64_t limit = 0;

  size_t size() const { return to.size(); }
  int32_t add() {
    if (static_cast<int64_t>(to.size()) >= limit)
      throw RegexError("the automaton needs more than " + std::to_string(limit) +
                       " NFA states (bounds such as maxLength or maxItems are too large)");
    eps_at.push_back(0);
    eps_n.push_back(0);
    set.push_back(-1);
    to.push_back(-1);
    return static_cast<int32_t>(to.size() - 1);
  }
  void set_eps(int32_t s, const int32_t* b, const int32_t* e) {
    eps_at[static_cast<size_t>(s)] = static_cast<int32_t>(pool.size());
    eps_n[static_cast<size_t>(s)] = static_cast<int32_t>(e - b);
    pool.insert(pool.end(), b, e);
  }
  void set_edge(int32_t s, int32_t set_id, int32_t target) {
    set[static_cast<size_t>(s)] = set_id;
    to[static_cast<size_t>(s)] = target;
  }

  // Continuation-passing Thompson construction: build(r, next) returns a state whose language is
  // L(r)·L(next), adding no edge to any state that existed before the call. So a sub-expression the
  // AST shares (the schema compiler's memoized object tails, x in x{2,}) and that is followed by
  // the same continuation is built once: one NFA fragment instead of one copy per path to it.
  struct PairHash {
    size_t operator()(const std::pair<const RegexNode*, int32_t>& p) const {
      return std::hash<const void*>()(p.first) * 0x9E3779B97F4A7C15ull ^ static_cast<size_t>(p.second);
    }
  };
  std::unordered_map<std::pair<const RegexNode*, int32_t>, int32_t, PairHash> built;

  int32_t eps_to(std::initializer_list<int32_t> targets) {
    const int32_t a = add();
    set_eps(a, targets.begin(), targets.end());
    return a;
  }

  // A DFA as a fragment followed by `next`: a hub state per DFA state with an epsilon edge to one
  // byte-set edge per target (the classes that lead there, merged) and, when it accepts, to next.
  // Only new states get edges, as build() requires; the subset construction sees a deterministic
  // part and does not grow it. The edges per state are worked out once per DFA (a body repeated
  // 500 times is embedded 500 times).
  struct EmbedPlan {
    std::vector<int32_t> row;                        // state s: edges [row[s], row[s + 1])
    std::vector<std::pair<int32_t, int32_t>> edges;  // (target state, byte-set id)
  };
  std::unordered_map<const Dfa*, EmbedPlan> plans;
  const EmbedPlan& plan(const Dfa& d) {
    auto [it, fresh] = plans.emplace(&d, EmbedPlan{});
    if (!fresh) return it->second;
    EmbedPlan& p = it->second;
    std::vector<ByteSet> class_bytes(static_cast<size_t>(d.num_classes));
    for (int b = 0; b < 256; ++b) class_bytes[d.byte_class[static_cast<size_t>(b)]].set(static_cast<size_t>(b));
    std::vector<std::pair<int32_t, ByteSet>> targets;
    p.row.push_back(0);
    for (int32_t s = 0; s < d.num_states; ++s) {
      targets.clear();
      for (int32_t c = 0; c < d.num_classes; ++c) {
        const int32_t t = d.next[static_cast<size_t>(s) * d.num_classes + static_cast<size_t>(c)];
        if (t < 0) continue;
        auto at = std::find_if(targets.begin(), targets.end(), [&](const auto& q) { return q.first == t; });
        if (at == targets.end()) at = targets.emplace(targets.end(), t, ByteSet{});
        at->second |= class_bytes[static_cast<size_t>(c)];
      }
      for (const auto& [t, bytes] : targets) p.edges.emplace_back(t, sets.intern(bytes));
      p.row.push_back(static_cast<int32_t>(p.edges.size()));
    }
    return p;
  }
  std::vector<int32_t> hub, hub_eps;
  int32_t embed(const Dfa& d, int32_t next) {
    const EmbedPlan& p = plan(d);
    hub.resize(static_cast<size_t>(d.num_states));
    for (auto& h : hub) h = add();
    for (int32_t s = 0; s < d.num_states; ++s) {
      hub_eps.clear();
      for (int32_t x = p.row[static_cast<size_t>(s)]; x < p.row[static_cast<size_t>(s) + 1]; ++x) {
        const int32_t e = add();
        set_edge(e, p.edges[static_cast<size_t>(x)].second, hub[static_cast<size_t>(p.edges[static_cast<size_t>(x)].first)]);
        hub_eps.push_back(e);
      }
      if (d.accepting[static_cast<size_t>(s)]) hub_eps.push_back(next);
      set_eps(hub[static_cast<size_t>(s)], hub_eps.data(), hub_eps.data() + hub_eps.size());
    }
    return hub[static_cast<size_t>(d.start)];
  }

  // A repeated body as its minimal DFA, when that is small: the subset construction then meets
  // one deterministic copy per repetition instead of the body's alternatives (a JSON string
  // character's UTF-8 lengths and escapes), which made it build about twice the states the
  // minimal DFA keeps and minimisation then merged. Compiled once per body node.
  std::unordered_map<const RegexNode*, Re> compacted;
  __attribute__((noinline)) const Re& compact(const Re& x) {
    if (x->kind == RegexNode::Kind::Bytes || x->kind == RegexNode::Kind::Automaton || x->kind == RegexNode::Kind::Empty) return x;
    auto [it, fresh] = compacted.emplace(x.get(), x);
    int budget = kCompactNodes;
    if (fresh && small_ast(*x, &budget)) {
      CompileLimits small;
      small.max_nfa_states = 4 * kCompactStates;
      small.max_dfa_states = kCompactStates;
      try {
        it->second = re_automaton(std::make_shared<const Dfa>(compile_dfa(x, small)));
      } catch (const RegexError&) {
        // larger than a compact body: built inline
      }
    }
    return it->second;
  }
  static constexpr int64_t kCompactStates = 64;
  static constexpr int kCompactNodes = 256;
  // Whether the AST has at most *budget nodes (a shared node counted at each use): a body that
  // large would not compile to a compact DFA, and trying costs more than it saves.
  static bool small_ast(const RegexNode& r, int* budget) {
    if (--*budget < 0) return false;
    if (r.kind == RegexNode::Kind::Automaton) return (*budget -= r.dfa->num_states) >= 0;
    for (const auto& k : r.kids)
      if (!small_ast(*k, budget)) return false;
    return true;
  }

  // The parsers bound what they build (regex groups, schema levels), so this is a backstop: an
  // expression nested past it is an error, not a stack overflow in the recursion below. Real
  // schemas stay far inside it (the deepest AST of the 340-schema corpus: 427 levels). The
  // recursion's frames are kept small (the cases with locals are functions of their own, never
  // inlined into it), so that 1500 levels fit an AddressSanitizer build's 8 MiB stack too.
  static constexpr int kMaxBuildDepth = 1500;
  int build_depth = 0;
  [[noreturn]] __attribute__((noinline)) static void too_deep() {
    throw RegexError("the expression nests deeper than " + std::to_string(kMaxBuildDepth) + " levels");
  }

  int32_t build(const Re& r, int32_t next) {
    const auto key = std::make_pair(r.get(), next);
    if (auto it = built.find(key); it != built.end()) return it->second;
    if (++build_depth > kMaxBuildDepth) too_deep();
    int32_t in = next;
    switch (r->kind) {
      case RegexNode::Kind::Concat:
        for (size_t i = r->kids.size(); i-- > 0;) in = build(r->kids[i], in);
        break;
      case RegexNode::Kind::Alt:
        in = build_alt(*r, next);
        break;
      case RegexNode::Kind::Repeat:
        in = build_repeat(*r, next);
        break;
      default:
        in = build_leaf(*r, next);
    }
    --build_depth;
    built.emplace(key, in);
    return in;
  }
  __attribute__((noinline)) int32_t build_leaf(const RegexNode& r, int32_t next) {
    switch (r.kind) {
      case RegexNode::Kind::Never:
        return add();  // no edge out
      case RegexNode::Kind::Bytes: {
        const int32_t in = add();
        set_edge(in, sets.intern(r.bytes), next);
        return in;
      }
      case RegexNode::Kind::Automaton:
        return embed(*r.dfa, next);
      default:  // Empty
        return next;
    }
  }
  __attribute__((noinline)) int32_t build_alt(const RegexNode& r, int32_t next) {
    std::vector<int32_t> ins;
    for (const auto& k : r.kids) ins.push_back(build(k, next));
    const int32_t in = add();
    set_eps(in, ins.data(), ins.data() + ins.size());
    return in;
  }
  __attribute__((noinline)) int32_t build_repeat(const RegexNode& r, int32_t next) {
    const Re& x = compact(r.kids[0]);
    int32_t in = next;
    if (r.max < 0) {  // x{min,}: min copies, then a loop state that re-enters x or leaves
      const int32_t loop = add();
      const int32_t body = build(x, loop);
      const int32_t out[2] = {body, next};
      set_eps(loop, out, out + 2);
      in = loop;
    } else {  // x{0,k} then next = next | x x{0,k-1} next
      for (int i = r.min; i < r.max; ++i) in = eps_to({build(x, in), next});
    }
    for (int i = 0; i < r.min; ++i) in = build(x, in);
    return in;
  }
};

}  // namespace ib::constrain::detail
