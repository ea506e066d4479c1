// The int4 / int2 (KIVI) split-K decode kernel and its pickers by head_dim and heads per block.
// Included only by kv_decode_inst_int4.cu and kv_decode_inst_int2.cu (one code width each).
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "kv_decode_internal.cuh"
#include "numerics/half.h"

namespace ib::detail {

// =====================================================================================
// int4 / int2 (KIVI) decode attention
// =====================================================================================
//
// v1 (simple before fast): grid (splits, kv_heads · head chunks, batch), 4 warps per block. A
// split is a run of whole key groups; warp w takes groups w, w + 4, ... of it, one token at a
// time: lane l holds channels [l·D/32, (l+1)·D/32) (2, 4 or 8, one value group since G is a
// multiple of D/32), dequantizes its B-bit codes of the key row through the group's per-channel
// (scale, zero) (loaded once per group) and the value row through the token's per-group pair,
// and the lanes' dot products meet through xor-shuffles. The group past the last full one is the
// bf16 residual. Online softmax in base 2 per query head, rescaled every token; the warps merge
// through shared memory and the splits through kv_merge_kernel. B (4 or 2) is a template
// parameter: it only changes how many bytes a lane reads and the shifts that unpack them.

__device__ __forceinline__ float fp16_lo(uint32_t pair) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(pair & 0xffffu)));
}
__device__ __forceinline__ float fp16_hi(uint32_t pair) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(pair >> 16)));
}

// The lane's CPL codes of B bits in a packed row: CPL·B bits at bit offset lane·CPL·B, channel
// c0 + i in bits i·B (kv_format.h's packing). 4 bits (int2 at D = 64) are half a byte.
template <int B, int CPL>
__device__ __forceinline__ uint32_t lane_codes(const uint8_t* row, int lane) {
  constexpr int kBits = B * CPL;
  if constexpr (kBits == 4)
    return (static_cast<uint32_t>(row[lane >> 1]) >> ((lane & 1) * 4)) & 0xfu;
  else if constexpr (kBits == 8)
    return row[lane];
  else if constexpr (kBits == 16)
    return reinterpret_cast<const uint16_t*>(row)[lane];
  else
    return reinterpret_cast<const uint32_t*>(row)[lane];
}

// Blocks per SM the kernel asks ptxas to fit (__launch_bounds__'s second argument; 0: no
// minimum, ptxas's default). Given none, ptxas squeezes the kernels that keep 64 or more floats of
// q and acc per lane (D·NG >= 1024) into 128 registers and spills 4 bytes (int4 at D = 256 with 4
// heads, int2 at D = 128 with 8); asking for one block lets them take the ~145 they need.
constexpr int kivi_min_blocks(int d, int ng) { return d * ng >= 1024 ? 1 : 0; }

template <int B, int D, int NG>
__global__ void __launch_bounds__(kKiviThreads, kivi_min_blocks(D, NG)) kivi_decode_kernel(const KiviArgs a) {
  constexpr int CPL = D / 32;
  constexpr uint32_t kMask = (1u << B) - 1;
  static_assert(B == 4 || B == 2, "KIVI codes are 4 or 2 bits");
  __shared__ float s_acc[kKiviWarps][NG][D];
  __shared__ float s_m[kKiviWarps][NG], s_l[kKiviWarps][NG];
  const int split = blockIdx.x;
  const int kvh = blockIdx.y / a.hchunks, hc = blockIdx.y % a.hchunks;
  const int b = blockIdx.z;
  const int h0 = kvh * a.gqa + hc * NG;
  const int ng = min(NG, a.gqa - hc * NG);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c0 = lane * CPL;
  const size_t seq_head = static_cast<size_t>(b) * a.kv_heads + kvh;
  const int G = a.group;
  const int n = a.lengths[b], nq = n - n % G;
  const int groups = (n + G - 1) / G, per = (groups + a.splits - 1) / a.splits;
  const int g0 = min(groups, split * per), g1 = min(groups, g0 + per);

  float q[NG][CPL];
#pragma unroll
  for (int h = 0; h < NG; ++h)
#pragma unroll
    for (int i = 0; i < CPL; ++i)
      q[h][i] = h < ng ? bf16_bits_to_float(a.q[(static_cast<size_t>(b) * a.heads + h0 + h) * D + c0 + i]) * a.q_scale : 0.0f;
  float m[NG], l[NG], acc[NG][CPL];
#pragma unroll
  for (int h = 0; h < NG; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < CPL; ++i) acc[h][i] = 0.0f;
  }

  const size_t row_bytes = D * B / 8;
  for (int j = g0 + warp; j < g1; j += kKiviWarps) {  // warp-uniform
    const int t0 = j * G, cnt = min(G, n - t0);
    const bool full = t0 < nq;
    float ks[CPL], kz[CPL];
    if (full) {
      const uint32_t* kp = a.k_params + (seq_head * a.key_groups + j) * D + c0;
#pragma unroll
      for (int i = 0; i < CPL; ++i) {
        const uint32_t pr = __ldg(kp + i);
        ks[i] = fp16_lo(pr);
        kz[i] = fp16_hi(pr);
      }
    }
    for (int u = 0; u < cnt; ++u) {
      const int t = t0 + u;
      float kf[CPL], vf[CPL];
      if (full) {
        const size_t row = seq_head * a.capacity + t;
        const uint32_t kc = lane_codes<B, CPL>(a.k_codes + row * row_bytes, lane);
        const uint32_t vc = lane_codes<B, CPL>(a.v_codes + row * row_bytes, lane);
        const uint32_t vp = __ldg(a.v_params + row * (D / G) + c0 / G);
        const float vs = fp16_lo(vp), vz = fp16_hi(vp);
#pragma unroll
        for (int i = 0; i < CPL; ++i) {
          kf[i] = kz[i] + static_cast<float>((kc >> (B * i)) & kMask) * ks[i];
          vf[i] = vz + static_cast<float>((vc >> (B * i)) & kMask) * vs;
        }
      } else {
        const size_t at = (seq_head * G + u) * D + c0;
#pragma unroll
        for (int i = 0; i < CPL; ++i) {
          kf[i] = bf16_bits_to_float(a.k_res[at + i]);
          vf[i] = bf16_bits_to_float(a.v_res[at + i]);
        }
      }
#pragma unroll
      for (int h = 0; h < NG; ++h) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < CPL; ++i) s = fmaf(q[h][i], kf[i], s);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        const float mx = fmaxf(m[h], s);
        const float corr = exp2f(m[h] - mx);  // 0 while m is -inf
        const float p = exp2f(s - mx);
        l[h] = l[h] * corr + p;
#pragma unroll
        for (int i = 0; i < CPL; ++i) acc[h][i] = fmaf(p, vf[i], acc[h][i] * corr);
        m[h] = mx;
      }
    }
  }

#pragma unroll
  for (int h = 0; h < NG; ++h) {
#pragma unroll
    for (int i = 0; i < CPL; ++i) s_acc[warp][h][c0 + i] = acc[h][i];
    if (lane == 0) {
      s_m[warp][h] = m[h];
      s_l[warp][h] = l[h];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ng * D; idx += kKiviThreads) {
    const int h = idx / D, d = idx % D;
    float mw = -INFINITY, lw = 0.0f, o[1] = {0.0f};
#pragma unroll
    for (int w = 0; w < kKiviWarps; ++w) {
      const float ow[1] = {s_acc[w][h][d]};
      merge_summary(mw, lw, o, s_m[w][h], s_l[w][h], ow);
    }
    const size_t bh = static_cast<size_t>(b) * a.heads + h0 + h;
    if (a.splits == 1) {
      a.out[bh * D + d] = float_to_bf16_bits(lw > 0.0f ? o[0] / lw : 0.0f);
    } else {
      const size_t part = bh * a.splits + split;
      a.ws_o[part * D + d] = o[0];
      if (d == 0) {
        a.ws_ml[2 * part] = mw;
        a.ws_ml[2 * part + 1] = lw;
      }
    }
  }
}

template <int B, int D>
KiviKernel kivi_pick_heads(int g) {
  switch (g) {
    case 1:
      return kivi_decode_kernel<B, D, 1>;
    case 2:
      return kivi_decode_kernel<B, D, 2>;
    case 4:
      return kivi_decode_kernel<B, D, 4>;
    default:
      return kivi_decode_kernel<B, D, 8>;
  }
}

template <int B>
KiviKernel kivi_pick_dim(int head_dim, int g) {
  switch (head_dim) {
    case 64:
      return kivi_pick_heads<B, 64>(g);
    case 128:
      return kivi_pick_heads<B, 128>(g);
    case 256:
      return kivi_pick_heads<B, 256>(g);
    default:
      throw std::logic_error("kivi decode: no kernel for this head_dim");
  }
}

}  // namespace ib::detail
