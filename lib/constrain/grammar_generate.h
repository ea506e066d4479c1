// What generation needs of a grammar (grammar.h) beside its masks: how far a parse position is
// from a finished document, and random documents of the grammar (for mask timing where a schema
// has no instances, as generate.h's random_document does for a DFA).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "constrain/grammar.h"

namespace ib::constrain {

// The fewest bytes that finish each rule from each of its states: a byte on a usable class costs
// one, a call the callee's fewest bytes from its start (a fixed point over all rules together).
// With `usable`, only those bytes count (the bytes a vocabulary has single-byte tokens for).
struct GrammarDistances {
  static constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  std::vector<std::vector<int32_t>> dist;  // [rule][state]; kNone: no usable way to finish
  // A stack's: its top frame's distance plus each frame's below it (they wait at return states).
  int32_t finish(const GrammarStack& stack) const;
  // A position's: its nearest stack's.
  int32_t finish(const GrammarStacks& stacks) const;
};
GrammarDistances grammar_distances(const Grammar& g, const std::array<bool, 256>* usable = nullptr);

// A random document from the start: bytes drawn over those that keep a stack alive (printable
// ASCII 20× likelier), then steered to the nearest end once `soft_bytes` are written; it stops
// where the document may end with probability 1/4 per byte. Empty when the grammar has none.
std::string random_grammar_document(const Grammar& g, const GrammarDistances& d, std::mt19937_64& rng, size_t soft_bytes = 160);

}  // namespace ib::constrain
