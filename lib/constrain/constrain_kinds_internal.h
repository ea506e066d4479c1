// The registration helpers the constrain kinds' files share (compile_mask_kinds.cpp,
// generation_kinds.cpp, overhead_kind.cpp, keywords_kind.cpp, python_peer.cpp); defined once, in
// kind_setup.cpp.
#pragma once

#include <string>
#include <vector>

#include "core/registry.h"
#include "core/value.h"
#include "core/variant.h"

namespace ib::constrain::detail {

// A constrain kind; one with a `constraint` key checks it at spec time (check_constraint_keys).
KindInfo kind(const std::string& name, const std::string& doc, std::vector<KeySpec> keys);
// A host variant (backend Cpu, VariantDecl::host) that reads `uses` (empty: every key of its
// kind). The mask work is host work: these variants run on the CPU whichever backend is selected.
VariantDecl host(std::string name, std::string doc, std::vector<std::string> uses = {});
// The names of `keys` (a variant's VariantDecl::uses).
std::vector<std::string> key_names(const std::vector<KeySpec>& keys);
// `keys` followed by `more`.
std::vector<KeySpec> with(std::vector<KeySpec> keys, std::vector<KeySpec> more);
// constrain-mask's keys: the constraint keys and `documents`.
std::vector<KeySpec> mask_kind_keys();
// constrain-mask's per-step metrics: steps per run (`steps`), step p50 / p99 / mean (µs) of the
// measured `step_us`, and the bitmask's bytes (`words` 32-bit words).
std::vector<Metric> mask_step_metrics(const std::vector<double>& step_us, size_t steps, size_t words);

}  // namespace ib::constrain::detail
