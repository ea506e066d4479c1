// The `constrain-mask` kind (§8.5): the cost of using a constraint's token masks at each decode
// step, from the precomputed index or built lazily; the grammar path's variant is
// mask_grammar.cpp's, the XGrammar / llguidance peers python_peer.cpp's.
#include <chrono>
#include <cstring>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/token_index.h"
#include "core/memory.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"

namespace ib::constrain {
namespace {

class MaskStep : public Variant {
 public:
  explicit MaskStep(bool precompute) : precompute_(precompute) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const MaskKeys k = mask_keys().read(p);
    setup_.load(k.constraint);
    CompiledConstraint c = setup_.compile();
    dfa_ = c.dfa;
    if (precompute_)
      index_ = std::make_unique<TokenMaskIndex>(dfa_, setup_.vocab);
    else
      lazy_ = std::make_unique<LazyTokenMasker>(dfa_, setup_.vocab);
    // The documents every run decodes: random valid documents, tokenised greedily.
    std::mt19937_64 rng(seed);
    const auto dist = distance_to_accept(*dfa_);
    for (int64_t d = 0; d < k.documents; ++d)
      docs_.push_back(tokenize_greedy(random_document(*dfa_, dist, dfa_->start, rng), *dfa_, dfa_->start, *setup_.trie));
    words_ = (static_cast<size_t>(setup_.vocab->size()) + 31) / 32;
    staging_.allocate(words_, "step bitmask");
  }
  // Every target token is allowed by its step's mask, and EOS at each document's end.
  Validation validate(BackendRuntime&) override {
    size_t bad = 0, steps = 0;
    for (const auto& doc : docs_) {
      int32_t s = dfa_->start;
      for (int32_t tok : doc) {
        bad += !mask_allows(mask(s), tok);
        s = advance(*dfa_, *setup_.vocab, s, tok);
        ++steps;
        if (s < 0) break;
      }
      bad += s < 0 || !mask_allows(mask(s), setup_.vocab->eos);
    }
    step_us_.clear();
    return {bad == 0, "disallowed_steps", static_cast<double>(bad), 0, fmt::format("{} steps of valid documents", steps)};
  }
  // One step: the state's mask into the staging bitmask (what goes to the GPU), then the DFA
  // advances by the chosen token. The lazy variant starts cold every run.
  void run(BackendRuntime&) override {
    if (lazy_) lazy_->clear();
    for (const auto& doc : docs_) {
      int32_t s = dfa_->start;
      for (size_t i = 0; i <= doc.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(staging_.data(), mask(s), words_ * sizeof(uint32_t));
        if (i < doc.size()) s = advance(*dfa_, *setup_.vocab, s, doc[i]);
        step_us_.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  std::vector<Metric> metrics() const override {
    size_t steps = 0;
    for (const auto& d : docs_) steps += d.size() + 1;
    std::vector<Metric> m = mask_step_metrics(step_us_, steps, words_);
    if (lazy_) m.push_back({"masks_built", static_cast<double>(lazy_->cached()), ""});
    return m;
  }

 private:
  const uint32_t* mask(int32_t s) { return index_ ? index_->mask(s) : lazy_->mask(s); }
  bool precompute_;
  ConstraintSetup setup_;
  std::shared_ptr<const Dfa> dfa_;
  std::unique_ptr<TokenMaskIndex> index_;
  std::unique_ptr<LazyTokenMasker> lazy_;
  std::vector<std::vector<int32_t>> docs_;
  size_t words_ = 0;
  HostBuffer<uint32_t> staging_;
  std::vector<double> step_us_;
};

const KindRegistration mask_kind(constrain_kind(
    "constrain-mask",
    "Per-step mask cost while decoding `documents` random valid documents: the state's mask copied into the step's "
    "bitmask, then the DFA advanced by the token. One sample = all documents; per-step p50/p99 as metrics.",
    mask_keys().keys(), "constraint: person\ndocuments: 1\n"));

// Ours read the kind's keys but the python peers'.
const VariantRegistration reg_constrain_mask_precomputed(
    "constrain-mask", host("precomputed", "mask lookup in the precomputed index", mask_reads()), make_variant<MaskStep>(true));
const VariantRegistration reg_constrain_mask_lazy(
    "constrain-mask",
    host("lazy", "lazy masks, cold at the start of every sample (the vocabulary's string-content pieces are kept, like its trie)",
         mask_reads()),
    make_variant<MaskStep>(false));

}  // namespace
}  // namespace ib::constrain
