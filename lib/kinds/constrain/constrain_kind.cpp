#include "kinds/constrain/constrain_kind.h"

#include <algorithm>

#include "core/stats.h"

namespace ib::constrain {

KindInfo constrain_kind(const std::string& name, const std::string& doc, std::vector<KeySpec> keys, std::string smallest) {
  KindInfo k;
  k.name = name;
  k.group = "constrain";
  k.doc = doc;
  k.keys = std::move(keys);
  k.smallest = std::move(smallest);
  for (const auto& key : k.keys)
    if (key.name == "constraint") k.check = check_constraint_keys;
  return k;
}

VariantDecl host(std::string name, std::string doc, std::vector<std::string> uses) {
  VariantDecl d{std::move(name), Backend::Cpu, std::move(doc), std::move(uses)};
  d.host = true;
  return d;
}

void ConstraintSetup::load(const ConstraintKeys& keys, bool with_trie) {
  constraint = keys.constraint;
  source = constraint_source(constraint);
  options = keys.schema_options();
  vocab = load_vocabulary(keys.vocab);
  if (with_trie) trie = vocab_trie(vocab);
}

std::vector<Metric> mask_step_metrics(const std::vector<double>& step_us, size_t steps, size_t words) {
  const Stats st = summarize(step_us);
  std::vector<double> sorted = step_us;
  std::sort(sorted.begin(), sorted.end());
  return {{"steps_per_run", static_cast<double>(steps), ""},
          {"step_p50", st.median, "us"},
          {"step_p99", percentile_sorted(sorted, 0.99), "us"},
          {"step_mean", st.mean, "us"},
          {"bitmask", static_cast<double>(words * sizeof(uint32_t)), "B"}};
}

}  // namespace ib::constrain
