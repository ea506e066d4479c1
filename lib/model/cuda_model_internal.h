// What the pieces of the CUDA engine (cuda_model*.cpp, one noun each) share: its weights, its
// sequences, its device buffers and the CudaModel class whose members they define. Not a public
// interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/cuda_memory.h"
#include "model/engine_sequences.h"
#include "model/model.h"
#include "model/token_tree.h"
#include "model_ops.h"
#include "numerics/cuda_handles.h"

namespace ib::model::cuda_detail {

using Bf16Buffer = DeviceBuffer<uint16_t>;

struct LayerWeights {
  Bf16Buffer in_norm, post_norm;
  Bf16Buffer wqkv;            // [q_dim + 2·kv_dim][hidden]: q_proj, k_proj, v_proj rows one after the other
  Bf16Buffer bqkv;            // [q_dim + 2·kv_dim] when the model has q/k/v biases
  Bf16Buffer q_norm, k_norm;  // [head_dim] each (Qwen3)
  Bf16Buffer wo;              // [hidden][q_dim]
  Bf16Buffer bo;              // [hidden] (Llama attention_bias)
  Bf16Buffer wgu;             // [2·mlp][hidden]: gate_proj rows, then up_proj rows
  Bf16Buffer bgu;             // [2·mlp]: gate then up biases (Llama mlp_bias)
  Bf16Buffer wd;              // [hidden][mlp]
  Bf16Buffer bd;              // [hidden] (Llama mlp_bias)
};

struct Sequence {
  bool live = false;
  int capacity = 0, length = 0;
  Bf16Buffer cache;  // [layers][2 (K, V)][kv_heads][capacity][head_dim]
  TokenTree tree;    // open while a tree verification is in progress (prefill_tree)
};

// A tree pass's device inputs (forward_layers): slots to store K/V at, ancestor lists.
struct TreeInputs {
  const int32_t* slots = nullptr;
  const int32_t* anc_begin = nullptr;
  const int32_t* anc = nullptr;
  int base = 0;
};

size_t align16(size_t n);  // n rounded up to a multiple of 16 (cuda_model.cpp)

// The CUDA engine: bf16 weights and activations, fp32 residual stream, accumulation and logits.
// Matmuls are cuBLAS (the Q/K/V and gate/up projections fused into one GEMM each at load time;
// o_proj and down_proj accumulate straight into the fp32 residual with beta = 1), or with
// EngineOptions::matmul = gemv our weight-streaming GEMV (kernels/gemv.h) for products of at most
// 8 rows (decode steps, short verify passes, the LM head of a prefill's last token; there the
// gate/up GEMV applies SwiGLU itself), prefill
// attention is FlashAttention-2 reading the KV cache in place, decode attention a split-K kernel
// over each sequence's cache (kernels/model_ops_decode_attention.cu). A decode step can be captured once per batch
// size into a CUDA graph and replayed: its per-step inputs (token ids, cache pointers, positions)
// live in one fixed device block that a single copy refreshes before each replay.
class CudaModel final : public Model {
 public:
  // cuda_model.cpp: construction (the weights: cuda_model_weights.cpp)
  CudaModel(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, cudaStream_t stream);
  ~CudaModel() override;

  const ModelConfig& config() const override { return c_; }

  // cuda_model_sequences.cpp
  int new_sequence(int capacity) override;
  void release(int seq) override;
  int fork(int seq) override;
  void copy_cache(int src, int dst, int begin, int n) override;
  void truncate(int seq, int length) override;
  int length(int seq) const override { return at(seq).length; }
  int capacity(int seq) const override { return at(seq).capacity; }

  // cuda_model_tree.cpp
  void prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out) override;
  void keep_tree_path(int seq, const std::vector<int>& path) override;

  // cuda_model_prefill.cpp
  void prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) override;
  void prefill_batch_rows(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                          const int* logit_rows) override;

  // cuda_model_decode.cpp
  void decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) override;

  int64_t weight_bytes() const override { return weight_bytes_; }
  int64_t kv_bytes() const override { return seqs_.cache_bytes(); }

 private:
  struct PrefillCache {
    uint16_t* cache;
    int capacity;
    int start;  // cached tokens before this chunk
  };

  Sequence& at(int seq) { return seqs_.at(seq); }
  const Sequence& at(int seq) const { return seqs_.at(seq); }
  void no_tree(int seq, const char* what) const { seqs_.no_tree(seq, what); }

  // cuda_model_weights.cpp
  void load_weights(const WeightSource& w);
  const uint16_t* lm_head_weights() const { return c_.tied_embeddings ? embed_.data() : lm_head_.data(); }

  // cuda_model.cpp
  void allocate_activations();
  bool flash_head_dim() const { return c_.head_dim == 64 || c_.head_dim == 128; }

  // cuda_model_forward.cpp
  int splits_for(int rows) const;
  void bind_cublas(cudaStream_t s);
  bool use_gemv(int rows, int in, int out, const uint16_t* w, const uint16_t* x) const;
  void gemm(cudaStream_t s, const uint16_t* w, const uint16_t* x, void* y, int rows, int in, int out, cudaDataType_t y_type,
            float beta);
  void row_attention_args(RowAttentionArgs& a, const AttnRow* table, int rows, int l, float scale);
  void forward_layers(cudaStream_t s, int rows, const int32_t* tokens, const AttnRow* table, const PrefillCache* pc,
                      const TreeInputs* tree = nullptr);
  void lm_head(cudaStream_t s, int first, int count);
  void head_rows(const StepOutput& out, int rows);
  void emit(const StepOutput& out, int out_row, int count);

  // cuda_model_decode.cpp
  void capture(int batch, const int32_t* step_tokens, const AttnRow* step_rows);

  ModelConfig c_;
  EngineOptions o_;
  cudaStream_t stream_;
  int sm_count_ = 1;
  int qkv_dim_ = 0;
  int64_t weight_bytes_ = 0;

  OwnedStream capture_stream_;
  DeviceBuffer<unsigned char> cublas_ws_;  // before the handle: destroyed after it
  OwnedCublas cublas_;
  OwnedEvent step_uploaded_;

  DeviceBuffer<double> inv_freq_;  // RoPE [head_dim / 2]
  Bf16Buffer embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;

  DeviceBuffer<float> x_, logits_, attn_ws_;
  Bf16Buffer h_, qkv_, attn_, gu_, act_, qh_, oh_;
  DeviceBuffer<int32_t> next_dev_, prefill_tokens_;
  DeviceBuffer<AttnRow> prefill_rows_;
  DeviceBuffer<unsigned char> step_dev_, tree_dev_;
  size_t step_rows_offset_ = 0;
  std::unique_ptr<PinnedBytes> step_host_;

  EngineSequences<Sequence> seqs_;
  std::map<int, std::unique_ptr<OwnedGraphExec>> graphs_;  // last: destroyed before the buffers they use
};

}  // namespace ib::model::cuda_detail
