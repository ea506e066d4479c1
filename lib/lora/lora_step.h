// The `lora` kind's measurement: one decode step (or one prefill) of a batch whose sequences use
// different LoRA adapters, served one of four ways (Serving). Every way is validated against a
// plain CPU engine on the merged float32 weights W + scaling·B·A of each checked sequence's adapter.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/variant.h"
#include "lora/lora_keys.h"
#include "model/model.h"

namespace ib::lora {

enum class Serving {
  Base,       // the base model alone, no adapter: the floor the others are measured against
  Batched,    // one pass; each adapter's rows gathered into one low-rank product (Punica SGMV, S-LoRA)
  Merged,     // a single-adapter server: per distinct adapter, W + s·B·A merged in, its rows run
  Unbatched,  // each sequence alone with its own adapter (the reference's schedule)
};

class LoraStep : public Variant {
 public:
  explicit LoraStep(Serving how) : how_(how) {}
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override;
  Validation validate(BackendRuntime& rt) override;
  void run(BackendRuntime& rt) override;
  std::vector<Metric> metrics() const override;
  std::string note() const override;

 private:
  // The pass the row times; with `logits` ([batch][vocab]) it also returns each sequence's last
  // logits (validation).
  void step(float* logits);
  // Runs `seqs` (the batch's indices) in one pass of the measured kind.
  void pass(const std::vector<size_t>& rows, float* logits);

  Serving how_;
  LoraKeys keys_;
  model::ModelConfig config_;
  std::unique_ptr<model::WeightSource> weights_;
  std::unique_ptr<model::Model> model_;
  std::vector<model::LoraAdapter> adapters_;  // the resident pool (kept for the reference)
  std::vector<int> seqs_, adapter_of_;        // per batch row: the engine's sequence and its adapter
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<std::vector<size_t>> groups_;  // the rows of each distinct adapter, by adapter id
  int distinct_ = 0;
  int switches_ = 0;                    // merges in the last step (Merged)
  std::vector<double> switch_seconds_;  // every merge's wall time (Merged)
  uint64_t seed_ = 0;
};

}  // namespace ib::lora
