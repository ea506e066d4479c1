// How few bytes finish a grammar's rules (grammar.h): read off the rule bodies' regexes where no
// DFA is compiled yet (a rule's fewest bytes, so whether it can finish at all), and per state of a
// compiled rule (its DFA's, calls weighing their callee's fewest bytes). The two agree: a rule's
// DFA has its body's language, so the start state's distance is the body's fewest bytes.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "constrain/grammar.h"

namespace ib::constrain {

// What rule bodies' regexes say about their calls: only nodes with a marker byte below them
// (RegexNode::non_text) are read, each once.
class RegexCallReader {
 public:
  // Whether every call marker byte in the body is part of a call in a concatenation (re_call's
  // form), so that its calls and lengths can be read without compiling it.
  bool readable(const Re& body);
  // The rules a readable body calls (each once).
  std::vector<int32_t> callees(const Re& body);

 private:
  bool readable(const RegexNode* n);
  std::unordered_map<const RegexNode*, bool> readable_;
};

// The fewest bytes of each rule's language (Grammar::kNoLength: none), counting only `usable`
// bytes (all text bytes when null; call marker bytes never), to a fixed point over the rules
// together; with every text byte usable, a node without calls costs nothing (RegexNode::text_length). A
// rule with compiled[r] set is read off its DFA; the others off their regexes.
std::vector<int64_t> rule_min_lengths(const std::vector<Re>& bodies, const std::vector<const GrammarRule*>& compiled,
                                      const std::array<bool, 256>* usable, RegexCallReader& calls);

// Per state of rule r: the fewest usable bytes that finish it, a call weighing lengths[callee];
// kNoDistance where none.
constexpr int32_t kNoDistance = INT32_MAX;
std::vector<int32_t> rule_state_distances(const GrammarRule& r, const std::vector<int64_t>& lengths,
                                          const std::array<bool, 256>* usable);

}  // namespace ib::constrain
