// The `decode` kind's measurements, written once for both backends: end-to-end generation
// (TTFT, TPOT, TPS), one decode step at a fixed context, and one prefill.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/registry.h"
#include "core/value.h"
#include "core/variant.h"
#include "model/model.h"
#include "model/text_prompt.h"

namespace ib::model {

// The model of a point: a preset with random weights, or `checkpoint` with weights: DIR.
struct ModelChoice {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};
ModelChoice choose_model(const Point& p, uint64_t seed);
// The same for a preset name (or "checkpoint") and weights ("random" or a directory) under the
// spec keys `model_key` / `weights_key` (named in errors).
ModelChoice choose_model(const std::string& name, const std::string& weights, uint64_t seed,
                         const std::string& model_key = "model", const std::string& weights_key = "weights");
// Spec-time check of a model key and its weights key (every value of each): checkpoint needs a
// directory; a directory's config.json (for checkpoint) and safetensors headers are read and
// every tensor the config needs is checked, nothing is loaded. The problem names the weights key
// first. For KindInfo::check.
std::optional<KeyProblem> check_model_weights(const std::map<std::string, std::vector<Value>>& values,
                                              const std::string& model_key = "model", const std::string& weights_key = "weights");
// The `model` key of the kinds that run the engine (a preset with random weights unless `weights`,
// or checkpoint) with its default preset, and the `weights` key.
KeySpec model_key(const std::string& default_preset);
KeySpec weights_key();
// The `matmul` key (EngineOptions::matmul, default cublas) of the kinds that run the CUDA engine;
// `engines` says whose matmuls it sets in its doc ("CUDA engine"). Only CUDA variants read it
// (the CPU engine's choice is `cpu_matmul`: a sweep over either on the other backend would repeat rows). `with_matmul`
// adds it to a CUDA variant's keys; `matmul_of` is a point's choice (cublas where it is absent).
KeySpec matmul_key(const std::string& engines = "CUDA engine");
std::vector<std::string> with_matmul(std::vector<std::string> keys);
Matmul matmul_of(const Point& p);
// The keys of the llama.cpp peer rows (llamacpp_peer.cpp): llama_cpp, gguf, peer_tokens.
std::vector<KeySpec> llamacpp_peer_keys();
// The `cpu_matmul` key of the CPU engine's variants (default blas), and a point's choice.
KeySpec cpu_matmul_key();
CpuMatmul cpu_matmul_of(const Point& p);
std::vector<std::string> with_cpu_matmul(std::vector<std::string> keys);
// Deterministic prompt tokens of a point (token ids below the vocabulary size, seed-dependent).
std::vector<int32_t> random_prompt(int vocab, int n, uint64_t seed);

enum class DecodeMeasure { Generate, Step, Prefill };

class DecodeVariant : public Variant {
 public:
  DecodeVariant(Backend backend, DecodeMeasure what, bool cuda_graph) : backend_(backend), what_(what), cuda_graph_(cuda_graph) {}
  std::string unsupported(const Point& p) const override;
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override;
  Validation validate(BackendRuntime& rt) override;
  void run(BackendRuntime& rt) override;
  Work work() const override;
  std::vector<Metric> metrics() const override;
  std::string note() const override;
  std::vector<std::pair<std::string, std::string>> texts() const override;

 private:
  int length_of(int b) const;  // prompt tokens of sequence b
  std::vector<std::vector<float>> validation_logits(Model& m, int seq, std::vector<int32_t>& tokens);
  Validation check_against_recompute(const std::vector<std::vector<float>>& step_logits, const std::vector<int32_t>& tokens,
                                     int prompt_len, double tolerance);
  Validation validate_int8(Validation v, const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& got,
                           const std::vector<int32_t>& ref_tokens, const std::vector<int32_t>& tokens) const;

  Backend backend_;
  DecodeMeasure what_;
  bool cuda_graph_;
  ModelConfig config_;
  std::unique_ptr<WeightSource> weights_;  // kept for the reference engine of validate
  CpuMatmul cpu_matmul_ = CpuMatmul::Blas;
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
};

}  // namespace ib::model
