// Multi-adapter batching (Punica's SGMV, S-LoRA): one pass of the whole batch — the base matmuls,
// then per adapter its rows' x·Aᵀ·Bᵀ gathered into one low-rank product (the engine's unmerged path).
#include "core/registry.h"
#include "kinds/lora/lora_variant.h"

namespace ib::lora {
namespace {

class BatchedAdapters final : public LoraVariant {
  void step(float* logits) override { pass(all_rows(), logits); }
};

const VariantRegistration cpu_batched_variant(
    "lora",
    {"cpu_batched", Backend::Cpu,
     "one pass of the whole batch: base matmuls, then per adapter its rows' x·Aᵀ·Bᵀ gathered (SGMV's segments)"},
    make_variant<BatchedAdapters>());

}  // namespace
}  // namespace ib::lora
