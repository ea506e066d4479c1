// lora's floor: the base model alone, no adapter — the step the adapters' work is added to.
#include "core/registry.h"
#include "kinds/lora/lora_variant.h"

namespace ib::lora {
namespace {

class Base final : public LoraVariant {
  bool serves_adapters() const override { return false; }
  void step(float* logits) override { pass(all_rows(), logits); }
};

const VariantRegistration cpu_base_variant("lora",
                                           {"cpu_base", Backend::Cpu,
                                            "the base model alone, no adapter: the step the adapters' work is added to"},
                                           make_variant<Base>());

}  // namespace
}  // namespace ib::lora
