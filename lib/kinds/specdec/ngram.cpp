// Prompt lookup (n-gram drafting): the continuation of the longest earlier occurrence of the last
// n-gram as the draft, no draft model; verified in one target pass.
#include "core/registry.h"
#include "kinds/specdec/prompt_lookup.h"

namespace ib::specdec {
namespace {

class NgramVariant final : public PromptLookup {
 public:
  using PromptLookup::PromptLookup;

 private:
  std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>& history) override {
    return speculative_generate(*target_, tseq_, nullptr, dseq_, prompt_.back(), n_, cfg_, truth, forced_, history, stats_);
  }
  void add_metrics(std::vector<Metric>& m) const override {
    const Measured x = add_speculation_metrics(m, false);
    m.push_back({"E (analytic)", expected_tokens(x.alpha, cfg_.k), ""});
  }
};

// The keys the method reads besides those every variant reads.
const std::vector<std::string> kNgramReads = {"k", "ngram_min", "ngram_max"};

const VariantListRegistration ngram_variants(
    "specdec",
    {
        {{"ngram", Backend::Cuda, "draft by prompt lookup (no draft model), verify in one target pass",
          specdec_reads(kNgramReads, Backend::Cuda)},
         IB_IF_CUDA(make_variant<NgramVariant>(Backend::Cuda))},
        {{"cpu_ngram", Backend::Cpu, "prompt lookup + verify on the CPU engine", specdec_reads(kNgramReads, Backend::Cpu)},
         make_variant<NgramVariant>(Backend::Cpu)},
    });

}  // namespace
}  // namespace ib::specdec
