// A single-adapter server's way: per distinct adapter, W + s·B·A merged into the weights (the
// switch), its rows run, then the next adapter merged.
#include <chrono>

#include "core/registry.h"
#include "core/stats.h"
#include "kinds/lora/lora_variant.h"
#include "model/engine_studies.h"

namespace ib::lora {
namespace {

class MergedAdapters final : public LoraVariant {
  // Adapter by adapter; a switch only where the merged one changes (a pool of one adapter stays
  // merged from step to step, as a single-adapter server's would).
  void step(float* logits) override {
    switches_ = 0;
    for (size_t a = 0; a < groups_.size(); ++a) {
      if (groups_[a].empty()) continue;
      if (model::lora_adapters(*model_).merged_adapter() != static_cast<int>(a)) {
        const auto t0 = std::chrono::steady_clock::now();
        model::lora_adapters(*model_).merge_adapter(static_cast<int>(a));
        switch_seconds_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        ++switches_;
      }
      pass(groups_[a], logits);
    }
  }
  void after_validation() override {
    model::lora_adapters(*model_).merge_adapter(-1);
  }  // the timed steps start from the base weights
  std::vector<Metric> metrics() const override {
    std::vector<Metric> m = LoraVariant::metrics();
    m.push_back({"switches", static_cast<double>(switches_), "per step"});
    // One merge of W + s·B·A into every targeted projection, timed where it ran (median).
    if (!switch_seconds_.empty()) m.push_back({"switch", summarize(switch_seconds_).median * 1e3, "ms"});
    return m;
  }

  int switches_ = 0;                    // merges in the last step
  std::vector<double> switch_seconds_;  // every merge's wall time
};

const VariantRegistration cpu_merged_variant("lora",
                                             {"cpu_merged", Backend::Cpu,
                                              "per distinct adapter: merge W + s·B·A (the switch), run its rows; a "
                                              "single-adapter server's way"},
                                             make_variant<MergedAdapters>());

}  // namespace
}  // namespace ib::lora
