// The small kernels of the CUDA transformer engine: embedding, RMSNorm, RoPE + KV append,
// split-K decode attention, SwiGLU, layout changes and token sampling. The matmuls are cuBLAS and
// prefill attention is FlashAttention-2; everything here is memory- or launch-bound.
#include "model_ops.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/online_softmax.h"
#include "constrain_mask.h"
#include "core/cuda_check.h"
#include "core/half.h"
#include "model/sample.h"
#include "swiglu.cuh"

namespace ib {

namespace {

__device__ __forceinline__ float bf2f(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
// Round-to-nearest-even, bit-identical to the host's float_to_bf16_bits.
__device__ __forceinline__ uint16_t f2bf(float f) { return float_to_bf16_bits(f); }

// Eight bf16 (one 16-byte load) to floats: element e is bits 16·(e & 1) of word e / 2.
__device__ __forceinline__ void unpack8(const uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// Sum over a block of kThreads threads (a multiple of 32, at most 1024), the same on every
// thread. Fixed reduction tree: deterministic. `red` holds 32 floats of shared memory.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* red) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? red[lane] : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0) red[0] = v;  // every lane of warp 0 read red[lane] before the shuffles
  }
  __syncthreads();
  v = red[0];
  __syncthreads();  // red may be reused right after
  return v;
}

// =====================================================================================
// fill, embedding, RMSNorm
// =====================================================================================

// v1: grid-stride store of one 16-bit pattern (load time only).
__global__ void fill_u16_kernel(uint16_t* dst, size_t count, uint16_t bits) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = bits;
}

// v1: one block of 256 threads per token row, a strided copy with widening to fp32. A decode
// step moves hidden × 6 bytes per row: nothing to optimise next to the weight reads.
__global__ void __launch_bounds__(256) embed_kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ tokens,
                                                    int hidden, int vocab, float* __restrict__ x) {
  const int r = blockIdx.x;
  const int32_t tok = tokens[r];
  const bool ok = tok >= 0 && tok < vocab;
  const uint16_t* src = table + static_cast<size_t>(ok ? tok : 0) * hidden;
  float* dst = x + static_cast<size_t>(r) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) dst[d] = ok ? bf2f(src[d]) : 0.0f;
}

// v1: one block of 256 threads per row. Pass 1 adds the residual branch (if any), writes the sum
// back and accumulates Σx² per thread; a fixed-tree block reduction; pass 2 re-reads the row
// (the thread's own writes, from L1/L2) and writes bf16(x · inv_rms · w). Rows are ≤ 16 KiB of
// fp32, so the second read is cheap; the kernel is launch-bound at decode batch sizes.
constexpr int kNormThreads = 256;
__global__ void __launch_bounds__(kNormThreads) add_rmsnorm_kernel(float* __restrict__ x, const uint16_t* __restrict__ delta,
                                                                  const uint16_t* __restrict__ w, float eps, int hidden,
                                                                  uint16_t* __restrict__ out) {
  __shared__ float red[32];
  const size_t off = static_cast<size_t>(blockIdx.x) * hidden;
  float* xr = x + off;
  float ss = 0.0f;
  for (int d = threadIdx.x; d < hidden; d += kNormThreads) {
    float v = xr[d];
    if (delta) {
      v += bf2f(delta[off + d]);
      xr[d] = v;
    }
    ss = fmaf(v, v, ss);
  }
  const float total = block_sum<kNormThreads>(ss, red);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(hidden) + eps);
  for (int d = threadIdx.x; d < hidden; d += kNormThreads) out[off + d] = f2bf(xr[d] * inv * bf2f(w[d]));
}

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
__global__ void __launch_bounds__(kRopeThreads) qkv_rope_append_kernel(uint16_t* __restrict__ qkv, const uint16_t* __restrict__ qk_bias,
                                                                      const uint16_t* __restrict__ v_bias, const AttnRow* __restrict__ rows,
                                                                      int n_rows, int layer, int heads, int kv_heads, int D,
                                                                      const double* __restrict__ inv_freq_table, double attention_factor,
                                                                      uint16_t* __restrict__ qh, const int32_t* __restrict__ slots) {
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
__global__ void __launch_bounds__(32 * kHeadNormWarps) head_rmsnorm_kernel(uint16_t* __restrict__ qkv, const uint16_t* __restrict__ bias,
                                                                          int n_rows, int heads, int kv_heads, int D,
                                                                          const uint16_t* __restrict__ q_w, const uint16_t* __restrict__ k_w,
                                                                          float eps) {
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

// v1: grid-stride; y[r][i] += bias[i] (fp32 rows: the residual stream after o_proj / down_proj).
__global__ void add_bias_f32_kernel(float* __restrict__ y, const uint16_t* __restrict__ bias, int rows, int n) {
  const size_t total = static_cast<size_t>(rows) * n;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] += bf2f(bias[i % n]);
}

// v1: grid-stride; y[r][i] = bf16(y[r][i] + bias[i]) (bf16 rows: gate/up before SwiGLU).
__global__ void add_bias_bf16_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ bias, int rows, int n) {
  const size_t total = static_cast<size_t>(rows) * n;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = f2bf(bf2f(y[i]) + bf2f(bias[i % n]));
}

// ---- tree attention (tree verification) ----

constexpr int kTreeThreads = 128;
constexpr int kTreeTile = 256;  // keys whose scores are staged at once

// One block per (row, head), keys in tiles of kTreeTile with an online softmax: the row's query
// in shared memory, one warp per key for the tile's scores (lanes over head_dim), the tile's
// max and sum, then each thread rescales and extends its output elements (a warp reads a V
// row's consecutive elements). Fixed shared memory whatever the context.
__global__ void __launch_bounds__(kTreeThreads) tree_attention_kernel(TreeAttentionArgs a) {
  __shared__ float qs[256];
  __shared__ float red[32];
  __shared__ float score[kTreeTile];
  const int D = a.head_dim;
  const int r = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
  const AttnRow row = a.rows[r];
  const int kvh = h / (a.heads / a.kv_heads);
  const size_t head_elems = static_cast<size_t>(row.capacity) * D;
  const uint16_t* kc = row.cache + (static_cast<size_t>(a.layer) * 2 * a.kv_heads + kvh) * head_elems;
  const uint16_t* vc = row.cache + (static_cast<size_t>(a.layer) * 2 * a.kv_heads + a.kv_heads + kvh) * head_elems;
  const int first = a.window > 0 ? max(0, row.pos + 1 - a.window) : 0;
  const int cached = max(0, a.base - first);
  const int a0 = a.anc_begin[r];
  const int n = cached + (a.anc_begin[r + 1] - a0);
  const uint16_t* q = a.q + static_cast<size_t>(r) * a.q_row_stride + static_cast<size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += kTreeThreads) qs[d] = bf2f(q[d]);
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float m_run = -FLT_MAX, l_run = 0.0f;
  float acc[2] = {0.0f, 0.0f};  // output elements threadIdx.x and threadIdx.x + 128 (D <= 256)
  for (int t0 = 0; t0 < n; t0 += kTreeTile) {
    const int nt = min(kTreeTile, n - t0);
    for (int j = warp; j < nt; j += kTreeThreads / 32) {
      const int jj = t0 + j;
      const int pos = jj < cached ? first + jj : a.anc[a0 + jj - cached];
      const uint16_t* k = kc + static_cast<size_t>(pos) * D;
      float dot = 0.0f;
      for (int d = lane; d < D; d += 32) dot += qs[d] * bf2f(k[d]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if (lane == 0) score[j] = dot * a.scale;
    }
    __syncthreads();
    // The tile's max (warp shuffles, then the 4 warps' maxima through `red`).
    float mt = -FLT_MAX;
    for (int j = threadIdx.x; j < nt; j += kTreeThreads) mt = fmaxf(mt, score[j]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
    if (lane == 0) red[warp] = mt;
    __syncthreads();
    mt = red[0];
    for (int w = 1; w < kTreeThreads / 32; ++w) mt = fmaxf(mt, red[w]);
    __syncthreads();  // red is reused by block_sum
    const float m_new = fmaxf(m_run, mt);
    const float correction = __expf(m_run - m_new);  // 0 on the first tile
    float part = 0.0f;
    for (int j = threadIdx.x; j < nt; j += kTreeThreads) {
      const float p = __expf(score[j] - m_new);
      score[j] = p;
      part += p;
    }
    l_run = l_run * correction + block_sum<kTreeThreads>(part, red);  // its barriers publish the p values
    for (int e = 0; e < 2; ++e) {
      const int d = threadIdx.x + e * kTreeThreads;
      if (d >= D) break;
      float sum = 0.0f;
      for (int j = 0; j < nt; ++j) {
        const int jj = t0 + j;
        const int pos = jj < cached ? first + jj : a.anc[a0 + jj - cached];
        sum += score[j] * bf2f(vc[static_cast<size_t>(pos) * D + d]);
      }
      acc[e] = acc[e] * correction + sum;
    }
    m_run = m_new;
    __syncthreads();  // every thread is done with this tile's scores
  }
  uint16_t* o = a.out + static_cast<size_t>(r) * a.heads * D + static_cast<size_t>(h) * D;
  for (int e = 0; e < 2; ++e) {
    const int d = threadIdx.x + e * kTreeThreads;
    if (d < D) o[d] = f2bf(acc[e] / l_run);
  }
}

// v1: one thread per row of a prefill chunk, so the chunk's attention rows never cross the bus.
__global__ void fill_attn_rows_kernel(AttnRow* rows, int n, uint16_t* cache, int capacity, int first_pos) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    AttnRow r;
    r.cache = cache;
    r.capacity = capacity;
    r.pos = first_pos + i;
    rows[i] = r;
  }
}

// =====================================================================================
// split-K decode attention
// =====================================================================================
//
// v1: flash-decoding. Grid (splits, kv_heads · head chunks, rows); a block of 4 warps handles
// one row (one query token), one kv head, up to G of the query heads that share it (GQA: the
// K/V bytes are read once for the whole group) and one contiguous share of the row's visible
// keys. Lanes split head_dim into 16-byte slices: D/8 lanes per key, so a warp covers 32/(D/8)
// keys at a time (2 for D = 128, 16 for D = 16), and the block 4× that ("slots"). Each lane
// keeps q (pre-scaled) for its slice and G heads in registers; per key the slot's lanes dot
// their slices and combine with xor-shuffles (the slot's lanes end with the same score), then
// run an online softmax (running max m, sum l, output acc for the lane's 8 dims) per head.
// kUnroll keys per slot are loaded before any math, so each lane has 2·kUnroll independent
// 16-byte loads in flight (the kernel is bound by HBM bandwidth at long contexts).
// At the end the slots of a warp merge through shuffles, the 4 warps through shared memory
// (softmax_merge), and the block writes either the normalised bf16 output (splits == 1) or an
// unnormalised partial (m, l, o[D]) that decode_merge_kernel combines across splits.
// Rows are independent sequences (decode) or the tokens of one prefill chunk (each with its own
// pos, so causality and the sliding window come from pos alone).
constexpr int kDecWarps = 4;
constexpr int kDecThreads = kDecWarps * 32;
constexpr int kDecMaxSplits = 64;

struct DecArgs {
  const uint16_t* q;
  int64_t q_row_stride;
  const AttnRow* rows;
  int layer, heads, kv_heads, group, hchunks, window, splits;
  float scale;
  float* ws_o;   // [rows·heads·splits][D]
  float* ws_ml;  // [rows·heads·splits][2]
  uint16_t* out;
};

template <int D, int G>
__global__ void __launch_bounds__(kDecThreads) decode_attention_kernel(const DecArgs a) {
  constexpr int kLanesPerKey = D / 8;
  constexpr int kSlotsPerWarp = 32 / kLanesPerKey;
  constexpr int kSlots = kDecWarps * kSlotsPerWarp;
  // q and acc take 16·G registers per lane (~200 in all for G = 8, ~60 for G = 1): fewer keys in
  // flight where the group is large, more where registers are free.
  constexpr int kUnroll = G <= 2 ? 4 : 2;
  static_assert(D % 8 == 0 && kLanesPerKey <= 32 && (kLanesPerKey & (kLanesPerKey - 1)) == 0, "D/8 a power of two <= 32");
  __shared__ float s_acc[kDecWarps][G][D];
  __shared__ float s_m[kDecWarps][G], s_l[kDecWarps][G];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / a.hchunks, hc = blockIdx.y % a.hchunks;
  const int r = blockIdx.z;
  const int h0 = kvh * a.group + hc * G;       // first query head of the block
  const int ng = min(G, a.group - hc * G);     // query heads of the block (uniform)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % kLanesPerKey;                       // the lane's 8-dim slice
  const int slot = warp * kSlotsPerWarp + lane / kLanesPerKey;  // the lane's key slot

  const AttnRow row = a.rows[r];
  const int hi = row.pos + 1;
  const int lo = a.window > 0 ? max(0, hi - a.window) : 0;
  const int chunk = (hi - lo + a.splits - 1) / a.splits;
  const int k0 = lo + split * chunk;
  const int k1 = min(hi, k0 + chunk);  // may be <= k0: an empty split

  const size_t head_elems = static_cast<size_t>(row.capacity) * D;
  const uint16_t* K = row.cache + (static_cast<size_t>(a.layer) * 2 * a.kv_heads + kvh) * head_elems + sub * 8;
  const uint16_t* V = row.cache + (static_cast<size_t>(a.layer) * 2 * a.kv_heads + a.kv_heads + kvh) * head_elems + sub * 8;

  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < ng) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(a.q + r * a.q_row_stride + static_cast<int64_t>(h0 + g) * D + sub * 8));
      unpack8(raw, q[g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] *= a.scale;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] = 0.0f;
    }
  }
  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  // The loop bounds are block-uniform, so every lane reaches every shuffle.
  for (int base = k0; base < k1; base += kUnroll * kSlots) {
    uint4 kr[kUnroll], vr[kUnroll];
    bool ok[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = base + u * kSlots + slot;  // consecutive slots read consecutive keys
      ok[u] = j < k1;
      if (ok[u]) {
        kr[u] = __ldg(reinterpret_cast<const uint4*>(K + static_cast<size_t>(j) * D));
        vr[u] = __ldg(reinterpret_cast<const uint4*>(V + static_cast<size_t>(j) * D));
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= ng) break;  // uniform over the block
      float s[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float kf[8];
        unpack8(kr[u], kf);
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(q[g][e], kf[e], dot);
#pragma unroll
        for (int off = kLanesPerKey / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        s[u] = ok[u] ? dot : -INFINITY;
      }
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) mx = fmaxf(mx, s[u]);
      if (mx != -INFINITY) {  // the slot has seen a key (no shuffles inside: divergence is fine)
        const float corr = __expf(m[g] - mx);  // 0 when m[g] was -inf
        float p[kUnroll], psum = 0.0f;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          p[u] = __expf(s[u] - mx);  // 0 for a masked key
          psum += p[u];
        }
        l[g] = l[g] * corr + psum;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          float vf[8];
          unpack8(vr[u], vf);
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(p[u], vf[e], acc[g][e]);
        }
        m[g] = mx;
      }
    }
  }

  // Merge the slots of each warp: partners lane ^ off (off a multiple of kLanesPerKey) hold the
  // same dims of another slot.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= ng) break;
#pragma unroll
    for (int off = kLanesPerKey; off < 32; off <<= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[g], off);
      float fa, fb;
      const SoftmaxSummary<float> mg = softmax_merge(SoftmaxSummary<float>{m[g], l[g]}, SoftmaxSummary<float>{mo, lo2}, &fa, &fb);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
        acc[g][e] = acc[g][e] * fa + ao * fb;
      }
      m[g] = mg.max;
      l[g] = mg.sum;
    }
    if (lane < kLanesPerKey) {
#pragma unroll
      for (int e = 0; e < 8; ++e) s_acc[warp][g][sub * 8 + e] = acc[g][e];
      if (lane == 0) {
        s_m[warp][g] = m[g];
        s_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();

  // Merge the warps; one thread per (head, dim).
  for (int idx = threadIdx.x; idx < ng * D; idx += kDecThreads) {
    const int g = idx / D, d = idx % D;
    SoftmaxSummary<float> sum = softmax_empty<float>();
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) {
      float fa, fb;
      sum = softmax_merge(sum, SoftmaxSummary<float>{s_m[w][g], s_l[w][g]}, &fa, &fb);
      o = o * fa + s_acc[w][g][d] * fb;
    }
    const int h = h0 + g;
    if (a.splits == 1) {
      a.out[(static_cast<size_t>(r) * a.heads + h) * D + d] = f2bf(sum.sum > 0.0f ? o / sum.sum : 0.0f);
    } else {
      const size_t p = (static_cast<size_t>(r) * a.heads + h) * a.splits + split;
      a.ws_o[p * D + d] = o;
      if (d == 0) {
        a.ws_ml[2 * p] = sum.max;
        a.ws_ml[2 * p + 1] = sum.sum;
      }
    }
  }
}

// v1: one block of D threads per (row, head): each thread folds the splits' partials for its
// dim in split order with softmax_merge (every thread of the block computes the same factors)
// and writes the normalised bf16 output.
__global__ void decode_merge_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml, int D, int splits,
                                    uint16_t* __restrict__ out) {
  const size_t p0 = blockIdx.x;  // row · heads + head
  const int d = threadIdx.x;
  SoftmaxSummary<float> sum = softmax_empty<float>();
  float o = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const size_t p = p0 * splits + s;
    float fa, fb;
    sum = softmax_merge(sum, SoftmaxSummary<float>{ws_ml[2 * p], ws_ml[2 * p + 1]}, &fa, &fb);
    o = o * fa + ws_o[p * D + d] * fb;
  }
  out[p0 * D + d] = f2bf(sum.sum > 0.0f ? o / sum.sum : 0.0f);
}

int group_chunk(int group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

template <int D>
void launch_decode_d(const DecArgs& a, int n_rows, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.splits), static_cast<unsigned>(a.kv_heads * a.hchunks), static_cast<unsigned>(n_rows));
  switch (group_chunk(a.group)) {
    case 1: decode_attention_kernel<D, 1><<<grid, kDecThreads, 0, stream>>>(a); break;
    case 2: decode_attention_kernel<D, 2><<<grid, kDecThreads, 0, stream>>>(a); break;
    case 4: decode_attention_kernel<D, 4><<<grid, kDecThreads, 0, stream>>>(a); break;
    default: decode_attention_kernel<D, 8><<<grid, kDecThreads, 0, stream>>>(a); break;
  }
  IB_CUDA_CHECK_LAUNCH();
}

// =====================================================================================
// layout, SwiGLU
// =====================================================================================

// v1: grid-stride over 16-byte chunks (8 elements; D % 8 == 0, so a chunk never crosses a head).
__global__ void heads_to_rows_kernel(const uint4* __restrict__ src, int n_rows, int heads, int chunks_per_head, uint4* __restrict__ dst) {
  const size_t total = static_cast<size_t>(n_rows) * heads * chunks_per_head;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t c = i % chunks_per_head;
    const size_t h = (i / chunks_per_head) % heads;
    const size_t r = i / (static_cast<size_t>(chunks_per_head) * heads);
    dst[i] = src[(h * n_rows + r) * chunks_per_head + c];  // i = (r·heads + h)·chunks + c
  }
}

// v1: grid-stride, one output element per thread; fp32 math, one rounding.
__global__ void swiglu_kernel(const uint16_t* __restrict__ gu, int rows, int mlp, uint16_t* __restrict__ out) {
  const size_t total = static_cast<size_t>(rows) * mlp;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / mlp, j = i % mlp;
    const float g = bf2f(gu[r * 2 * mlp + j]);
    const float u = bf2f(gu[r * 2 * mlp + mlp + j]);
    out[i] = swiglu_bf16(g, u);
  }
}

unsigned grid_for(size_t total, int threads) {
  const size_t want = (total + threads - 1) / threads;
  return static_cast<unsigned>(want < 65536 ? (want > 0 ? want : 1) : 65536);
}

// =====================================================================================
// sampling
// =====================================================================================

// Greedy choice is constrain_mask.cu's masked argmax without a mask (smallest index on ties,
// NaN ignored).
constexpr int kSampleThreads = 1024;

// v1 sampling: one block of 1024 threads per row, exact selection by radix search instead of a
// sort. Each token gets a unique 64-bit key: the order-preserving bits of its logit above
// 0xFFFFFFFF − index, so descending key order is "descending logit (= probability), ties by
// smaller index", the order of the CPU sampler (model/sample.cpp). Probabilities follow its
// formula too, e = exp(logit/T − max/T) in double, and become fixed-point masses e·2^40 (integers:
// sums are exact and independent of the summation order, so the kernel is deterministic and a
// "cumulative mass in key order" is one integer). Every cut is one question: walking the keys in
// descending order, at which key does the running weight (1 per key, or its mass) first reach a
// threshold? radix_cross answers it with up to 8 passes over the candidates, 8 bits of key per
// pass: a 256-bucket histogram (count and mass, shared-memory atomics) of the keys matching the
// prefix fixed so far, then warp 0 finds the bucket where the running weight crosses; a bucket
// holding a single key ends the search early.
//   top-k: the key where the count reaches k (its mass-at-or-above is the kept mass M),
//   top-p: the key where the mass reaches ceil(top_p · M)   (CPU: renormalised cum >= top_p),
//   draw:  the key where the mass first exceeds floor(u · M') (CPU: u < renormalised cum),
// with M' the mass left after top-p. Once the candidates (keys >= the current cut) number at most
// kSampleCand they are compacted, with their masses, into shared memory, and the remaining
// searches scan that list instead of the whole vocabulary (top-k 40: only the k search reads the
// logits). Cost: a pass reads the row (600 KB at vocab 152064, from L2) and recomputes the
// exponentials; top-k or top-p searches take ~3–6 passes on a typical row.
constexpr int kSampleCand = 2048;
constexpr double kMassOne = 1099511627776.0;  // 2^40

struct SampleShared {
  unsigned int count[256];
  unsigned long long mass[256];
  unsigned long long cand_key[kSampleCand];
  unsigned long long cand_mass[kSampleCand];
  unsigned long long red[32];
  float redf[32];
  unsigned long long bcast_key, bcast_above_m, bcast_mass;
  unsigned int bcast_above_c, bcast_count, n_cand;
  int bcast_bucket;
};

// Float bits to an unsigned integer with the same order (negative values flipped entirely,
// positive ones with the sign bit set); NaN sorts below everything (it is never drawn).
__device__ __forceinline__ unsigned int ordered_bits(float f) {
  if (f != f) return 0u;
  const unsigned int u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ int key_index(unsigned long long k) { return static_cast<int>(0xFFFFFFFFu - static_cast<unsigned int>(k)); }

// The keys of one row of logits: key and fixed-point mass of token i.
struct GlobalKeys {
  const float* logits;
  int n;
  double inv_t, top;  // e = exp(logit · inv_t − top), top = max logit · inv_t (as the CPU)
  __device__ int size() const { return n; }
  __device__ void get(int i, unsigned long long& key, unsigned long long& mass) const {
    const float z = logits[i];
    key = (static_cast<unsigned long long>(ordered_bits(z)) << 32) | (0xFFFFFFFFu - static_cast<unsigned int>(i));
    const double e = z == z ? exp(static_cast<double>(z) * inv_t - top) : 0.0;  // in [0, 1]
    mass = __double2ull_rz(e * kMassOne);  // <= 2^40; a vocabulary < 2^17 sums below 2^57
  }
};
struct SharedKeys {
  const unsigned long long* keys;
  const unsigned long long* masses;
  int n;
  __device__ int size() const { return n; }
  __device__ void get(int i, unsigned long long& key, unsigned long long& mass) const {
    key = keys[i];
    mass = masses[i];
  }
};

struct Cross {
  unsigned long long key;      // the key where the running weight crosses
  unsigned long long mass_ge;  // mass of the keys >= key (and >= lower)
  unsigned int count_ge;       // number of such keys
};

// Among the keys >= lower, walked in descending order: the first key at which the running weight
// (count when by_count, else mass) is >= thr (strict: > thr). Callers pass a threshold that the
// total weight reaches (>= 1 for >=); should none be reached anyway, the smallest key is
// returned. Mass is monotone in the key, so zero-mass keys come last and are never the answer of
// a mass search. Must be called by the whole block.
template <class Keys>
__device__ Cross radix_cross(const Keys& keys, unsigned long long lower, bool by_count, unsigned long long thr, bool strict,
                             SampleShared& sh) {
  const int tid = threadIdx.x, lane = tid & 31;
  const int n = keys.size();
  unsigned long long prefix = 0, above_m = 0;
  unsigned int above_c = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    const unsigned long long hi_mask = shift == 56 ? 0ull : ~0ull << (shift + 8);
    if (tid < 256) {
      sh.count[tid] = 0;
      sh.mass[tid] = 0;
    }
    __syncthreads();
    for (int i = tid; i < n; i += kSampleThreads) {
      unsigned long long k, mk;
      keys.get(i, k, mk);
      if (k >= lower && (k & hi_mask) == prefix) {
        const int b = static_cast<int>((k >> shift) & 255u);
        atomicAdd(&sh.count[b], 1u);
        if (mk) atomicAdd(&sh.mass[b], mk);
      }
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l owns buckets 255 − 8l .. 248 − 8l (descending key order across the lanes).
      unsigned long long wm = 0;
      unsigned int wc = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        wm += sh.mass[255 - 8 * lane - j];
        wc += sh.count[255 - 8 * lane - j];
      }
      unsigned long long im = wm;  // inclusive scans over the lanes
      unsigned int ic = wc;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const unsigned long long tm = __shfl_up_sync(0xffffffffu, im, off);
        const unsigned int tc = __shfl_up_sync(0xffffffffu, ic, off);
        if (lane >= off) {
          im += tm;
          ic += tc;
        }
      }
      const unsigned long long w_incl = by_count ? static_cast<unsigned long long>(above_c + ic) : above_m + im;
      const bool hit = strict ? w_incl > thr : w_incl >= thr;
      const unsigned hits = __ballot_sync(0xffffffffu, hit);
      const unsigned nonempty = __ballot_sync(0xffffffffu, wc > 0);
      // The first lane whose range crosses, or (never crossing) the lane with the lowest keys.
      const int src = hits ? __ffs(hits) - 1 : (nonempty ? 31 - __clz(nonempty) : 0);
      if (lane == src) {
        unsigned long long rm = above_m + (im - wm);  // weight of the keys above this lane's buckets
        unsigned int rc = above_c + (ic - wc);
        int chosen = -1;
        unsigned long long ch_m = rm;
        unsigned int ch_c = rc;
        for (int j = 0; j < 8; ++j) {
          const int b = 255 - 8 * lane - j;
          const unsigned int c = sh.count[b];
          if (c == 0) continue;  // weight 0: the running weight does not move
          const unsigned long long mb = sh.mass[b];
          chosen = b;  // without a hit this ends as the lowest non-empty bucket
          ch_m = rm;
          ch_c = rc;
          const unsigned long long w = by_count ? static_cast<unsigned long long>(rc + c) : rm + mb;
          if (hits && (strict ? w > thr : w >= thr)) break;
          rm += mb;
          rc += c;
        }
        if (chosen < 0) chosen = 0;  // no key at all (callers never ask): bucket 0, empty
        sh.bcast_bucket = chosen;
        sh.bcast_above_m = ch_m;
        sh.bcast_above_c = ch_c;
        sh.bcast_count = sh.count[chosen];
        sh.bcast_mass = sh.mass[chosen];
      }
    }
    __syncthreads();
    const int b = sh.bcast_bucket;
    above_m = sh.bcast_above_m;
    above_c = sh.bcast_above_c;
    const unsigned int cnt = sh.bcast_count;
    const unsigned long long msum = sh.bcast_mass;
    __syncthreads();  // everyone has read the broadcast before the next pass rewrites it
    prefix |= static_cast<unsigned long long>(b) << shift;
    if (cnt <= 1 || shift == 0) {
      unsigned long long key = prefix;  // at shift 0 the prefix is the whole key
      if (cnt == 1 && shift > 0) {
        // The one key with this prefix: whoever holds it publishes it.
        const unsigned long long mask = ~0ull << shift;
        for (int i = tid; i < n; i += kSampleThreads) {
          unsigned long long k, mk;
          keys.get(i, k, mk);
          if (k >= lower && (k & mask) == prefix) sh.bcast_key = k;
        }
        __syncthreads();
        key = sh.bcast_key;
        __syncthreads();
      }
      return Cross{key, above_m + msum, above_c + cnt};
    }
  }
  return Cross{prefix, above_m, above_c};  // not reached: shift 0 returns above
}

// Block-wide sum of 64-bit integers (exact, so the order does not matter).
__device__ unsigned long long block_sum_u64(unsigned long long v, SampleShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (lane == 0) sh.red[warp] = v;
  __syncthreads();
  unsigned long long t = 0;
  for (int w = 0; w < kSampleThreads / 32; ++w) t += sh.red[w];
  __syncthreads();
  return t;
}

__device__ float block_max(float v, SampleShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (lane == 0) sh.redf[warp] = v;
  __syncthreads();
  float t = -INFINITY;
  for (int w = 0; w < kSampleThreads / 32; ++w) t = fmaxf(t, sh.redf[w]);
  __syncthreads();
  return t;
}

__global__ void __launch_bounds__(kSampleThreads) sample_kernel(const float* __restrict__ logits, int vocab, float temperature,
                                                                int top_k, float top_p, uint64_t seed, uint64_t step, int row_base,
                                                                int32_t* __restrict__ out) {
  __shared__ SampleShared sh;
  const int tid = threadIdx.x;
  const int row = blockIdx.x;
  const float* z = logits + static_cast<size_t>(row) * vocab;

  float mx = -INFINITY;
  for (int i = tid; i < vocab; i += kSampleThreads) mx = fmaxf(mx, z[i]);  // fmaxf ignores NaN
  mx = block_max(mx, sh);
  if (!(mx > -INFINITY) || mx == INFINITY) {  // nothing finite to normalise by (uniform branch)
    if (tid == 0) out[row] = 0;
    return;
  }
  GlobalKeys gk;
  gk.logits = z;
  gk.n = vocab;
  gk.inv_t = 1.0 / static_cast<double>(temperature);
  gk.top = static_cast<double>(mx) * gk.inv_t;

  unsigned long long lower = 0, kept = 0;
  unsigned int n_kept = static_cast<unsigned int>(vocab);
  {
    unsigned long long total = 0;
    for (int i = tid; i < vocab; i += kSampleThreads) {
      unsigned long long k, mk;
      gk.get(i, k, mk);
      total += mk;
    }
    kept = block_sum_u64(total, sh);
  }

  SharedKeys sk{sh.cand_key, sh.cand_mass, 0};
  bool in_shared = false;
  // The candidates (keys >= lower, at most kSampleCand of them) to shared memory.
  auto compact = [&]() {
    if (tid == 0) sh.n_cand = 0;
    __syncthreads();
    for (int i = tid; i < vocab; i += kSampleThreads) {
      unsigned long long k, mk;
      gk.get(i, k, mk);
      if (k >= lower) {
        const unsigned int slot = atomicAdd(&sh.n_cand, 1u);  // the order is irrelevant to the searches
        sh.cand_key[slot] = k;
        sh.cand_mass[slot] = mk;
      }
    }
    __syncthreads();
    sk.n = static_cast<int>(sh.n_cand);
    in_shared = true;
  };

  if (top_k > 0 && top_k < vocab) {
    const Cross c = radix_cross(gk, 0ull, true, static_cast<unsigned long long>(top_k), false, sh);
    lower = c.key;
    kept = c.mass_ge;
    n_kept = c.count_ge;
  }
  if (n_kept <= static_cast<unsigned int>(kSampleCand)) compact();
  if (top_p < 1.0f) {
    double want = ceil(static_cast<double>(top_p) * static_cast<double>(kept));
    if (want < 1.0) want = 1.0;
    unsigned long long thr = static_cast<unsigned long long>(want);
    if (thr > kept) thr = kept;
    const Cross c = in_shared ? radix_cross(sk, lower, false, thr, false, sh) : radix_cross(gk, lower, false, thr, false, sh);
    lower = c.key;
    kept = c.mass_ge;
    n_kept = c.count_ge;
    if (!in_shared && n_kept <= static_cast<unsigned int>(kSampleCand)) compact();
  }
  const float u = model::sample_uniform(seed, step, row_base + row);
  unsigned long long target = static_cast<unsigned long long>(floor(static_cast<double>(u) * static_cast<double>(kept)));
  if (kept > 0 && target >= kept) target = kept - 1;
  const Cross c = in_shared ? radix_cross(sk, lower, false, target, true, sh) : radix_cross(gk, lower, false, target, true, sh);
  if (tid == 0) out[row] = key_index(c.key);
}

}  // namespace

// =====================================================================================
// launchers
// =====================================================================================

void launch_fill_u16(uint16_t* dst, size_t count, uint16_t bits, cudaStream_t stream) {
  if (count == 0) return;
  fill_u16_kernel<<<grid_for(count, 256), 256, 0, stream>>>(dst, count, bits);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_embed(const uint16_t* table, const int32_t* tokens, int rows, int hidden, int vocab, float* x, cudaStream_t stream) {
  if (rows <= 0) return;
  embed_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(table, tokens, hidden, vocab, x);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_add_rmsnorm(float* x, const uint16_t* delta, const uint16_t* w, float eps, int rows, int hidden, uint16_t* out,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  add_rmsnorm_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(x, delta, w, eps, hidden, out);
  IB_CUDA_CHECK_LAUNCH();
}

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

void launch_head_rmsnorm(uint16_t* qkv, const uint16_t* bias, int n_rows, int heads, int kv_heads, int head_dim, const uint16_t* q_w,
                         const uint16_t* k_w, float eps, cudaStream_t stream) {
  if (n_rows <= 0) return;
  const int64_t tasks = static_cast<int64_t>(n_rows) * (heads + kv_heads);
  const int64_t blocks = (tasks + kHeadNormWarps - 1) / kHeadNormWarps;
  if (blocks > 0x7fffffff) throw std::invalid_argument("head_rmsnorm: too many rows");
  head_rmsnorm_kernel<<<static_cast<unsigned>(blocks), 32 * kHeadNormWarps, 0, stream>>>(qkv, bias, n_rows, heads, kv_heads, head_dim, q_w,
                                                                                         k_w, eps);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_add_bias_f32(float* y, const uint16_t* bias, int rows, int n, cudaStream_t stream) {
  if (rows <= 0) return;
  add_bias_f32_kernel<<<grid_for(static_cast<size_t>(rows) * n, 256), 256, 0, stream>>>(y, bias, rows, n);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_add_bias_bf16(uint16_t* y, const uint16_t* bias, int rows, int n, cudaStream_t stream) {
  if (rows <= 0) return;
  add_bias_bf16_kernel<<<grid_for(static_cast<size_t>(rows) * n, 256), 256, 0, stream>>>(y, bias, rows, n);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_tree_attention(const TreeAttentionArgs& a, cudaStream_t stream) {
  if (a.n_rows <= 0) return;
  if (a.head_dim > 256 || a.heads % a.kv_heads != 0) throw std::invalid_argument("tree_attention: head_dim <= 256, heads a multiple of kv_heads");
  const int64_t blocks = static_cast<int64_t>(a.n_rows) * a.heads;
  if (blocks > 0x7fffffff) throw std::invalid_argument("tree_attention: too many rows");
  tree_attention_kernel<<<static_cast<unsigned>(blocks), kTreeThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_fill_attn_rows(AttnRow* rows, int n, uint16_t* cache, int capacity, int first_pos, cudaStream_t stream) {
  if (n <= 0) return;
  fill_attn_rows_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(rows, n, cache, capacity, first_pos);
  IB_CUDA_CHECK_LAUNCH();
}

bool decode_attention_supports(int head_dim, int heads, int kv_heads) {
  const bool d_ok = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
  return d_ok && heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0;
}

size_t decode_attention_workspace_floats(int n_rows, int heads, int head_dim, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(n_rows) * heads * splits * (head_dim + 2);
}

int64_t decode_attention_blocks_per_split(int n_rows, int heads, int kv_heads) {
  const int group = heads / kv_heads;
  const int g = group_chunk(group);
  return int64_t{n_rows} * kv_heads * ((group + g - 1) / g);
}

void launch_decode_attention(const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (a.n_rows <= 0) return;
  if (!decode_attention_supports(a.head_dim, a.heads, a.kv_heads))
    throw std::invalid_argument("decode attention supports head_dim 16, 32, 64, 128, 256 and heads a multiple of kv_heads");
  if (a.splits < 1 || a.splits > kDecMaxSplits) throw std::invalid_argument("decode attention: splits must be 1.." + std::to_string(kDecMaxSplits));
  if (a.n_rows > 65535) throw std::invalid_argument("decode attention: at most 65535 rows per launch");
  if (a.splits > 1 && !a.workspace) throw std::invalid_argument("decode attention: splits > 1 needs a workspace");
  DecArgs d;
  d.q = a.q;
  d.q_row_stride = a.q_row_stride;
  d.rows = a.rows;
  d.layer = a.layer;
  d.heads = a.heads;
  d.kv_heads = a.kv_heads;
  d.group = a.heads / a.kv_heads;
  const int g = group_chunk(d.group);
  d.hchunks = (d.group + g - 1) / g;
  d.window = a.window;
  d.splits = a.splits;
  d.scale = a.scale;
  const size_t parts = static_cast<size_t>(a.n_rows) * a.heads * a.splits;
  d.ws_o = a.workspace;
  d.ws_ml = a.workspace ? a.workspace + parts * a.head_dim : nullptr;
  d.out = a.out;
  switch (a.head_dim) {
    case 16: launch_decode_d<16>(d, a.n_rows, stream); break;
    case 32: launch_decode_d<32>(d, a.n_rows, stream); break;
    case 64: launch_decode_d<64>(d, a.n_rows, stream); break;
    case 128: launch_decode_d<128>(d, a.n_rows, stream); break;
    default: launch_decode_d<256>(d, a.n_rows, stream); break;
  }
  if (a.splits > 1) {
    decode_merge_kernel<<<static_cast<unsigned>(int64_t{a.n_rows} * a.heads), static_cast<unsigned>(a.head_dim), 0, stream>>>(
        d.ws_o, d.ws_ml, a.head_dim, a.splits, a.out);
    IB_CUDA_CHECK_LAUNCH();
  }
}

void launch_heads_to_rows(const uint16_t* src, int n_rows, int heads, int head_dim, uint16_t* dst, cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (head_dim % 8 != 0) throw std::invalid_argument("heads_to_rows: head_dim must be a multiple of 8");
  const int chunks = head_dim / 8;
  const size_t total = static_cast<size_t>(n_rows) * heads * chunks;
  heads_to_rows_kernel<<<grid_for(total, 256), 256, 0, stream>>>(reinterpret_cast<const uint4*>(src), n_rows, heads, chunks,
                                                                reinterpret_cast<uint4*>(dst));
  IB_CUDA_CHECK_LAUNCH();
}

void launch_swiglu(const uint16_t* gate_up, int rows, int mlp, uint16_t* out, cudaStream_t stream) {
  if (rows <= 0) return;
  const size_t total = static_cast<size_t>(rows) * mlp;
  swiglu_kernel<<<grid_for(total, 256), 256, 0, stream>>>(gate_up, rows, mlp, out);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_sample(const float* logits, int rows, int vocab, float temperature, int top_k, float top_p, uint64_t seed, uint64_t step,
                   int row_base, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return;
  if (vocab <= 0 || vocab >= (1 << 24)) throw std::invalid_argument("sample: vocab must be in 1 .. 2^24");
  if (temperature <= 0.0f) {
    launch_masked_argmax(logits, nullptr, vocab, rows, out, stream);  // checks its own launch
    return;
  }
  sample_kernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, stream>>>(logits, vocab, temperature, top_k, top_p, seed, step,
                                                                           row_base, out);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
