// The base of the `lora` kind's variants: one decode step (or one prefill) of a batch whose
// sequences use different LoRA adapters. It builds the base model, the resident pool and the batch,
// runs passes over rows, and validates every way against a plain CPU engine on the merged float32
// weights W + scaling·B·A of each checked sequence's adapter. A way of serving (one class per
// variant, a file of its own) says whether it attaches the adapters and how a step runs its rows.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/variant.h"
#include "kinds/lora/lora_keys.h"
#include "model/model.h"

namespace ib::lora {

class LoraVariant : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) final;
  Validation validate(BackendRuntime& rt) final;
  void run(BackendRuntime& rt) final;
  std::vector<Metric> metrics() const override;
  std::string note() const final;

 protected:
  // ---- what a way of serving declares ----
  // The sequences run with their adapters (false: the base model alone, the floor).
  virtual bool serves_adapters() const { return true; }
  // One step of the whole batch; with `logits` ([batch][vocab]) each sequence's last logits too.
  virtual void step(float* logits) = 0;
  // After validation's step, before the timed ones.
  virtual void after_validation() {}

  // ---- for the ways ----
  // Runs `rows` (the batch's indices) in one pass of the measured kind (decode or prefill).
  void pass(const std::vector<size_t>& rows, float* logits);
  std::vector<size_t> all_rows() const;

  LoraKeys keys_;
  std::unique_ptr<model::Model> model_;
  std::vector<std::vector<size_t>> groups_;  // the rows of each distinct adapter, by adapter id

 private:
  int adapter_served(size_t row) const { return serves_adapters() ? adapter_of_[row] : -1; }

  model::ModelConfig config_;
  std::unique_ptr<model::WeightSource> weights_;
  std::vector<model::LoraAdapter> adapters_;  // the resident pool (kept for the reference)
  std::vector<int> seqs_, adapter_of_;        // per batch row: the engine's sequence and its adapter
  std::vector<std::vector<int32_t>> prompts_;
  int distinct_ = 0;
};

}  // namespace ib::lora
