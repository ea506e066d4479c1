// The `constrain-validity` kind (§8.5): what the mask does to the documents a decoder writes, their
// validity with and without it, by the documented synthetic noisy emitter (generate.h).
#include <algorithm>
#include <functional>
#include <memory>
#include <random>

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/token_index.h"
#include "constrain/validity_check.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"

namespace ib::constrain {
namespace {

class ValidityVariant : public Variant {
 public:
  explicit ValidityVariant(bool constrained) : constrained_(constrained) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const ValidityKeys k = validity_keys().read(p);
    setup_.load(k.constraint);
    compiled_ = setup_.compile();
    dist_ = distance_to_accept(*compiled_.dfa);
    epsilon_ = k.epsilon;
    retries_ = static_cast<int>(k.retries);
    documents_ = static_cast<int>(k.documents);
    seed_ = seed;
    if (constrained_) masker_ = std::make_unique<LazyTokenMasker>(compiled_.dfa, setup_.vocab);
    valid_ = validity_check(compiled_);
  }
  // The harness itself: with no noise every target document is valid; constrained, every
  // output is valid at the configured noise too (the claim the chapter makes).
  Validation validate(BackendRuntime& rt) override {
    std::mt19937_64 rng(seed_ + 17);
    EmitterStats clean = simulate(0.0, rng);
    run(rt);
    const int invalid = (clean.documents - clean.valid) + (constrained_ ? last_.documents - last_.valid : 0);
    return {invalid == 0, "invalid_documents", static_cast<double>(invalid), 0,
            constrained_ ? "noise-free targets and every constrained output, by an independent validator"
                         : "noise-free targets, by an independent validator"};
  }
  void run(BackendRuntime&) override {
    std::mt19937_64 rng(seed_);  // the same documents every run: stable metrics
    last_ = simulate(epsilon_, rng);
  }
  std::vector<Metric> metrics() const override {
    const double docs = std::max(1, last_.documents);
    return {{"valid", 100.0 * last_.valid / docs, "%"},
            {"attempts_per_doc", static_cast<double>(last_.attempts) / docs, ""},
            {"tokens_per_doc", static_cast<double>(last_.tokens) / docs, ""},
            {"wasted_tokens_per_doc", static_cast<double>(last_.wasted_tokens) / docs, ""}};
  }

 private:
  EmitterStats simulate(double eps, std::mt19937_64& rng) {
    if (constrained_)
      return emit_constrained(*compiled_.dfa, dist_, *setup_.vocab, *setup_.trie, *masker_, eps, documents_, rng, valid_);
    return emit_unconstrained(*compiled_.dfa, dist_, *setup_.vocab, *setup_.trie, eps, documents_, retries_, rng, valid_);
  }
  bool constrained_;
  ConstraintSetup setup_;
  CompiledConstraint compiled_;
  std::vector<int32_t> dist_;
  double epsilon_ = 0;
  int retries_ = 1, documents_ = 1;
  uint64_t seed_ = 0;
  std::unique_ptr<LazyTokenMasker> masker_;
  std::function<bool(const std::string&)> valid_;
  EmitterStats last_;
};

const KindRegistration validity_kind(constrain_kind(
    "constrain-validity",
    "The documented synthetic noisy emitter: it follows valid target documents and errs with probability epsilon per "
    "token; constrained, errors stay inside the mask; unconstrained, the document is parsed and validated at the end "
    "and retried up to `retries` times. Validity by an independent validator.",
    validity_keys().keys(), "constraint: person\ndocuments: 2\n"));

const VariantListRegistration validity_variants(
    "constrain-validity",
    {{host("constrained", "the emitter under the token mask"), make_variant<ValidityVariant>(true)},
     {host("unconstrained_retry", "no mask; parse, validate, retry"), make_variant<ValidityVariant>(false)}});
}  // namespace
}  // namespace ib::constrain
