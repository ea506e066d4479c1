// The CUDA engine's forward pass: the layers on a stream for a table of rows (cuBLAS or our
// GEMV, flash/split-K/tree attention), the LM head, and the logits and sampled tokens handed back.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "attention.h"
#include "gemv.h"
#include "model/cuda_model_internal.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"

namespace ib::model::cuda_detail {
namespace {

constexpr int kFlashMinRows = 16;  // fewer query rows: the split-K kernel has more parallelism than flash2's one query tile
constexpr int kMaxSplits = 64;     // kDecMaxSplits in model_ops_decode_attention.cu

}  // namespace

// Splits per (row, kv head) so that a decode attention launch has ~4 blocks per SM.
int CudaModel::splits_for(int rows) const {
  const int64_t per = decode_attention_blocks_per_split(rows, c_.heads, c_.kv_heads);
  const int64_t target = int64_t{4} * sm_count_;
  return static_cast<int>(std::clamp<int64_t>((target + per - 1) / per, 1, kMaxSplits));
}

// The handle's stream, then the workspace (cublasSetStream resets the workspace to cuBLAS's
// own pool, which would allocate inside a stream capture).
void CudaModel::bind_cublas(cudaStream_t s) {
  IB_CUBLAS_CHECK(cublasSetStream(cublas_.get(), s));
  IB_CUBLAS_CHECK(cublasSetWorkspace(cublas_.get(), cublas_ws_.data(), cublas_ws_.bytes()));
}

bool CudaModel::use_gemv(int rows, int in, int out, const uint16_t* w, const uint16_t* x) const {
  return o_.matmul == Matmul::Gemv && gemv_bf16_supports(rows, in, out, w, x);
}

// Y[rows][out] (= or +=, beta) X[rows][in] · W[out][in]ᵀ on stream s (cuBLAS: the stream
// bind_cublas gave the handle). matmul = gemv: our kernel where it takes the shape (rows <= 8,
// in % 8 == 0), cuBLAS otherwise. Column-major view for cuBLAS: Yᵀ = W·Xᵀ.
void CudaModel::gemm(cudaStream_t s, const uint16_t* w, const uint16_t* x, void* y, int rows, int in, int out,
                     cudaDataType_t y_type, float beta) {
  // The GEMV stores bf16 (beta 0) or fp32 (beta 0: =, beta 1: +=); any other beta or type is cuBLAS's.
  const bool gemv_out = (y_type == CUDA_R_16BF && beta == 0.0f) || (y_type == CUDA_R_32F && (beta == 0.0f || beta == 1.0f));
  if (gemv_out && use_gemv(rows, in, out, w, x)) {
    const GemvOut kind = y_type == CUDA_R_16BF ? GemvOut::Bf16 : beta != 0.0f ? GemvOut::Fp32Add : GemvOut::Fp32;
    launch_gemv_bf16(w, x, y, kind, rows, in, out, sm_count_, s);
    return;
  }
  const float alpha = 1.0f;
  IB_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF,
                               in, &beta, y, y_type, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The query rows of layer `l` (q rotated in place in qkv_) into attn_.
void CudaModel::row_attention_args(RowAttentionArgs& a, const AttnRow* table, int rows, int l, float scale) {
  a.q = qkv_.data();
  a.q_row_stride = qkv_dim_;
  a.rows = table;
  a.n_rows = rows;
  a.layer = l;
  a.heads = c_.heads;
  a.kv_heads = c_.kv_heads;
  a.head_dim = c_.head_dim;
  a.window = c_.window(l);
  a.scale = scale;
  a.out = attn_.data();
}

// All layers for `rows` token rows: the residual stream x_ ends holding their final hidden
// states. `table` gives each row's cache and position; `pc` (prefill: all rows in one sequence,
// consecutive positions from pc->start) allows FlashAttention-2 when its shape fits.
// `tree` (prefill_tree): K/V to tree->slots, attention through the tree's ancestor lists.
void CudaModel::forward_layers(cudaStream_t s, int rows, const int32_t* tokens, const AttnRow* table, const PrefillCache* pc,
                               const TreeInputs* tree) {
  const int h = c_.hidden, qd = c_.q_dim(), D = c_.head_dim, mlp = c_.mlp;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));

  AttentionParams fp;
  bool flash = false;
  if (pc && flash_head_dim() && rows >= kFlashMinRows) {
    fp.q = qh_.data();
    fp.k = pc->cache;  // layer 0; moved per layer below
    fp.v = pc->cache;
    fp.o = oh_.data();
    fp.batch = 1;
    fp.heads = c_.heads;
    fp.kv_heads = c_.kv_heads;
    fp.head_dim = D;
    fp.seq_q = rows;
    fp.seq_k = pc->start + rows;
    fp.causal = true;
    fp.window = 0;  // per layer below
    fp.scale = scale;
    fp.fp16 = false;
    fp.k_head_stride = fp.v_head_stride = int64_t{pc->capacity} * D;
    flash = flash2_unsupported(fp).empty();
  }
  const int splits = flash ? 1 : splits_for(rows);

  launch_embed(embed_.data(), tokens, rows, h, c_.vocab, x_.data(), s);
  for (int l = 0; l < c_.layers; ++l) {
    LayerWeights& L = layers_[static_cast<size_t>(l)];
    launch_add_rmsnorm(x_.data(), nullptr, L.in_norm.data(), c_.rms_eps, rows, h, h_.data(), s);
    gemm(s, L.wqkv.data(), h_.data(), qkv_.data(), rows, h, qkv_dim_, CUDA_R_16BF, 0.0f);
    const uint16_t* qkv_bias = c_.qkv_bias ? L.bqkv.data() : nullptr;
    if (c_.qk_norm)  // Qwen3: per-head RMSNorm of q and k (their biases added first), then RoPE
      launch_head_rmsnorm(qkv_.data(), qkv_bias, rows, c_.heads, c_.kv_heads, D, L.q_norm.data(), L.k_norm.data(), c_.rms_eps, s);
    launch_qkv_rope_append(qkv_.data(), qkv_bias, c_.qk_norm, table, rows, l, c_.heads, c_.kv_heads, D, inv_freq_.data(),
                           c_.rope_attention_factor(), flash ? qh_.data() : nullptr, s, tree ? tree->slots : nullptr);
    if (tree) {
      TreeAttentionArgs a;
      row_attention_args(a, table, rows, l, scale);
      a.base = tree->base;
      a.anc_begin = tree->anc_begin;
      a.anc = tree->anc;
      launch_tree_attention(a, s);
    } else if (flash) {
      fp.window = c_.window(l);
      const size_t head_elems = static_cast<size_t>(pc->capacity) * D;
      const uint16_t* k = pc->cache + static_cast<size_t>(l) * 2 * c_.kv_heads * head_elems;
      fp.k = k;
      fp.v = k + static_cast<size_t>(c_.kv_heads) * head_elems;
      launch_flash2(fp, s);
      launch_heads_to_rows(oh_.data(), rows, c_.heads, D, attn_.data(), s);
    } else {
      DecodeAttentionArgs a;
      row_attention_args(a, table, rows, l, scale);
      a.splits = splits;
      a.workspace = attn_ws_.data();
      launch_decode_attention(a, s);
    }
    gemm(s, L.wo.data(), attn_.data(), x_.data(), rows, qd, h, CUDA_R_32F, 1.0f);  // x += o_proj(attn)
    if (c_.o_bias) launch_add_bias_f32(x_.data(), L.bo.data(), rows, h, s);
    launch_add_rmsnorm(x_.data(), nullptr, L.post_norm.data(), c_.rms_eps, rows, h, h_.data(), s);
    if (!c_.mlp_bias && use_gemv(rows, h, 2 * mlp, L.wgu.data(), h_.data())) {
      launch_gemv_swiglu_bf16(L.wgu.data(), h_.data(), act_.data(), rows, h, mlp, sm_count_, s);  // gate/up + SwiGLU, one kernel
    } else {
      gemm(s, L.wgu.data(), h_.data(), gu_.data(), rows, h, 2 * mlp, CUDA_R_16BF, 0.0f);
      if (c_.mlp_bias) launch_add_bias_bf16(gu_.data(), L.bgu.data(), rows, 2 * mlp, s);
      launch_swiglu(gu_.data(), rows, mlp, act_.data(), s);
    }
    gemm(s, L.wd.data(), act_.data(), x_.data(), rows, mlp, h, CUDA_R_32F, 1.0f);  // x += down_proj(act)
    if (c_.mlp_bias) launch_add_bias_f32(x_.data(), L.bd.data(), rows, h, s);
  }
}

// Final norm and LM head of residual rows first .. first + count − 1 into logits_[0 .. count).
void CudaModel::lm_head(cudaStream_t s, int first, int count) {
  const int h = c_.hidden;
  launch_add_rmsnorm(x_.data() + static_cast<size_t>(first) * h, nullptr, final_norm_.data(), c_.rms_eps, count, h, h_.data(), s);
  gemm(s, lm_head_weights(), h_.data(), logits_.data(), count, h, c_.vocab, CUDA_R_32F, 0.0f);
}

// Final norm, LM head and emit of residual rows 0 .. rows − 1 to out rows 0 .. rows − 1,
// max_batch rows at a time (the logits buffer's size).
void CudaModel::head_rows(const StepOutput& out, int rows) {
  for (int r = 0; r < rows;) {
    const int count = std::min(o_.max_batch, rows - r);
    lm_head(stream_, r, count);
    emit(out, r, count);
    r += count;
  }
}

// logits_[0 .. count) to out.logits rows out_row.., and/or their sampled tokens to out.next.
void CudaModel::emit(const StepOutput& out, int out_row, int count) {
  const size_t vocab = static_cast<size_t>(c_.vocab);
  if (out.logits)
    IB_CUDA_CHECK(cudaMemcpyAsync(out.logits + static_cast<size_t>(out_row) * vocab, logits_.data(),
                                  sizeof(float) * vocab * static_cast<size_t>(count), cudaMemcpyDeviceToHost, stream_));
  if (out.next) {
    const SamplingParams& p = out.sampling;
    launch_sample(logits_.data(), count, c_.vocab, p.greedy() ? 0.0f : p.temperature, p.top_k, p.top_p, p.seed, out.step, out_row,
                  next_dev_.data(), stream_);
    IB_CUDA_CHECK(cudaMemcpyAsync(out.next + out_row, next_dev_.data(), sizeof(int32_t) * static_cast<size_t>(count),
                                  cudaMemcpyDeviceToHost, stream_));
  }
}

}  // namespace ib::model::cuda_detail
