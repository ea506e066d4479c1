// Random documents of a grammar, tokenised greedily: what the grammar path's compile and mask rows
// check and walk (each a token sequence the grammar's masks must allow).
#pragma once

#include <cstdint>
#include <vector>

#include "constrain/grammar.h"
#include "kinds/constrain/constrain_kind.h"

namespace ib::constrain {

std::vector<std::vector<int32_t>> grammar_documents(const Grammar& g, const ConstraintSetup& setup, int64_t n, uint64_t seed);

// Why a constraint has no grammar path ("" when it has: a JSON Schema).
std::string grammar_path_unsupported(const ConstraintKeys& keys);

}  // namespace ib::constrain
