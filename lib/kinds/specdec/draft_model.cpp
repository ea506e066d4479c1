// Speculative decoding with a draft model (Leviathan et al., Chen et al.): the draft proposes K
// tokens, the target verifies them in one pass; batched, every sequence's drafts in one pass.
#include "core/registry.h"
#include "kinds/specdec/specdec_variant.h"

namespace ib::specdec {
namespace {

class DraftModelVariant final : public SpecdecVariant {
 public:
  using SpecdecVariant::SpecdecVariant;

 private:
  bool uses_draft_model() const override { return true; }
  void configure(const SpecdecKeys& keys, uint64_t) override { cfg_.k = static_cast<int>(keys.k); }
  std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>& history) override {
    return speculative_generate(*target_, tseq_, draft_.get(), dseq_, prompt_.back(), n_, cfg_, truth, forced_, history, stats_);
  }
  std::vector<std::vector<int32_t>> generate_all(const std::vector<Trajectory>& truths) override {
    return speculative_generate_batch(*target_, btseqs_, *draft_, bdseqs_, lasts(), n_, cfg_, truths, stats_);
  }
  // The analytic model at the measured acceptance and cost ratios.
  void add_metrics(std::vector<Metric>& m) const override {
    const Measured x = add_speculation_metrics(m, false);
    m.push_back({"E (analytic)", expected_tokens(x.alpha, cfg_.k), ""});
    m.push_back({"predicted speedup", predicted_speedup(x.alpha, cfg_.k, x.c, x.v), "×"});
  }
};

// The keys the method reads besides those every variant reads.
const std::vector<std::string> kDraftModelReads = {"draft", "draft_weights", "draft_layers", "k", "acceptance", "alpha", "batch"};

const VariantListRegistration draft_model_variants(
    "specdec", {
                   {{"draft_model", Backend::Cuda, "draft K tokens with the draft model, verify them in one target pass",
                     specdec_reads(kDraftModelReads, Backend::Cuda)},
                    IB_IF_CUDA(make_variant<DraftModelVariant>(Backend::Cuda))},
                   {{"cpu_draft_model", Backend::Cpu, "draft model + verify on the CPU engine",
                     specdec_reads(kDraftModelReads, Backend::Cpu)},
                    make_variant<DraftModelVariant>(Backend::Cpu)},
               });

}  // namespace
}  // namespace ib::specdec
