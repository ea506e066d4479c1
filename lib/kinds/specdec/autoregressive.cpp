// specdec's baseline: the target alone, one decode step per token (batched: every sequence's step
// in one pass). The smallest method: it drafts nothing, so it only generates.
#include "core/registry.h"
#include "kinds/specdec/specdec_variant.h"

namespace ib::specdec {
namespace {

class AutoregressiveVariant final : public SpecdecVariant {
 public:
  using SpecdecVariant::SpecdecVariant;

 private:
  bool speculates() const override { return false; }
  void configure(const SpecdecKeys&, uint64_t) override {}
  std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>&) override {
    return autoregressive_generate(*target_, tseq_, prompt_.back(), n_, cfg_.sampling, truth, forced_);
  }
  std::vector<std::vector<int32_t>> generate_all(const std::vector<Trajectory>&) override {
    return autoregressive_generate_batch(*target_, btseqs_, lasts(), n_, cfg_.sampling);
  }
  void add_metrics(std::vector<Metric>&) const override {}
};

// The keys the method reads besides those every variant reads.
const std::vector<std::string> kAutoregressiveReads = {"batch"};

const VariantListRegistration autoregressive_variants(
    "specdec", {
                   {{"autoregressive", Backend::Cuda, "the target alone, one decode step per token (the baseline)",
                     specdec_reads(kAutoregressiveReads, Backend::Cuda)},
                    IB_IF_CUDA(make_variant<AutoregressiveVariant>(Backend::Cuda))},
                   {{"cpu_autoregressive", Backend::Cpu, "the target alone on the CPU engine",
                     specdec_reads(kAutoregressiveReads, Backend::Cpu)},
                    make_variant<AutoregressiveVariant>(Backend::Cpu)},
               });

}  // namespace
}  // namespace ib::specdec
