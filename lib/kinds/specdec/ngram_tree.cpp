// Prompt lookup as a tree: the continuations of several earlier occurrences of the last n-gram,
// verified together in one target pass under a tree mask.
#include "core/registry.h"
#include "kinds/specdec/prompt_lookup.h"

namespace ib::specdec {
namespace {

class NgramTreeVariant final : public PromptLookup {
 public:
  using PromptLookup::PromptLookup;

 private:
  void configure(const SpecdecKeys& keys, uint64_t seed) override {
    PromptLookup::configure(keys, seed);
    cfg_.branches = static_cast<int>(keys.branches);
  }
  int verify_nodes() const override { return cfg_.k * cfg_.branches; }
  std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>& history) override {
    return speculative_generate_tree(*target_, tseq_, nullptr, dseq_, prompt_.back(), n_, cfg_, truth, forced_, history, stats_);
  }
  void add_metrics(std::vector<Metric>& m) const override { add_speculation_metrics(m, true); }
};

// The keys the method reads besides those every variant reads.
const std::vector<std::string> kNgramTreeReads = {"k", "branches", "ngram_min", "ngram_max"};

const VariantListRegistration ngram_tree_variants(
    "specdec",
    {
        {{"ngram_tree", Backend::Cuda, "the continuations of several earlier occurrences as a token tree, verified in one pass",
          specdec_reads(kNgramTreeReads, Backend::Cuda)},
         IB_IF_CUDA(make_variant<NgramTreeVariant>(Backend::Cuda))},
        {{"cpu_ngram_tree", Backend::Cpu, "several prompt-lookup candidates as a tree, verified in one pass on the CPU engine",
          specdec_reads(kNgramTreeReads, Backend::Cpu)},
         make_variant<NgramTreeVariant>(Backend::Cpu)},
    });

}  // namespace
}  // namespace ib::specdec
