// Whether a finished document is valid, by an oracle independent of the DFA the masks come from:
// what the constrain kinds and the engine's tests gate a constrained output on.
#pragma once

#include <functional>
#include <string>

#include "constrain/constraint.h"

namespace ib::constrain {

// A schema constraint parses the text as JSON and checks it with SchemaValidator (under the draft
// the compiler read the schema as); regex: and choice: match the pattern's DFA.
std::function<bool(const std::string&)> validity_check(const CompiledConstraint& c);

}  // namespace ib::constrain
