// What follows the fused QKV GEMM of the CUDA transformer engine: bias, RoPE and the K/V append
// to the cache (one kernel per row), and Qwen3's q_norm / k_norm before it.
#include "model_ops.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "model_ops_internal.cuh"
#include "numerics/cuda_check.h"

namespace ib {

using namespace detail;

namespace {

// =====================================================================================
// bias + RoPE + KV append
// =====================================================================================

// v1: one block of 128 threads per token row. The block first loads inv_freq (theta and the
// RoPE scaling applied on the host: ModelConfig::rope_inv_freq) into shared memory, then each
// thread takes rotation pairs (head, i) of q and k: reads x[i] and x[i + D/2] (+ qk_bias), rotates
// by the angle pos · inv_freq[i] with cos and sin times attention_factor (YaRN; 1 otherwise), and
// writes q back (in place or head-major) and k into the cache; then copies v (+ v_bias) into the
// cache. A pair is owned by one thread, so the in-place update has no hazard. The angle and its
// cos/sin are computed in double, as the CPU reference does: angles reach 10^4–10^5 rad, where an
// fp32 angle is off by ~10^-3 rad. That is (heads + kv_heads)·D/2 double sincos per token, noise
// next to the QKV GEMM.
constexpr int kRopeThreads = 128;
__global__ void __launch_bounds__(kRopeThreads)
    qkv_rope_append_kernel(uint16_t* __restrict__ qkv, const uint16_t* __restrict__ qk_bias, const uint16_t* __restrict__ v_bias,
                           const AttnRow* __restrict__ rows, int n_rows, int layer, int heads, int kv_heads, int D,
                           const double* __restrict__ inv_freq_table, double attention_factor, uint16_t* __restrict__ qh,
                           const int32_t* __restrict__ slots) {
  __shared__ double inv_freq[128];  // D <= 256
  const int r = blockIdx.x;
  const int half = D / 2;
  for (int i = threadIdx.x; i < half; i += kRopeThreads) inv_freq[i] = inv_freq_table[i];
  __syncthreads();

  const AttnRow row = rows[r];
  const int qkv_dim = (heads + 2 * kv_heads) * D;
  uint16_t* v_row = qkv + static_cast<size_t>(r) * qkv_dim;
  const size_t head_elems = static_cast<size_t>(row.capacity) * D;
  uint16_t* kc = row.cache + static_cast<size_t>(layer) * 2 * kv_heads * head_elems;  // this layer's K
  uint16_t* vc = kc + static_cast<size_t>(kv_heads) * head_elems;                     // this layer's V
  const double dpos = static_cast<double>(row.pos);
  const size_t slot = static_cast<size_t>(slots ? slots[r] : row.pos);  // where k and v are stored

  const int n_rot = (heads + kv_heads) * half;
  for (int it = threadIdx.x; it < n_rot; it += kRopeThreads) {
    const int hh = it / half, i = it % half;  // hh < heads: q head, else k head hh − heads
    const int c0 = hh * D + i, c1 = c0 + half;
    float x1 = bf2f(v_row[c0]), x2 = bf2f(v_row[c1]);
    if (qk_bias) {
      x1 += bf2f(qk_bias[c0]);
      x2 += bf2f(qk_bias[c1]);
    }
    double sd, cd;
    sincos(dpos * inv_freq[i], &sd, &cd);
    const float s = static_cast<float>(sd * attention_factor), c = static_cast<float>(cd * attention_factor);
    const uint16_t y1 = f2bf(x1 * c - x2 * s), y2 = f2bf(x2 * c + x1 * s);
    if (hh < heads) {
      if (qh) {
        uint16_t* dst = qh + (static_cast<size_t>(hh) * n_rows + r) * D;
        dst[i] = y1;
        dst[i + half] = y2;
      } else {
        v_row[c0] = y1;
        v_row[c1] = y2;
      }
    } else {
      uint16_t* dst = kc + static_cast<size_t>(hh - heads) * head_elems + slot * D;
      dst[i] = y1;
      dst[i + half] = y2;
    }
  }
  const int v0 = (heads + kv_heads) * D;
  for (int it = threadIdx.x; it < kv_heads * D; it += kRopeThreads) {
    const int kvh = it / D, d = it % D;
    float val = bf2f(v_row[v0 + it]);
    if (v_bias) val += bf2f(v_bias[it]);
    vc[static_cast<size_t>(kvh) * head_elems + slot * D + d] = f2bf(val);
  }
}

// v1 (Qwen3's q_norm / k_norm): one warp per (row, head) of q and k in qkv: x (+ bias) is
// normalised over its head_dim, x / sqrt(mean(x²) + eps) · w, in fp32, and written back in place
// as bf16, before RoPE. Heads < `heads` are q heads (weights q_w), the rest k heads (k_w).
constexpr int kHeadNormWarps = 4;
__global__ void __launch_bounds__(32 * kHeadNormWarps)
    head_rmsnorm_kernel(uint16_t* __restrict__ qkv, const uint16_t* __restrict__ bias, int n_rows, int heads, int kv_heads, int D,
                        const uint16_t* __restrict__ q_w, const uint16_t* __restrict__ k_w, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t task = static_cast<int64_t>(blockIdx.x) * kHeadNormWarps + (threadIdx.x >> 5);
  const int per_row = heads + kv_heads;
  if (task >= static_cast<int64_t>(n_rows) * per_row) return;
  const int r = static_cast<int>(task / per_row), hh = static_cast<int>(task % per_row);
  const int qkv_dim = (heads + 2 * kv_heads) * D;
  uint16_t* x = qkv + static_cast<size_t>(r) * qkv_dim + static_cast<size_t>(hh) * D;
  const uint16_t* b = bias ? bias + static_cast<size_t>(hh) * D : nullptr;
  const uint16_t* w = hh < heads ? q_w : k_w;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float v = bf2f(x[d]) + (b ? bf2f(b[d]) : 0.0f);
    ss = fmaf(v, v, ss);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int d = lane; d < D; d += 32) {
    const float v = bf2f(x[d]) + (b ? bf2f(b[d]) : 0.0f);
    x[d] = f2bf(v * inv * bf2f(w[d]));
  }
}

}  // namespace

void launch_qkv_rope_append(uint16_t* qkv, const uint16_t* bias, bool qk_bias_applied, const AttnRow* rows, int n_rows, int layer,
                            int heads, int kv_heads, int head_dim, const double* inv_freq, double attention_factor,
                            uint16_t* q_heads_major, cudaStream_t stream, const int32_t* slots) {
  if (n_rows <= 0) return;
  if (head_dim % 2 != 0 || head_dim > 256) throw std::invalid_argument("qkv_rope_append: head_dim must be even and <= 256");
  const uint16_t* qk_bias = bias && !qk_bias_applied ? bias : nullptr;
  const uint16_t* v_bias = bias ? bias + static_cast<size_t>(heads + kv_heads) * head_dim : nullptr;
  qkv_rope_append_kernel<<<static_cast<unsigned>(n_rows), kRopeThreads, 0, stream>>>(
      qkv, qk_bias, v_bias, rows, n_rows, layer, heads, kv_heads, head_dim, inv_freq, attention_factor, q_heads_major, slots);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_head_rmsnorm(uint16_t* qkv, const uint16_t* bias, int n_rows, int heads, int kv_heads, int head_dim,
                         const uint16_t* q_w, const uint16_t* k_w, float eps, cudaStream_t stream) {
  if (n_rows <= 0) return;
  const int64_t tasks = static_cast<int64_t>(n_rows) * (heads + kv_heads);
  const int64_t blocks = (tasks + kHeadNormWarps - 1) / kHeadNormWarps;
  if (blocks > 0x7fffffff) throw std::invalid_argument("head_rmsnorm: too many rows");
  head_rmsnorm_kernel<<<static_cast<unsigned>(blocks), 32 * kHeadNormWarps, 0, stream>>>(qkv, bias, n_rows, heads, kv_heads,
                                                                                         head_dim, q_w, k_w, eps);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
