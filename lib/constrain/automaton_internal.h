// The raw DFA that the subset construction (automaton.cpp) and the product construction
// (automaton_product.cpp) build, and the minimisation both end with (automaton_minimize.cpp).
// Internal to the automaton's files, not a public header.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "constrain/automaton.h"

namespace ib::constrain::detail {

// A DFA as the subset and product constructions find it: states 0..n-1 with start 0, each with its
// transitions (byte class, target) in class order, the classes absent leading nowhere. Sparse: a
// state of a schema's DFA uses about one class in six.
struct RawDfa {
  int nclass = 0;
  std::vector<int32_t> row_start = {0};  // state s: entries [row_start[s], row_start[s + 1])
  std::vector<uint16_t> cls;
  std::vector<int32_t> to;
  std::vector<uint8_t> accept;
  int32_t states() const { return static_cast<int32_t>(row_start.size()) - 1; }
  void add(int c, int32_t t) {
    cls.push_back(static_cast<uint16_t>(c));
    to.push_back(t);
  }
  void end_row() { row_start.push_back(static_cast<int32_t>(to.size())); }
};

// The minimal DFA of a raw one over the byte classes `nfa_class` (automaton_minimize.cpp).
Dfa minimize_raw(const RawDfa& raw, const std::array<uint8_t, 256>& nfa_class);

}  // namespace ib::constrain::detail
