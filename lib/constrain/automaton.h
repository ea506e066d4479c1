// Regex AST -> Thompson NFA -> DFA (subset construction over byte classes) -> minimal DFA.
// The DFA runs over bytes; states that cannot reach acceptance are dropped (transition -1).
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "constrain/regex.h"

namespace ib::constrain {

struct Dfa {
  int32_t start = 0;
  int32_t num_states = 0;
  int32_t num_classes = 0;
  std::array<uint8_t, 256> byte_class{};  // byte -> equivalence class
  std::vector<int32_t> next;              // num_states × num_classes; -1: no way to acceptance
  std::vector<uint8_t> accepting;

  int32_t step(int32_t s, uint8_t b) const { return next[static_cast<size_t>(s) * num_classes + byte_class[b]]; }
  // -1 as soon as the bytes leave every accepting path.
  int32_t walk(int32_t s, const std::string& bytes) const {
    for (unsigned char c : bytes) {
      s = step(s, c);
      if (s < 0) return -1;
    }
    return s;
  }
  bool matches(const std::string& bytes) const {
    int32_t s = walk(start, bytes);
    return s >= 0 && accepting[static_cast<size_t>(s)];
  }
  // The only byte that keeps state s alive, or -1 when there are several, none, or s accepts.
  int forced_byte(int32_t s) const;
  size_t table_bytes() const { return next.size() * sizeof(int32_t); }
};

struct CompileLimits {
  int64_t max_nfa_states = 4'000'000;
  int64_t max_dfa_states = 500'000;
  // NFA states held by the DFA states' sets together (4 bytes each): a DFA of few states can
  // still hold quadratically many (an unanchored a{20000} keeps every count alive at once).
  int64_t max_set_entries = 32'000'000;
};

// Throws RegexError when a limit is passed (the message names it).
Dfa compile_dfa(const Re& re, const CompileLimits& limits = {});

// A budget of this thread's CPU time for automaton work (compile_dfa, product_dfa, their
// minimization) while the guard lives; a nested guard cannot extend an outer one's deadline.
// Past it, the work throws CompileBudgetExceeded: not a RegexError, so no caller takes it for one
// automaton's size cap and tries another way; the whole compile stops.
class CompileBudget {
 public:
  explicit CompileBudget(double cpu_seconds);  // <= 0: no budget of its own
  ~CompileBudget();
  CompileBudget(const CompileBudget&) = delete;
  CompileBudget& operator=(const CompileBudget&) = delete;

 private:
  double saved_deadline_, saved_seconds_;
};
class CompileBudgetExceeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Called in the automaton loops: every few hundred calls, the thread's CPU clock against the
// budget's deadline.
void compile_budget_tick();

// How a product of DFAs P_0..P_{k-1} accepts a tuple of their states.
enum class ProductRule {
  Intersection,  // every part accepts
  Difference,    // P_0 accepts and no other part does: L(P_0) minus the union of the others
  // k = 2n, parts P_0..P_{n-1} and over-approximations O_i = P_{n+i} (L(P_i) ⊆ L(O_i), the same
  // DFA where a branch is exact): some P_i accepts and no O_j, j != i, does. With O_i = P_i this is
  // "exactly one of the n languages" (JSON Schema's oneOf).
  ExactlyOne,
};

// The product construction over the parts' reachable state tuples (a dead part stays dead: its
// state is -1, so the parts behave as complete DFAs and complements come for free), then minimised.
// Tuples that can no longer accept under the rule are pruned as they are found. Throws RegexError
// past limits.max_dfa_states product states.
Dfa product_dfa(const std::vector<const Dfa*>& parts, ProductRule rule, const CompileLimits& limits = {});
inline Dfa intersect_dfa(const Dfa& a, const Dfa& b, const CompileLimits& limits = {}) {
  return product_dfa({&a, &b}, ProductRule::Intersection, limits);
}
inline Dfa difference_dfa(const Dfa& a, const Dfa& b, const CompileLimits& limits = {}) {
  return product_dfa({&a, &b}, ProductRule::Difference, limits);
}

// Bytes from each state to the nearest accepting state (BFS over reversed transitions); -1 where
// none is reachable. With `usable`, only transitions on those bytes count (the bytes a vocabulary
// has a single-byte token for: then the distance is also a number of tokens that finishes).
std::vector<int32_t> distance_to_accept(const Dfa& dfa, const std::array<bool, 256>* usable = nullptr);

}  // namespace ib::constrain
