// Union rules: a value that is either of several containers (an anyOf of objects, the union of
// schemas a `not` or a oneOf is rewritten into) is, in a rule body, an alternative of calls. A
// parser enters every one of them on the value's first byte and carries one stack per callee
// while their prefixes agree (the same `{`, the same keys): many stacks per step, and a mask per
// stack. Here such an alternative becomes one call of a union rule whose body is the union of the
// callees' bodies, so the DFA pipeline determinizes their shared prefix into one stack.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "constrain/regex.h"

namespace ib::constrain {

struct CallUnions {
  std::vector<Re> bodies;  // the rules' bodies, the union rules appended
  std::vector<std::string> names;
  // Per rule: the rules a union rule stands for (empty for the others). A union rule's body is
  // their bodies' union (with the call-free alternatives of the rules it was flattened through);
  // where that union is past its automaton limit the rule is compiled as its fallback instead:
  // the alternative of the members' calls (the same language, the stacks apart). Null for the
  // other rules.
  std::vector<std::vector<int32_t>> members;
  std::vector<Re> fallbacks;
};

// Unions of at most this many DFA states are compiled as one rule (a union of bodies that track
// their keys apart can take their states' product).
constexpr int64_t kMaxUnionStates = 20'000;

// `bodies` with every alternative of two or more calls rewritten as a call of a union rule. A
// callee joins a union when its body is readable (grammar_lengths.h) and starts with a byte; a
// callee that only forwards (its body one call, or an alternative of calls and call-free
// languages: the splits of dependentSchemas and if/else, a union of unions) is flattened into the
// rules and languages it forwards to, so a union's body never calls at its start and no rule
// enters itself without a byte. At most kMaxUnions union rules of at most kMaxUnionMembers rules
// each, and the grammar's rule limit: past them the alternatives stay calls.
constexpr size_t kMaxUnions = 1024;
constexpr size_t kMaxUnionMembers = 64;
CallUnions merge_call_unions(std::vector<Re> bodies, std::vector<std::string> names);

}  // namespace ib::constrain
