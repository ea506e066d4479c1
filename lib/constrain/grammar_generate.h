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
// one, a call the callee's fewest bytes (read off the rule bodies for all rules at once,
// grammar_lengths.h). With `usable`, only those bytes count (the bytes a vocabulary has
// single-byte tokens for). A rule's row is computed when first asked for (from any thread), as the
// grammar compiles its DFA; the grammar must outlive the distances.
class GrammarDistances {
 public:
  static constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  GrammarDistances() = default;
  GrammarDistances(const Grammar& g, const std::array<bool, 256>* usable);
  // [state] of rule r; kNone: no usable way to finish.
  const std::vector<int32_t>& of(int32_t rule) const;
  // A stack's: its top frame's distance plus each frame's below it (they wait at return states).
  int32_t finish(const GrammarStack& stack) const;
  // A position's: its nearest stack's.
  int32_t finish(const GrammarStacks& stacks) const;

 private:
  const Grammar* g_ = nullptr;
  bool all_usable_ = true;
  std::array<bool, 256> usable_{};
  std::vector<int64_t> lengths_;  // each rule's fewest usable bytes
  LazySlots<std::vector<int32_t>> rows_;
};
GrammarDistances grammar_distances(const Grammar& g, const std::array<bool, 256>* usable = nullptr);

// A random document from the start: bytes drawn over those that keep a stack alive (printable
// ASCII 20× likelier), then steered to the nearest end once `soft_bytes` are written; it stops
// where the document may end with probability 1/4 per byte. Empty when the grammar has none.
std::string random_grammar_document(const Grammar& g, const GrammarDistances& d, std::mt19937_64& rng, size_t soft_bytes = 160);

}  // namespace ib::constrain
