// Lookahead decoding (Fu et al.; no draft model): a Jacobi window of the target's own guesses and a
// pool of the n-grams it produced, both verified in one target pass under a tree mask (greedy).
#include "specdec/lookahead.h"
#include "core/registry.h"
#include "kinds/specdec/specdec_variant.h"

namespace ib::specdec {
namespace {

class LookaheadVariant final : public SpecdecVariant {
 public:
  using SpecdecVariant::SpecdecVariant;

 private:
  std::string method_unsupported(const SpecdecKeys& keys) const override {
    return keys.sampled() ? "lookahead rows verify greedily (temperature 0)" : "";
  }
  void configure(const SpecdecKeys& keys, uint64_t seed) override {
    la_.window = static_cast<int>(keys.lookahead_window);
    la_.ngram = static_cast<int>(keys.lookahead_ngram);
    la_.candidates = static_cast<int>(keys.lookahead_candidates);
    la_.prompt_pool = keys.lookahead_prompt;
    la_.seed = seed;
  }
  int verify_nodes() const override { return lookahead_max_nodes(la_) + la_.window + la_.ngram; }
  std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>& history) override {
    return lookahead_generate(*target_, tseq_, prompt_.back(), n_, la_, truth, forced_, history, stats_);
  }
  // No drafted-token acceptance (every node is a candidate): where the accepted tokens came from
  // instead, the pool's size, and the host's bookkeeping per step.
  void add_metrics(std::vector<Metric>& m) const override {
    add_positions(m);
    const double steps = static_cast<double>(stats_.steps), acc = static_cast<double>(stats_.accepted);
    const double verify = steps > 0 ? stats_.verify_seconds / steps : 0;
    m.push_back({"tokens/step", stats_.tokens_per_step(), ""});
    m.push_back({"tree nodes", steps > 0 ? static_cast<double>(stats_.tree_nodes) / steps : 0, ""});
    m.push_back({"verify", verify * 1e3, "ms"});
    m.push_back({"v", verify / target_step_, ""});
    m.push_back({"from pool", acc > 0 ? 100.0 * static_cast<double>(stats_.pool_accepted) / acc : 0, "%"});
    m.push_back({"from window", acc > 0 ? 100.0 * static_cast<double>(stats_.window_accepted) / acc : 0, "%"});
    m.push_back({"pool n-grams", static_cast<double>(stats_.pool_ngrams), ""});
    m.push_back({"bookkeeping", steps > 0 ? stats_.draft_seconds / steps * 1e3 : 0, "ms"});
  }

  LookaheadConfig la_;
};

// The keys the method reads besides those every variant reads.
const std::vector<std::string> kLookaheadReads = {"lookahead_window", "lookahead_ngram", "lookahead_candidates",
                                                  "lookahead_prompt"};

const VariantListRegistration lookahead_variants(
    "specdec",
    {
        {{"lookahead", Backend::Cuda,
          "lookahead decoding (no draft model): a Jacobi window of the target's own guesses and a pool of the n-grams it "
          "produced, both verified in one target pass under a tree mask (greedy)",
          specdec_reads(kLookaheadReads, Backend::Cuda)},
         IB_IF_CUDA(make_variant<LookaheadVariant>(Backend::Cuda))},
        {{"cpu_lookahead", Backend::Cpu, "lookahead decoding on the CPU engine", specdec_reads(kLookaheadReads, Backend::Cpu)},
         make_variant<LookaheadVariant>(Backend::Cpu)},
    });

}  // namespace
}  // namespace ib::specdec
