// Split-K ("flash-decoding") attention of one query per row over its cache, for decode and the
// split-K prefill path of the CUDA transformer engine: the kernel, its merge across splits and
// the launcher.
#include "model_ops.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "model_ops_internal.cuh"
#include "numerics/cuda_check.h"
#include "numerics/online_softmax.h"

namespace ib {

using namespace detail;

namespace {

// Eight bf16 (one 16-byte load) to floats: element e is bits 16·(e & 1) of word e / 2.
__device__ __forceinline__ void unpack8(const uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
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
  const int h0 = kvh * a.group + hc * G;    // first query head of the block
  const int ng = min(G, a.group - hc * G);  // query heads of the block (uniform)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % kLanesPerKey;                          // the lane's 8-dim slice
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
      const uint4 raw =
          __ldg(reinterpret_cast<const uint4*>(a.q + r * a.q_row_stride + static_cast<int64_t>(h0 + g) * D + sub * 8));
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
      if (mx != -INFINITY) {                   // the slot has seen a key (no shuffles inside: divergence is fine)
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
    case 1:
      decode_attention_kernel<D, 1><<<grid, kDecThreads, 0, stream>>>(a);
      break;
    case 2:
      decode_attention_kernel<D, 2><<<grid, kDecThreads, 0, stream>>>(a);
      break;
    case 4:
      decode_attention_kernel<D, 4><<<grid, kDecThreads, 0, stream>>>(a);
      break;
    default:
      decode_attention_kernel<D, 8><<<grid, kDecThreads, 0, stream>>>(a);
      break;
  }
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace

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
  if (a.splits < 1 || a.splits > kDecMaxSplits)
    throw std::invalid_argument("decode attention: splits must be 1.." + std::to_string(kDecMaxSplits));
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
    case 16:
      launch_decode_d<16>(d, a.n_rows, stream);
      break;
    case 32:
      launch_decode_d<32>(d, a.n_rows, stream);
      break;
    case 64:
      launch_decode_d<64>(d, a.n_rows, stream);
      break;
    case 128:
      launch_decode_d<128>(d, a.n_rows, stream);
      break;
    default:
      launch_decode_d<256>(d, a.n_rows, stream);
      break;
  }
  if (a.splits > 1) {
    decode_merge_kernel<<<static_cast<unsigned>(int64_t{a.n_rows} * a.heads), static_cast<unsigned>(a.head_dim), 0, stream>>>(
        d.ws_o, d.ws_ml, a.head_dim, a.splits, a.out);
    IB_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ib
