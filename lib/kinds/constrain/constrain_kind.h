// What the constrain kinds' files share: their registration (group `constrain`, the spec-time check
// of the constraint keys), a host variant's declaration, the constraint and vocabulary a variant
// loads in prepare, and the mask rows' per-step metrics.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"

namespace ib::constrain {

// A constrain kind with `keys`, its smallest point (KindInfo::smallest); one with a `constraint`
// key checks it at spec time (check_constraint_keys).
KindInfo constrain_kind(const std::string& name, const std::string& doc, std::vector<KeySpec> keys, std::string smallest);
// A host variant (backend Cpu, VariantDecl::host) that reads `uses` (empty: every key of its
// kind). The mask work is host work: these variants run on the CPU whichever backend is selected.
VariantDecl host(std::string name, std::string doc, std::vector<std::string> uses = {});

// The constraint and vocabulary a variant works on, loaded in prepare (file reading is not timed).
struct ConstraintSetup {
  std::string constraint, source;
  SchemaOptions options;
  std::shared_ptr<const Vocabulary> vocab;
  std::shared_ptr<const VocabTrie> trie;

  // `with_trie`: also the vocabulary's trie (what token walks need).
  void load(const ConstraintKeys& keys, bool with_trie = true);
  CompiledConstraint compile(SchemaPath path = SchemaPath::Dfa) const {
    return compile_constraint(constraint, source, options, path);
  }
};

// constrain-mask's per-step metrics: steps per run (`steps`), step p50 / p99 / mean (µs) of the
// measured `step_us`, and the bitmask's bytes (`words` 32-bit words).
std::vector<Metric> mask_step_metrics(const std::vector<double>& step_us, size_t steps, size_t words);

}  // namespace ib::constrain
