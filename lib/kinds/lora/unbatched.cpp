// No batching: each sequence in a pass of its own with its own adapter (the reference's schedule).
#include "core/registry.h"
#include "kinds/lora/lora_variant.h"

namespace ib::lora {
namespace {

class UnbatchedAdapters final : public LoraVariant {
  void step(float* logits) override {
    for (size_t b : all_rows()) pass({b}, logits);
  }
};

const VariantRegistration cpu_unbatched_variant("lora",
                                                {"cpu_unbatched", Backend::Cpu,
                                                 "each sequence in its own pass with its own adapter (no batching)"},
                                                make_variant<UnbatchedAdapters>());

}  // namespace
}  // namespace ib::lora
