// lora's floor: the base model alone, no adapter — the step the adapters' work is added to.
#include "core/registry.h"
#include "kinds/lora/lora_variant.h"

namespace ib::lora {
namespace {

class BaseModel final : public LoraVariant {
  bool serves_adapters() const override { return false; }
  void step(float* logits) override { pass(all_rows(), logits); }
};

const VariantRegistration cpu_base_variant("lora",
                                           {"cpu_base", Backend::Cpu,
                                            "the base model alone, no adapter: the step the adapters' work is added to"},
                                           make_variant<BaseModel>());

}  // namespace
}  // namespace ib::lora
