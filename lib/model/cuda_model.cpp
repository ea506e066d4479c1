// The CUDA engine's construction: the model's and options' checks, the RoPE table, the weights
// (cuda_model_weights.cpp) and the buffers EngineOptions sizes; and its factory. The class is in
// cuda_model_internal.h, its other members in cuda_model_*.cpp, by noun.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "core/errors.h"
#include "model/cuda_model_internal.h"
#include "model/model.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"

namespace ib::model::cuda_detail {
namespace {

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for Hopper
constexpr int kMaxLaunchRows = 65535;

}  // namespace

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

CudaModel::CudaModel(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, cudaStream_t stream)
    : c_(c), o_(o), stream_(stream) {
  if (c.hidden <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.layers <= 0 || c.vocab <= 0 || c.mlp <= 0)
    throw InputError(fmt::format("model {}: every dimension must be positive", c.name));
  if (c.head_dim % 8 != 0 || !decode_attention_supports(c.head_dim, c.heads, c.kv_heads))
    throw InputError(
        fmt::format("model {}: the CUDA engine supports head_dim 16, 32, 64, 128 and 256 with heads a multiple of "
                    "kv_heads (got head_dim {}, {} heads, {} kv heads)",
                    c.name, c.head_dim, c.heads, c.kv_heads));
  if (o.max_batch < 1 || o.max_batch > kMaxLaunchRows || o.max_prefill < 1 || o.max_prefill > kMaxLaunchRows)
    throw std::invalid_argument(fmt::format("max_batch and max_prefill must be in 1..{}", kMaxLaunchRows));
  int dev = 0;
  IB_CUDA_CHECK(cudaGetDevice(&dev));
  IB_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev));

  cublas_ws_.allocate(kCublasWorkspaceBytes, "cuBLAS workspace");
  {  // RoPE frequencies (theta and scaling applied on the host, as the CPU engine uses them)
    const std::vector<double> f = c.rope_inv_freq();
    inv_freq_.allocate(f.size(), "RoPE frequencies");
    IB_CUDA_CHECK(cudaMemcpyAsync(inv_freq_.data(), f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice, stream_));
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // f is freed at the end of this block
  }
  load_weights(w);
  allocate_activations();
  IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // weights in place, host staging released
}

CudaModel::~CudaModel() {
  // Nothing in flight may touch the buffers the members below free (cudaFree synchronises
  // too, but the graphs are destroyed first and must not be running).
  (void)cudaStreamSynchronize(stream_);
}

void CudaModel::allocate_activations() {
  const size_t R = static_cast<size_t>(std::max(o_.max_batch, o_.max_prefill));
  const size_t h = static_cast<size_t>(c_.hidden), qd = static_cast<size_t>(c_.q_dim()), mlp = static_cast<size_t>(c_.mlp);
  qkv_dim_ = c_.q_dim() + 2 * c_.kv_dim();
  x_.allocate(R * h, "residual stream");
  h_.allocate(R * h, "normalised activations");
  qkv_.allocate(R * static_cast<size_t>(qkv_dim_), "q/k/v");
  attn_.allocate(R * qd, "attention output");
  gu_.allocate(R * 2 * mlp, "gate/up");
  act_.allocate(R * mlp, "SwiGLU output");
  if (flash_head_dim()) {
    qh_.allocate(static_cast<size_t>(o_.max_prefill) * qd, "prefill q (head-major)");
    oh_.allocate(static_cast<size_t>(o_.max_prefill) * qd, "prefill attention (head-major)");
  }
  const size_t LR = static_cast<size_t>(o_.max_batch);
  logits_.allocate(LR * static_cast<size_t>(c_.vocab), "logits");
  next_dev_.allocate(LR, "sampled tokens");
  prefill_tokens_.allocate(static_cast<size_t>(o_.max_prefill), "prefill tokens");
  prefill_rows_.allocate(static_cast<size_t>(o_.max_prefill), "prefill attention rows");
  step_rows_offset_ = align16(sizeof(int32_t) * static_cast<size_t>(o_.max_batch));
  const size_t step_bytes = step_rows_offset_ + sizeof(AttnRow) * static_cast<size_t>(o_.max_batch);
  step_dev_.allocate(step_bytes, "decode step inputs");
  step_host_ = std::make_unique<PinnedBytes>(step_bytes);
  // Split-K partials: only row counts with more than one split need them, and those are the
  // small ones (rows · splits stays below twice the block target).
  size_t ws = 0;
  for (int r = 1; r <= static_cast<int>(R); ++r) {
    const int s = splits_for(r);
    if (s == 1) break;  // splits only fall as rows grow
    ws = std::max(ws, decode_attention_workspace_floats(r, c_.heads, c_.head_dim, s));
  }
  if (ws) attn_ws_.allocate(ws, "split-K attention partials");
}

}  // namespace ib::model::cuda_detail

namespace ib::model {

std::unique_ptr<Model> make_cuda_model(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, void* stream) {
  return std::make_unique<cuda_detail::CudaModel>(c, w, o, static_cast<cudaStream_t>(stream));
}

}  // namespace ib::model
