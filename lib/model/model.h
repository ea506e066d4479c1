// The transformer engine the subcommands drive: a Llama-family decoder (RMSNorm, RoPE, MHA/GQA,
// SwiGLU, LM head) with a KV cache per sequence. Backends: CPU (float32 arithmetic on
// bf16-rounded weights; the reference) and CUDA (bf16 weights, fp32 accumulation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/sample.h"
#include "model/weights.h"

namespace ib::model {

// What a forward pass hands back. `logits` (host, fp32, [rows][vocab]) and `next` (host, [rows],
// chosen on the backend with `sampling` and the step's random numbers) are each optional.
struct StepOutput {
  float* logits = nullptr;
  int32_t* next = nullptr;
  SamplingParams sampling;  // temperature 0 = greedy
  uint64_t step = 0;        // which random numbers the sampler uses (sample_uniform)
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;

  // A sequence owns a KV cache of `capacity` tokens (allocated through the memory tracker, so a
  // cache that does not fit is OutOfMemory). Ids are small non-negative integers, reused.
  virtual int new_sequence(int capacity) = 0;
  virtual void release(int seq) = 0;
  // A new sequence with a copy of `seq`'s cache (same capacity).
  virtual int fork(int seq) = 0;
  // Drops cached tokens past `length` (speculative decoding's rollback).
  virtual void truncate(int seq, int length) = 0;
  virtual int length(int seq) const = 0;
  // Prefix reuse: positions [begin, begin + n) of `dst`'s cache become those of `src` (the same
  // tokens at the same positions give the same K/V), and dst's length becomes begin + n.
  // Needs length(dst) >= begin and length(src) >= begin + n.
  virtual void copy_cache(int src, int dst, int begin, int n);
  virtual int capacity(int seq) const = 0;

  // Runs `n` tokens after the sequence's cached ones (causal among themselves), appends their
  // K/V, and outputs the last `n_logits` positions (1 for prefill, n to verify n drafted tokens).
  virtual void prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) = 0;
  // One token for each of `batch` sequences (lengths may differ); outputs [batch] rows.
  virtual void decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) = 0;

  // Bytes of weights, and of the KV caches of live sequences.
  virtual int64_t weight_bytes() const = 0;
  virtual int64_t kv_bytes() const = 0;
};

struct EngineOptions {
  bool cuda_graph = true;  // CUDA: capture the decode step per batch size and replay it
  int max_batch = 256;     // CUDA: activation buffers are sized for this many decode rows
  int max_prefill = 8192;  // CUDA: ... and this many prefill tokens per call
};

std::unique_ptr<Model> make_cpu_model(const ModelConfig& c, const WeightSource& w);
// `stream` is the cudaStream_t the model enqueues on (nullptr: the default stream). Throws
// InputError when the binary has no CUDA backend.
std::unique_ptr<Model> make_cuda_model(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, void* stream);

}  // namespace ib::model
