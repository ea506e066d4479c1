// The split-K decode kernel over a bf16 / FP8 e4m3 / INT8 cache, contiguous or paged, and its
// pickers by layout, head_dim and heads per block. Included only by kv_decode_inst_<format>.cu,
// so that each compiles one format's kernels instead of every format in one translation unit.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_pipeline_primitives.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "kv_decode_internal.cuh"
#include "numerics/half.h"

namespace ib::detail {

// =====================================================================================
// split-K decode attention
// =====================================================================================
//
// v1: grid (splits, kv_heads · head chunks, batch); a block of 4 warps handles one sequence, one
// kv head, up to G of the query heads that share it (GQA: each K/V byte is loaded once for the G
// heads) and one contiguous share ("split") of the sequence's tokens. Every lane loads 16 bytes
// of a key (and of its value) at a time, so D / (16 / element bytes) lanes cover one key ("a
// slot"): bf16 D=128 -> 16 lanes, 2 keys per warp; fp8/int8 D=128 -> 8 lanes, 4 keys per warp.
// Consecutive slots of the block read consecutive keys, so a block-wide step reads one
// contiguous stretch of the cache (one page run when paged).
//
// v2 (this one): the loads go through a cp.async pipeline instead of registers. In v1 the loads
// of an iteration were plain register loads, and ptxas interleaved them with the math that used
// the first ones, so a warp had only ~2 of its 8 loads in flight (read off the SASS). Now each
// thread copies its own 16-byte slices of kKeysPerLane keys per iteration into its own shared
// memory slots (cp.async.cg, which bypasses L1), kStages - 1 iterations ahead of the one it
// computes, and reads back only those slots after cp.async.wait_group: 192 bytes per lane are in
// flight at all times and no block barrier is needed. Then the slot's lanes dot their slice with
// q (pre-scaled, in registers) and combine with xor-shuffles, so all lanes of a slot hold the
// same score; an online softmax in base 2 (log2 e is folded into the score scale) keeps the
// running max m, sum l and unnormalised output acc of the lane's slice per query head, and
// rescales lazily (only when the max grows by more than kRescale).
//
// Formats are dequantized in registers, folding scales where they are constant: fp8's per-head
// K scale multiplies q and its V scale the output; int8's per-token scales multiply the score
// (K) and the probability (V). The conversions avoid the 16/clk conversion pipe where they can:
// bf16 -> f32 is a shift or a mask; e4m3x2 -> f16x2 is one cvt (exact), then f16 -> f32; int8
// -> f32 puts the byte (biased by 128) under the exponent of 2^23 with a byte permute and
// subtracts 2^23 + 128 (exact).
//
// At the end the slots of a warp merge through shuffles, the warps through shared memory; the
// block writes the bf16 output (splits == 1) or an unnormalised partial (m, l, o[D]) that
// kv_merge_kernel combines (log-sum-exp) across splits.
// (kWarps, kThreads and the split limits are in kv_decode_internal.cuh.)

// Keys per lane per iteration, and iterations staged at once (kStages - 1 of them in flight while
// one is computed): 16 B of K and 16 B of V per key, 192 B per lane, 24 KB per block in flight,
// 32 KB of shared memory (40 KB with int8's scales).
constexpr int kKeysPerLane = 2;
constexpr int kStages = 4;
constexpr float kRescale = 8.0f;  // base-2 headroom of the lazy softmax rescale

template <KvElem E>
constexpr int elem_bytes() {
  return E == KvElem::BF16 ? 2 : 1;
}

__device__ __forceinline__ uint32_t fast_div(uint32_t n, const FastDiv& f) { return f.d == 1 ? n : __umulhi(n, f.mul) >> f.shr; }

// 16 bytes of the cache -> 16 / element bytes floats (the element's value, unscaled).
template <KvElem E>
__device__ __forceinline__ void unpack16(const uint4& r, float (&f)[16 / elem_bytes<E>()]) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (E == KvElem::BF16) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else if constexpr (E == KvElem::FP8) {
      const auto lo_pair = static_cast<__nv_fp8x2_storage_t>(w[i] & 0xffffu);
      const auto hi_pair = static_cast<__nv_fp8x2_storage_t>(w[i] >> 16);
      const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(lo_pair, __NV_E4M3)));
      const float2 hi = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(hi_pair, __NV_E4M3)));
      f[4 * i] = lo.x;
      f[4 * i + 1] = lo.y;
      f[4 * i + 2] = hi.x;
      f[4 * i + 3] = hi.y;
    } else {
      const uint32_t biased = w[i] ^ 0x80808080u;  // two's complement -> offset binary: b + 128
#pragma unroll
      for (int j = 0; j < 4; ++j)
        f[4 * i + j] = __uint_as_float(__byte_perm(biased, 0x4b000000u, 0x7650u | static_cast<uint32_t>(j))) - 8388736.0f;
    }
  }
}

// 8 bf16 -> 8 floats.
__device__ __forceinline__ void unpack_bf16x8(const uint4& r, float* f) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

template <KvElem E, bool kPaged, int D, int G>
__global__ void __launch_bounds__(kThreads) kv_decode_kernel(const DecodeArgs a) {
  constexpr int kEpl = 16 / elem_bytes<E>();    // elements of a lane's 16-byte slice
  constexpr int kLpk = D / kEpl;                // lanes per key
  constexpr int kKpw = 32 / kLpk;               // keys per warp per load
  constexpr int kSlots = kWarps * kKpw;         // keys per block per load
  constexpr int kTile = kSlots * kKeysPerLane;  // keys per block iteration
  constexpr size_t kRowBytes = static_cast<size_t>(D) * elem_bytes<E>();
  constexpr bool kInt8 = E == KvElem::INT8;
  static_assert(D % kEpl == 0 && kLpk <= 32 && (kLpk & (kLpk - 1)) == 0, "D / (16 / element bytes) a power of two <= 32");
  // Staging: thread t's slice of key u of stage s at [s][u][t] (a warp reads 512 contiguous
  // bytes: no bank conflicts); int8 scales likewise. After the loop the same memory holds the
  // warps' partial outputs for the block merge.
  constexpr int kSlices = kStages * kKeysPerLane * kThreads;
  constexpr int kStageUint4 = 2 * kSlices + (kInt8 ? 2 * kSlices / 4 : 0);
  constexpr int kAccUint4 = kWarps * G * D / 4;
  __shared__ uint4 s_raw[kStageUint4 > kAccUint4 ? kStageUint4 : kAccUint4];
  __shared__ float s_m[kWarps][G], s_l[kWarps][G];
  uint4* const s_k = s_raw;
  uint4* const s_v = s_raw + kSlices;
  float* const s_ks = reinterpret_cast<float*>(s_raw + 2 * kSlices);
  float* const s_vs = s_ks + kSlices;

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / a.hchunks, hc = blockIdx.y % a.hchunks;
  const int b = blockIdx.z;
  const int h0 = kvh * a.group + hc * G;    // first query head of the block
  const int ng = min(G, a.group - hc * G);  // query heads of the block (block-uniform)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % kLpk;                 // the lane's 16-byte slice of a key
  const int slot = warp * kKpw + lane / kLpk;  // the lane's key slot
  const size_t seq_head = static_cast<size_t>(b) * a.kv_heads + kvh;

  // The split's keys [k0, k1): chunks rounded up to whole iterations, so only the last split of
  // a sequence has a partial one; trailing splits of a short sequence are empty.
  const int len = a.lengths[b];
  const int chunk = ((len + a.splits - 1) / a.splits + kTile - 1) / kTile * kTile;
  const int k0 = split * chunk;
  const int k1 = min(len, k0 + chunk);

  // Paged: the block-table entries of the keys of the next stage to issue are loaded one stage
  // ahead, so issuing copies never waits for them. Keys past the split stand for its last key
  // (its entry, its row): their copies hit the cache and their scores are masked.
  int page[kKeysPerLane] = {};
  const int32_t* table = kPaged ? a.block_table + static_cast<size_t>(b) * a.max_blocks : nullptr;
  auto fetch_pages = [&](int base) {
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const int j = min(base + u * kSlots + slot, k1 - 1);
      page[u] = __ldg(table + fast_div(static_cast<uint32_t>(j), a.block_div));
    }
  };
  // Copies this lane's slices of the keys of the iteration at `base` into stage `stage`, and
  // commits them as one group (empty past the split, so groups count iterations).
  auto issue = [&](int stage, int base) {
    if (base < k1) {  // block-uniform
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        const int j = min(base + u * kSlots + slot, k1 - 1);
        size_t row;  // the key's row of head_dim elements in the K (or V) buffer
        if constexpr (kPaged) {
          const int in_page = j - static_cast<int>(fast_div(static_cast<uint32_t>(j), a.block_div)) * a.block_size;
          row = (static_cast<size_t>(page[u]) * a.kv_heads + kvh) * a.block_size + in_page;
        } else {
          row = seq_head * a.capacity + j;
        }
        const int at = (stage * kKeysPerLane + u) * kThreads + threadIdx.x;
        __pipeline_memcpy_async(s_k + at, a.k + row * kRowBytes + sub * 16, 16);
        __pipeline_memcpy_async(s_v + at, a.v + row * kRowBytes + sub * 16, 16);
        if constexpr (kInt8) {
          __pipeline_memcpy_async(s_ks + at, a.k_scale + row, 4);
          __pipeline_memcpy_async(s_vs + at, a.v_scale + row, 4);
        }
      }
      if constexpr (kPaged) fetch_pages(base + kTile);  // the next issue
    }
    __pipeline_commit();
  };
  if constexpr (kPaged) {
    if (k0 < k1) fetch_pages(k0);
  }
  // The first kStages - 1 iterations go in flight before q is even loaded.
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) issue(st, k0 + st * kTile);

  float q_scale = a.q_scale;
  if constexpr (E == KvElem::FP8) q_scale *= a.k_scale[seq_head];
  float q[G][kEpl];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const uint16_t* qg = a.q + (static_cast<size_t>(b) * a.heads + h0 + g) * D + sub * kEpl;
#pragma unroll
    for (int c = 0; c < kEpl; c += 8) {
      if (g < ng) {
        unpack_bf16x8(__ldg(reinterpret_cast<const uint4*>(qg + c)), &q[g][c]);
#pragma unroll
        for (int e = 0; e < 8; ++e) q[g][c + e] *= q_scale;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) q[g][c + e] = 0.0f;
      }
    }
  }
  float m[G], l[G], acc[G][kEpl];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < kEpl; ++e) acc[g][e] = 0.0f;
  }

  // The loop bounds are block-uniform, so every lane reaches every shuffle. Each iteration
  // issues the copies kStages - 1 iterations ahead, then waits for its own (this thread's copies
  // only: each thread reads back just the slots it filled, so no block barrier is needed).
  int read_stage = 0, write_stage = kStages - 1;
  for (int base = k0; base < k1; base += kTile) {
    issue(write_stage, base + (kStages - 1) * kTile);
    __pipeline_wait_prior(kStages - 1);
    uint4 kr[kKeysPerLane], vr[kKeysPerLane];
    float ks[kKeysPerLane], vs[kKeysPerLane];
    bool ok[kKeysPerLane];
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      const int at = (read_stage * kKeysPerLane + u) * kThreads + threadIdx.x;
      kr[u] = s_k[at];
      vr[u] = s_v[at];
      ks[u] = kInt8 ? s_ks[at] : 1.0f;
      vs[u] = kInt8 ? s_vs[at] : 1.0f;
      ok[u] = base + u * kSlots + slot < k1;
    }
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == kStages ? 0 : write_stage + 1;

    float s[G][kKeysPerLane];
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      float kf[kEpl];
      unpack16<E>(kr[u], kf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kEpl; ++e) dot = fmaf(q[g][e], kf[e], dot);
        s[g][u] = dot;
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (g >= ng) break;  // block-uniform
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
#pragma unroll
        for (int off = kLpk / 2; off > 0; off >>= 1) s[g][u] += __shfl_xor_sync(0xffffffffu, s[g][u], off);
        if constexpr (kInt8) s[g][u] *= ks[u];
        if (!ok[u]) s[g][u] = -INFINITY;
      }
    }

    // Online softmax per head over the lane's keys, rescaled lazily: the running max m moves
    // (and acc, l are rescaled) only when a score exceeds it by more than kRescale, so most
    // iterations skip the rescale; probabilities stay <= 2^kRescale. Until the slot has seen a
    // key m stays -inf and the reference point 0 gives exp2(-inf) = 0 instead of NaN.
    float p[G][kKeysPerLane];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = s[g][0];
#pragma unroll
      for (int u = 1; u < kKeysPerLane; ++u) mx = fmaxf(mx, s[g][u]);
      if (mx > m[g] + kRescale) {
        const float corr = exp2f(m[g] - mx);  // 0 while m is -inf
        l[g] *= corr;
#pragma unroll
        for (int e = 0; e < kEpl; ++e) acc[g][e] *= corr;
        m[g] = mx;
      }
      const float ref = m[g] == -INFINITY ? 0.0f : m[g];
#pragma unroll
      for (int u = 0; u < kKeysPerLane; ++u) {
        p[g][u] = exp2f(s[g][u] - ref);
        l[g] += p[g][u];
      }
    }
#pragma unroll
    for (int u = 0; u < kKeysPerLane; ++u) {
      float vf[kEpl];
      unpack16<E>(vr[u], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float w = kInt8 ? p[g][u] * vs[u] : p[g][u];
#pragma unroll
        for (int e = 0; e < kEpl; ++e) acc[g][e] = fmaf(w, vf[e], acc[g][e]);
      }
    }
  }
  __pipeline_wait_prior(0);  // (the groups left are empty: every copy was read)
  __syncthreads();           // every thread is done with the staging memory
  float(*const s_acc)[G][D] = reinterpret_cast<float(*)[G][D]>(s_raw);

  // Merge the slots of each warp: partners lane ^ off (off a multiple of kLpk) hold the same
  // slice of another slot. Then lanes of slot 0 hand the warp's summary to shared memory.
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g >= ng) break;
#pragma unroll
    for (int off = kLpk; off < 32; off <<= 1) {
      float acco[kEpl];
#pragma unroll
      for (int e = 0; e < kEpl; ++e) acco[e] = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
      merge_summary(m[g], l[g], acc[g], mo, lo, acco);
    }
    if (lane < kLpk) {
#pragma unroll
      for (int e = 0; e < kEpl; ++e) s_acc[warp][g][sub * kEpl + e] = acc[g][e];
      if (lane == 0) {
        s_m[warp][g] = m[g];
        s_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();

  // Merge the warps; one thread per (head, dim). fp8's V scale multiplies the output here.
  const float v_scale = E == KvElem::FP8 ? a.v_scale[seq_head] : 1.0f;
  for (int idx = threadIdx.x; idx < ng * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float mw = -INFINITY, lw = 0.0f, o[1] = {0.0f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float ow[1] = {s_acc[w][g][d]};
      merge_summary(mw, lw, o, s_m[w][g], s_l[w][g], ow);
    }
    const size_t bh = static_cast<size_t>(b) * a.heads + h0 + g;
    if (a.splits == 1) {
      a.out[bh * D + d] = float_to_bf16_bits(lw > 0.0f ? o[0] * v_scale / lw : 0.0f);
    } else {
      const size_t part = bh * a.splits + split;
      a.ws_o[part * D + d] = o[0] * v_scale;
      if (d == 0) {
        a.ws_ml[2 * part] = mw;
        a.ws_ml[2 * part + 1] = lw;
      }
    }
  }
}

template <KvElem E, bool kPaged, int D>
DecodeKernel pick_group(int g) {
  switch (g) {
    case 1:
      return kv_decode_kernel<E, kPaged, D, 1>;
    case 2:
      return kv_decode_kernel<E, kPaged, D, 2>;
    case 4:
      return kv_decode_kernel<E, kPaged, D, 4>;
    default:
      if constexpr (max_group<E>() >= 8) return kv_decode_kernel<E, kPaged, D, 8>;
      throw std::logic_error("kv decode: no kernel for this group size");
  }
}

template <KvElem E, bool kPaged>
DecodeKernel pick_dim(int d, int g) {
  switch (d) {
    case 64:
      return pick_group<E, kPaged, 64>(g);
    case 128:
      return pick_group<E, kPaged, 128>(g);
    case 256:
      return pick_group<E, kPaged, 256>(g);
    default:
      throw std::logic_error("kv decode: no kernel for this head_dim");
  }
}

template <KvElem E>
DecodeKernel pick_layout(bool paged, int d, int g) {
  return paged ? pick_dim<E, true>(d, g) : pick_dim<E, false>(d, g);
}

}  // namespace ib::detail
