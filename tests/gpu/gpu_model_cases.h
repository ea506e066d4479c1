// What the CUDA engine's tests against the CPU engine share (test_gpu_model.cpp,
// test_gpu_model_paths.cpp): the model shapes, prompts, the comparisons, and a CPU and a CUDA
// engine made from the same weights.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_stream.h"

#include "model/model.h"
#include "numerics/random.h"

namespace ib::model::gpu_model_cases {

using ib::testing::TestStream;

inline ModelConfig P(const std::string& name) {
  auto c = preset(name);
  EXPECT_TRUE(c.has_value()) << name;
  return *c;
}

// A tiny-like shape with FlashAttention-2's head_dim (64 or 128) and GQA; `qwen` adds tiny-gqa's
// q/k/v biases, tied embeddings, rope theta and 48-token window (prefill chunks of 16 rows or
// more use flash2 with its sliding window, shorter ones the split-K kernel).
inline ModelConfig with_head_dim(int d, bool qwen = false) {
  ModelConfig c = qwen ? P("tiny-gqa") : P("tiny");
  c.name = "tiny-hd" + std::to_string(d) + (qwen ? "-window" : "");
  c.hidden = 256;
  c.head_dim = d;
  c.heads = 256 / d;
  c.kv_heads = c.heads / 2;
  c.mlp = 512;
  c.vocab = 512;
  return c;
}

// What Hugging Face checkpoints add (lib/model/config.cpp reads them from config.json): Llama's
// attention_bias (q/k/v and o_proj) and mlp_bias, llama3 RoPE scaling and a window on one layer
// of two (Qwen2 layer_types); and Qwen3's per-head q/k RMSNorm with YaRN scaling at head_dim 64.
inline ModelConfig hf_features() {
  ModelConfig c = P("tiny");
  c.name = "tiny-bias-llama3-layer-window";
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_positions = 32;
  c.layer_windows = {0, 6};
  c.sliding_window = 6;
  return c;
}
inline ModelConfig qwen3_yarn() {
  ModelConfig c = with_head_dim(64);
  c.name = "tiny-qwen3-yarn";
  c.qk_norm = true;
  c.rope_theta = 1000000.0f;
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_positions = 16;
  c.rope_scaling.attention_factor = 0.1 * std::log(4.0) + 1.0;
  return c;
}

inline std::vector<ModelConfig> all_configs() {
  return {P("tiny"), P("tiny-gqa"), with_head_dim(64), with_head_dim(128), with_head_dim(64, true), hf_features(), qwen3_yarn()};
}

inline std::vector<int32_t> prompt(int vocab, int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  return t;
}

inline double rel_l2(const float* a, const float* b, size_t n) {
  double e = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    e += d * d;
    r += static_cast<double>(b[i]) * b[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return rel_l2(a.data(), b.data(), std::min(a.size(), b.size()));
}

inline bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Largest minus second largest logit.
inline float top2_gap(const float* l, int vocab) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    if (l[i] > a) {
      b = a;
      a = l[i];
    } else if (l[i] > b) {
      b = l[i];
    }
  }
  return a - b;
}

inline EngineOptions small_options(bool graph = true) {
  EngineOptions o;
  o.cuda_graph = graph;
  o.max_batch = 8;
  o.max_prefill = 256;
  return o;
}

struct Engines {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  TestStream stream;
  std::unique_ptr<Model> cpu, gpu;
  Engines(const ModelConfig& c, uint64_t seed, const EngineOptions& o = small_options())
      : config(c), weights(random_weights(c, seed)) {
    cpu = make_cpu_model(c, *weights);
    gpu = make_cuda_model(c, *weights, o, stream.get());
  }
  size_t vocab() const { return static_cast<size_t>(config.vocab); }
};

// Logits of the last n_logits positions after prefilling `tokens` into sequence `seq`.
inline std::vector<float> prefill_logits(Model& m, int seq, const std::vector<int32_t>& tokens, int n_logits) {
  std::vector<float> l(static_cast<size_t>(n_logits) * static_cast<size_t>(m.config().vocab));
  StepOutput out;
  out.logits = l.data();
  m.prefill(seq, tokens.data(), static_cast<int>(tokens.size()), n_logits, out);
  return l;
}

inline std::vector<float> decode_logits(Model& m, const std::vector<int>& seqs, const std::vector<int32_t>& tokens,
                                        int32_t* next = nullptr, const SamplingParams& sp = {}, uint64_t step = 0) {
  std::vector<float> l(seqs.size() * static_cast<size_t>(m.config().vocab));
  StepOutput out;
  out.logits = l.data();
  out.next = next;
  out.sampling = sp;
  out.step = step;
  m.decode(seqs.data(), tokens.data(), static_cast<int>(seqs.size()), out);
  return l;
}

}  // namespace ib::model::gpu_model_cases
