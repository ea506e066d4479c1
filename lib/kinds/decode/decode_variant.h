// The base of the `decode` kind's variants: the engine on a backend with a batch of prompts (random
// tokens or a text prompt), the gate every measurement shares (the cached steps' logits against one
// uncached prefill of the whole sequence, and on the CPU the engine's products against its float32
// reference GEMV), and the shared metrics and notes. A measurement (generate, decode step,
// prefill: one class per variant, a file of its own) says what it caches, what its check runs,
// what one run times and its work.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/variant.h"
#include "kinds/decode/decode_keys.h"
#include "model/model.h"
#include "model/text_prompt.h"

namespace ib::model {

class DecodeVariant : public Variant {
 public:
  DecodeVariant(Backend backend, bool cuda_graph) : backend_(backend), cuda_graph_(cuda_graph) {}
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) final;
  Validation validate(BackendRuntime& rt) final;
  std::vector<Metric> metrics() const final;
  std::string note() const final;
  std::vector<std::pair<std::string, std::string>> texts() const final;

 protected:
  // ---- what a measurement declares ----
  // Tokens generated per sequence (a generation's `new_tokens`; 0 for the others).
  virtual int new_tokens(const DecodeKeys&) const { return 0; }
  // Cache room each sequence needs past its prompt.
  virtual int capacity_past_prompt() const { return 1; }
  // The prompts are prefilled once, at prepare (a decode step at a fixed context).
  virtual bool caches_prompts() const { return false; }
  // What validation runs on sequence 0 of `m` (the measured engine, or the reference GEMV's): the
  // logits it compares, and in `tokens` the sequence that produced them.
  virtual std::vector<std::vector<float>> validation_logits(Model& m, int seq, std::vector<int32_t>& tokens) = 0;
  // Its metrics before the shared ones (weights, KV).
  virtual void add_metrics(std::vector<Metric>&) const {}

  // ---- for the measurements ----
  int length_of(int b) const;  // prompt tokens of sequence b
  static double seconds_since(std::chrono::steady_clock::time_point t0);
  // K/V bytes a token occupies in the engine's cache (bf16 on the GPU, float32 on the CPU).
  double kv_bytes_per_token() const;

  Backend backend_;
  bool cuda_graph_;
  ModelConfig config_;
  std::unique_ptr<Model> model_;
  int batch_ = 1, prompt_ = 0, new_tokens_ = 0;
  SamplingParams sampling_;
  std::vector<std::vector<int32_t>> prompts_;  // prompt_ tokens each, or a text prompt's own count
  std::optional<TextPrompts> text_;            // when the point names a text prompt
  std::vector<int32_t> generated_;             // sequence 0's tokens of the last generation (text prompts)
  std::vector<int> seqs_;
  uint64_t step_ = 0;
  // Per-run phase times and rates: medians reported as metrics (the runner's warmup runs are
  // among them; the median keeps them from mattering).
  std::vector<double> ttft_, tpot_, tps_;

 private:
  Validation check_against_recompute(const std::vector<std::vector<float>>& step_logits, const std::vector<int32_t>& tokens,
                                     int prompt_len, double tolerance);
  Validation validate_int8(Validation v, const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& got,
                           const std::vector<int32_t>& ref_tokens, const std::vector<int32_t>& tokens) const;

  std::unique_ptr<WeightSource> weights_;  // kept for the reference engine of validate
  CpuMatmul cpu_matmul_ = CpuMatmul::Blas;
};

}  // namespace ib::model
