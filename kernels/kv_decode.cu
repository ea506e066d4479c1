// Decode attention over a bf16 / FP8 e4m3 / INT8 KV cache, contiguous or paged (split-K
// flash-decoding), and the kernels that fill such a cache: staging of the counter-based inputs,
// FP8 calibration (amax) and quantize-on-append; the same for an int4 / int2 KIVI cache (contiguous).
#include "kv_decode.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_pipeline_primitives.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/cuda_check.h"
#include "core/half.h"
#include "core/random.h"
#include "kvcache/kv_format.h"

namespace ib {

namespace {

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
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMinSplitTokens = 256;  // fewer tokens per split and the merge costs more than it balances
constexpr int kMaxAutoSplits = 256;
constexpr int kMaxSplits = 4096;  // the merge kernel keeps one weight per split in shared memory
constexpr float kLog2e = 1.4426950408889634f;
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
// q and acc take 2·G·(16 / element bytes) registers per lane: 8 heads of bf16 or 4 of the
// 1-byte formats fit without spilling; larger groups run in several head chunks.
template <KvElem E>
constexpr int max_group() {
  return E == KvElem::BF16 ? 8 : 4;
}

// n / d and n % d for n < 2^31 and a divisor fixed per launch (the block size of a paged cache):
// a multiply-high and a shift instead of a ~20-instruction integer division per key.
struct FastDiv {
  uint32_t d = 1, mul = 0, shr = 0;
};

FastDiv make_fast_div(int divisor) {
  FastDiv f;
  f.d = static_cast<uint32_t>(divisor);
  if (f.d > 1) {
    uint32_t l = 0;
    while ((uint32_t{1} << l) < f.d) ++l;  // ceil(log2 d)
    f.mul = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + f.d - 1) / f.d);
    f.shr = l - 1;
  }
  return f;
}

__device__ __forceinline__ uint32_t fast_div(uint32_t n, const FastDiv& f) { return f.d == 1 ? n : __umulhi(n, f.mul) >> f.shr; }

struct DecodeArgs {
  const uint8_t* k;
  const uint8_t* v;
  const float* k_scale;
  const float* v_scale;
  const int32_t* block_table;  // paged: [batch][max_blocks]
  int max_blocks, block_size;
  FastDiv block_div;
  int capacity;  // contiguous: tokens per (sequence, kv head)
  const uint16_t* q;
  uint16_t* out;
  const int32_t* lengths;
  int heads, kv_heads, group, hchunks, splits;
  float q_scale;  // softmax scale · log2 e: scores in base 2
  float* ws_o;    // [batch][heads][splits][D]
  float* ws_ml;   // [batch][heads][splits][2]
};

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

// Merges (mo, lo, acco) into (m, l, acc), base-2 softmax summaries; an empty side (m = -inf)
// gets factor 0 and two empty sides stay empty.
template <int N>
__device__ __forceinline__ void merge_summary(float& m, float& l, float (&acc)[N], float mo, float lo, const float (&acco)[N]) {
  const float mx = fmaxf(m, mo);
  const float ref = mx == -INFINITY ? 0.0f : mx;
  const float fa = exp2f(m - ref), fb = exp2f(mo - ref);
  l = l * fa + lo * fb;
#pragma unroll
  for (int e = 0; e < N; ++e) acc[e] = acc[e] * fa + acco[e] * fb;
  m = mx;
}

template <KvElem E, bool kPaged, int D, int G>
__global__ void __launch_bounds__(kThreads) kv_decode_kernel(const DecodeArgs a) {
  constexpr int kEpl = 16 / elem_bytes<E>();  // elements of a lane's 16-byte slice
  constexpr int kLpk = D / kEpl;               // lanes per key
  constexpr int kKpw = 32 / kLpk;              // keys per warp per load
  constexpr int kSlots = kWarps * kKpw;        // keys per block per load
  constexpr int kTile = kSlots * kKeysPerLane; // keys per block iteration
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
  const int sub = lane % kLpk;                     // the lane's 16-byte slice of a key
  const int slot = warp * kKpw + lane / kLpk;      // the lane's key slot
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

// v1: one block of D threads per (sequence, query head). The threads first reduce the splits'
// maxima and the weights w_s = exp2(m_s − max) together (empty splits, m = -inf, weigh 0) into
// shared memory, then each thread sums its dim over the splits with independent loads.
template <class Op>
__device__ __forceinline__ float block_reduce(float x, float* scratch, Op op) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
  const int warps = static_cast<int>(blockDim.x) / 32;
  __syncthreads();  // scratch may still be read by an earlier reduction
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  x = scratch[0];
  for (int w = 1; w < warps; ++w) x = op(x, scratch[w]);
  return x;
}

__global__ void kv_merge_kernel(const float* __restrict__ ws_o, const float* __restrict__ ws_ml, int splits,
                                uint16_t* __restrict__ out) {
  extern __shared__ float s_weight[];  // [splits]
  __shared__ float s_scratch[32];
  const size_t bh = blockIdx.x;
  const int D = static_cast<int>(blockDim.x), d = threadIdx.x;
  const float* ml = ws_ml + 2 * bh * splits;
  float mx = -INFINITY;
  for (int s = d; s < splits; s += D) mx = fmaxf(mx, ml[2 * s]);
  mx = block_reduce(mx, s_scratch, [](float x, float y) { return fmaxf(x, y); });
  const float ref = mx == -INFINITY ? 0.0f : mx;
  float l = 0.0f;
  for (int s = d; s < splits; s += D) {
    const float w = exp2f(ml[2 * s] - ref);
    s_weight[s] = w;
    l = fmaf(ml[2 * s + 1], w, l);
  }
  l = block_reduce(l, s_scratch, [](float x, float y) { return x + y; });  // its barriers also publish s_weight
  const float* o_s = ws_o + bh * splits * D + d;
  float o = 0.0f;
#pragma unroll 8
  for (int s = 0; s < splits; ++s) o = fmaf(o_s[static_cast<size_t>(s) * D], s_weight[s], o);
  out[bh * D + d] = float_to_bf16_bits(l > 0.0f ? o / l : 0.0f);
}

using DecodeKernel = void (*)(DecodeArgs);

// Query heads per block for a group: the next power of two, up to the format's maximum.
int heads_per_block(KvElem e, int group) {
  const int cap = e == KvElem::BF16 ? max_group<KvElem::BF16>() : max_group<KvElem::FP8>();
  int g = 1;
  while (g < group && g < cap) g *= 2;
  return g;
}

template <KvElem E, bool kPaged, int D>
DecodeKernel pick_group(int g) {
  switch (g) {
    case 1: return kv_decode_kernel<E, kPaged, D, 1>;
    case 2: return kv_decode_kernel<E, kPaged, D, 2>;
    case 4: return kv_decode_kernel<E, kPaged, D, 4>;
    default:
      if constexpr (max_group<E>() >= 8) return kv_decode_kernel<E, kPaged, D, 8>;
      throw std::logic_error("kv decode: no kernel for this group size");
  }
}

template <KvElem E, bool kPaged>
DecodeKernel pick_dim(int d, int g) {
  switch (d) {
    case 64: return pick_group<E, kPaged, 64>(g);
    case 128: return pick_group<E, kPaged, 128>(g);
    case 256: return pick_group<E, kPaged, 256>(g);
    default: throw std::logic_error("kv decode: no kernel for this head_dim");
  }
}

template <KvElem E>
DecodeKernel pick_layout(bool paged, int d, int g) {
  return paged ? pick_dim<E, true>(d, g) : pick_dim<E, false>(d, g);
}

DecodeKernel decode_kernel_for(const KvDecodeParams& p) {
  const int g = heads_per_block(p.cache.elem, p.heads / p.cache.kv_heads);
  const bool paged = p.cache.block_table != nullptr;
  switch (p.cache.elem) {
    case KvElem::BF16: return pick_layout<KvElem::BF16>(paged, p.cache.head_dim, g);
    case KvElem::FP8: return pick_layout<KvElem::FP8>(paged, p.cache.head_dim, g);
    case KvElem::INT8: return pick_layout<KvElem::INT8>(paged, p.cache.head_dim, g);
  }
  throw std::logic_error("kv decode: unknown element type");
}

int head_chunks(const KvDecodeParams& p) {
  const int group = p.heads / p.cache.kv_heads;
  const int g = heads_per_block(p.cache.elem, group);
  return (group + g - 1) / g;
}

void require_supported(const KvDecodeParams& p) {
  if (std::string why = kv_decode_unsupported(p); !why.empty()) throw std::invalid_argument(why);
}

// =====================================================================================
// filling the cache
// =====================================================================================

// v1: grid-stride, one thread per element of dst [batch·kv_heads][chunk][head_dim].
__global__ void kv_fill_chunk_kernel(uint16_t* __restrict__ dst, size_t count, int head_dim, int chunk, int t0, int context,
                                     uint64_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const size_t row = i / head_dim;  // (sequence · kv_heads + kv head) · chunk + token
    const size_t c = i % head_dim;
    const size_t bh = row / chunk, t = t0 + row % chunk;
    dst[i] = float_to_bf16_bits(random_uniform(seed, (bh * context + t) * head_dim + c));
  }
}

// v1: blockIdx.x = sequence · kv_heads + kv head; the blocks of y stride over its count[b]
// tokens; a block reduces max |x| of K and of V and raises the running amax once each.
constexpr int kAmaxThreads = 256;

__global__ void __launch_bounds__(kAmaxThreads) kv_amax_kernel(float* k_amax, float* v_amax, const uint16_t* __restrict__ k_new,
                                                             const uint16_t* __restrict__ v_new, int kv_heads, int head_dim,
                                                             int n_tokens, const int32_t* __restrict__ count) {
  __shared__ float s_k[kAmaxThreads / 32], s_v[kAmaxThreads / 32];
  const size_t bh = blockIdx.x;
  const int b = static_cast<int>(bh / kv_heads);
  const size_t elems = static_cast<size_t>(count[b]) * head_dim;  // the first count[b] tokens of the head
  const size_t base = bh * n_tokens * head_dim;
  float mk = 0.0f, mv = 0.0f;
  const size_t stride = static_cast<size_t>(gridDim.y) * blockDim.x;
  for (size_t i = blockIdx.y * static_cast<size_t>(blockDim.x) + threadIdx.x; i < elems; i += stride) {
    mk = fmaxf(mk, fabsf(bf16_bits_to_float(k_new[base + i])));
    mv = fmaxf(mv, fabsf(bf16_bits_to_float(v_new[base + i])));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, off));
    mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, off));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s_k[warp] = mk;
    s_v[warp] = mv;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kAmaxThreads / 32; ++w) {
      mk = fmaxf(mk, s_k[w]);
      mv = fmaxf(mv, s_v[w]);
    }
    // Magnitudes are >= 0, where the order of the float bits is the order of the values.
    atomicMax(reinterpret_cast<unsigned int*>(k_amax + bh), __float_as_uint(mk));
    atomicMax(reinterpret_cast<unsigned int*>(v_amax + bh), __float_as_uint(mv));
  }
}

// Quantizes one token-head row of head_dim values into the cache with the rules of
// kv_format.h (the same functions the host quantizer runs, so the bytes are identical).
template <KvElem E>
__device__ void store_row(const KvCacheView& c, const uint16_t* __restrict__ src, uint8_t* dst, float* scales, size_t seq_head,
                          size_t row, int lane) {
  const int D = c.head_dim;
  if constexpr (E == KvElem::BF16) {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(dst) + row * D;
    for (int i = lane; i < D; i += 32) d16[i] = src[i];
  } else if constexpr (E == KvElem::FP8) {
    const float scale = scales[seq_head];
    for (int i = lane; i < D; i += 32) dst[row * D + i] = kvcache::fp8_quantize(bf16_bits_to_float(src[i]), scale);
  } else {
    float amax = 0.0f;
    for (int i = lane; i < D; i += 32) amax = fmaxf(amax, fabsf(bf16_bits_to_float(src[i])));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = kvcache::int8_scale(amax);
    if (lane == 0) scales[row] = scale;
    for (int i = lane; i < D; i += 32)
      dst[row * D + i] = static_cast<uint8_t>(kvcache::int8_quantize(bf16_bits_to_float(src[i]), scale));
  }
}

// v1: one warp per (sequence, kv head, new token): the warp finds the token's cache row (through
// the block table when paged) and writes its K and V there.
constexpr int kAppendWarps = 8;

struct AppendArgs {
  KvCacheView c;
  const uint16_t* k_new;  // [batch][kv_heads][n_tokens][head_dim]
  const uint16_t* v_new;
  int n_tokens;
  const int32_t* first;  // [batch]
  const int32_t* count;  // [batch]
};

template <KvElem E>
__global__ void __launch_bounds__(kAppendWarps * 32) kv_append_kernel(const AppendArgs a) {
  const KvCacheView& c = a.c;
  const int lane = threadIdx.x & 31;
  const size_t r = static_cast<size_t>(blockIdx.x) * kAppendWarps + (threadIdx.x >> 5);
  if (r >= static_cast<size_t>(c.batch) * c.kv_heads * a.n_tokens) return;  // the whole warp
  const size_t seq_head = r / a.n_tokens;
  const int i = static_cast<int>(r % a.n_tokens);
  const int b = static_cast<int>(seq_head / c.kv_heads), kvh = static_cast<int>(seq_head % c.kv_heads);
  if (i >= a.count[b]) return;  // the whole warp
  const int t = a.first[b] + i;
  size_t row;
  if (c.block_table) {
    const int32_t page = c.block_table[static_cast<size_t>(b) * c.max_blocks + t / c.block_size];
    row = (static_cast<size_t>(page) * c.kv_heads + kvh) * c.block_size + t % c.block_size;
  } else {
    row = seq_head * c.capacity + t;
  }
  const size_t src = r * c.head_dim;
  store_row<E>(c, a.k_new + src, static_cast<uint8_t*>(c.k), c.k_scale, seq_head, row, lane);
  store_row<E>(c, a.v_new + src, static_cast<uint8_t*>(c.v), c.v_scale, seq_head, row, lane);
}


// =====================================================================================
// int4 / int2 (KIVI) decode attention and quantize-on-append
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
constexpr int kKiviWarps = 4;
constexpr int kKiviThreads = kKiviWarps * 32;

// "int4" / "int2": the format a KIVI cache of `bits` holds, for messages.
std::string kivi_name(int bits) { return "int" + std::to_string(bits); }

struct KiviArgs {
  const uint8_t* k_codes;
  const uint8_t* v_codes;
  const uint32_t* k_params;
  const uint32_t* v_params;
  const uint16_t* k_res;
  const uint16_t* v_res;
  int capacity, group, key_groups;  // key_groups: ceil(capacity / group)
  const uint16_t* q;
  uint16_t* out;
  const int32_t* lengths;
  int heads, kv_heads, gqa, hchunks, splits;
  float q_scale;  // softmax scale · log2 e
  float* ws_o;
  float* ws_ml;
};

__device__ __forceinline__ float fp16_lo(uint32_t pair) { return __half2float(__ushort_as_half(static_cast<unsigned short>(pair & 0xffffu))); }
__device__ __forceinline__ float fp16_hi(uint32_t pair) { return __half2float(__ushort_as_half(static_cast<unsigned short>(pair >> 16))); }

// The lane's CPL codes of B bits in a packed row: CPL·B bits at bit offset lane·CPL·B, channel
// c0 + i in bits i·B (kv_format.h's packing). 4 bits (int2 at D = 64) are half a byte.
template <int B, int CPL>
__device__ __forceinline__ uint32_t lane_codes(const uint8_t* row, int lane) {
  constexpr int kBits = B * CPL;
  if constexpr (kBits == 4) return (static_cast<uint32_t>(row[lane >> 1]) >> ((lane & 1) * 4)) & 0xfu;
  else if constexpr (kBits == 8) return row[lane];
  else if constexpr (kBits == 16) return reinterpret_cast<const uint16_t*>(row)[lane];
  else return reinterpret_cast<const uint32_t*>(row)[lane];
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

constexpr int kKiviMaxHeads = 8;

int kivi_heads_per_block(int gqa) {
  int g = 1;
  while (g < gqa && g < kKiviMaxHeads) g *= 2;
  return g;
}

int kivi_head_chunks(const KiviDecodeParams& p) {
  const int gqa = p.heads / p.cache.kv_heads;
  const int g = kivi_heads_per_block(gqa);
  return (gqa + g - 1) / g;
}

using KiviKernel = void (*)(KiviArgs);

template <int B, int D>
KiviKernel kivi_pick_heads(int g) {
  switch (g) {
    case 1: return kivi_decode_kernel<B, D, 1>;
    case 2: return kivi_decode_kernel<B, D, 2>;
    case 4: return kivi_decode_kernel<B, D, 4>;
    default: return kivi_decode_kernel<B, D, 8>;
  }
}

template <int B>
KiviKernel kivi_pick_dim(int head_dim, int g) {
  switch (head_dim) {
    case 64: return kivi_pick_heads<B, 64>(g);
    case 128: return kivi_pick_heads<B, 128>(g);
    case 256: return kivi_pick_heads<B, 256>(g);
    default: throw std::logic_error("kivi decode: no kernel for this head_dim");
  }
}

KiviKernel kivi_kernel_for(const KiviDecodeParams& p) {
  const int g = kivi_heads_per_block(p.heads / p.cache.kv_heads);
  return p.cache.bits == 2 ? kivi_pick_dim<2>(p.cache.head_dim, g) : kivi_pick_dim<4>(p.cache.head_dim, g);
}

// v1: grid (key groups the append touches, kv_heads, batch), one thread per channel (blockDim =
// head_dim, whole warps). Launched twice: `close` quantizes the groups the append completes (the
// keys of channel c by thread c over the group's tokens, each token's values by the lanes of its
// channel group, meeting through xor-shuffles of width G), then the tokens of an incomplete last
// group are copied to the residual (after the first launch has read the residual it replaces).
// The 8/B codes of a byte come from as many neighbouring lanes (shuffled down to the first).
struct KiviAppendArgs {
  KiviCacheView c;
  int key_groups;
  const uint16_t* k_new;  // [batch][kv_heads][n_tokens][head_dim]
  const uint16_t* v_new;
  int n_tokens;
  const int32_t* first;
  const int32_t* count;
};

// Channel ch's code into its byte of a packed row: the first lane of every 8/bits writes the byte.
__device__ __forceinline__ void put_code(uint8_t* row, int ch, int bits, uint32_t code) {
  const int per = 8 / bits;
  uint32_t byte = code;
  for (int i = 1; i < per; ++i) byte |= __shfl_down_sync(0xffffffffu, code, i) << (i * bits);
  if (ch % per == 0) row[ch / per] = static_cast<uint8_t>(byte);
}

__global__ void kivi_append_kernel(const KiviAppendArgs a, bool close) {
  const KiviCacheView& c = a.c;
  const int b = blockIdx.z, kvh = blockIdx.y, ch = threadIdx.x;
  const int D = c.head_dim, G = c.group;
  const int f = a.first[b], end = f + a.count[b];
  const int j = f / G + static_cast<int>(blockIdx.x), gt0 = j * G;
  if (a.count[b] <= 0 || gt0 >= end) return;  // block-uniform
  const size_t seq_head = static_cast<size_t>(b) * c.kv_heads + kvh;
  const bool complete = gt0 + G <= end;
  auto fresh = [&](const uint16_t* src, int t) { return src[(seq_head * a.n_tokens + (t - f)) * D + ch]; };
  if (!close) {
    if (complete) return;
    for (int t = max(f, gt0); t < end; ++t) {
      const size_t at = (seq_head * G + (t - gt0)) * D + ch;
      c.k_residual[at] = fresh(a.k_new, t);
      c.v_residual[at] = fresh(a.v_new, t);
    }
    return;
  }
  if (!complete) return;
  auto value = [&](const uint16_t* res, const uint16_t* src, int t) {
    return bf16_bits_to_float(t < f ? res[(seq_head * G + (t - gt0)) * D + ch] : fresh(src, t));
  };
  const int bits = c.bits;
  const size_t row_bytes = static_cast<size_t>(D) * bits / 8;
  // Keys: channel ch over the group's G tokens.
  float lo = value(c.k_residual, a.k_new, gt0), hi = lo;
  for (int t = gt0 + 1; t < gt0 + G; ++t) {
    const float x = value(c.k_residual, a.k_new, t);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  }
  const kvcache::KiviRange kr = kvcache::kivi_range(lo, hi, bits);
  c.k_params[(seq_head * a.key_groups + j) * D + ch] = kr.scale | (static_cast<uint32_t>(kr.zero) << 16);
  const float kscale = fp16_bits_to_float(kr.scale), kzero = fp16_bits_to_float(kr.zero);
  for (int t = gt0; t < gt0 + G; ++t) {
    const uint32_t code = kvcache::kivi_quantize(value(c.k_residual, a.k_new, t), kscale, kzero, bits);
    put_code(c.k_codes + (seq_head * c.capacity + t) * row_bytes, ch, bits, code);
  }
  // Values: token t, the G channels of ch's group.
  for (int t = gt0; t < gt0 + G; ++t) {
    const float x = value(c.v_residual, a.v_new, t);
    float vlo = x, vhi = x;
    for (int off = G / 2; off > 0; off >>= 1) {
      vlo = fminf(vlo, __shfl_xor_sync(0xffffffffu, vlo, off));
      vhi = fmaxf(vhi, __shfl_xor_sync(0xffffffffu, vhi, off));
    }
    const kvcache::KiviRange vr = kvcache::kivi_range(vlo, vhi, bits);
    const size_t row = seq_head * c.capacity + t;
    if (ch % G == 0) c.v_params[row * (D / G) + ch / G] = vr.scale | (static_cast<uint32_t>(vr.zero) << 16);
    const uint32_t code = kvcache::kivi_quantize(x, fp16_bits_to_float(vr.scale), fp16_bits_to_float(vr.zero), bits);
    put_code(c.v_codes + row * row_bytes, ch, bits, code);
  }
}

unsigned grid_for(size_t work, int per_block) {
  const size_t wanted = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(wanted, 1), 65535));
}

}  // namespace

std::string kv_decode_unsupported(const KvDecodeParams& p) {
  const KvCacheView& c = p.cache;
  if (c.batch < 1 || p.heads < 1 || c.kv_heads < 1) return "kv decode needs batch, heads and kv_heads >= 1";
  if (p.heads % c.kv_heads != 0) return "kv decode needs heads to be a multiple of kv_heads";
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    return "kv decode supports head_dim 64, 128 and 256 (one key is a power-of-two number of 16-byte lane slices)";
  if (c.batch > 65535) return "kv decode supports at most 65535 sequences per launch";
  if (static_cast<int64_t>(c.kv_heads) * head_chunks(p) > 65535)
    return "kv decode supports at most 65535 (kv head, head chunk) blocks";
  if (c.block_table && c.block_size < 1) return "kv decode needs block_size >= 1 for a paged cache";
  if (p.splits < 0 || p.splits > kMaxSplits) return "kv decode needs splits in 0..4096";
  return {};
}

int kv_decode_splits(const KvDecodeParams& p, int sms) {
  require_supported(p);
  // One wave: as many (sequence, kv head, head chunk, split) blocks as the GPU holds at once, so
  // all splits run together and finish together; never fewer than kMinSplitTokens per split.
  int per_sm = 0;
  IB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel_for(p), kThreads, 0));
  const int64_t slots = static_cast<int64_t>(std::max(sms, 1)) * std::max(per_sm, 1);
  const int64_t per_split = static_cast<int64_t>(p.cache.batch) * p.cache.kv_heads * head_chunks(p);
  const int64_t by_tokens = std::max<int64_t>(1, (p.max_length + kMinSplitTokens - 1) / kMinSplitTokens);
  return static_cast<int>(std::clamp<int64_t>(slots / per_split, 1, std::min<int64_t>(by_tokens, kMaxAutoSplits)));
}

size_t kv_decode_workspace_floats(const KvDecodeParams& p, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(p.cache.batch) * p.heads * splits * (p.cache.head_dim + 2);
}

namespace {

// ---- what the split-K launches (bf16/fp8/int8 and int4) share ----

// The splits a launch uses: p.splits, or `choose(p, SM count)` when it is 0.
template <class P, class Choose>
int launch_splits(const P& p, Choose choose, const char* what) {
  int splits = p.splits;
  if (splits == 0) {
    int dev = 0, sms = 0;
    IB_CUDA_CHECK(cudaGetDevice(&dev));
    IB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    splits = choose(p, sms);
  }
  if (splits > 1 && !p.workspace) throw std::invalid_argument(std::string(what) + " with splits > 1 needs a workspace");
  return splits;
}

// The query, output and split-K fields of a kernel's arguments.
template <class Args, class P>
void set_split_args(Args& a, const P& p, int batch, int kv_heads, int head_dim, int splits) {
  a.q = p.q;
  a.out = p.out;
  a.lengths = p.lengths;
  a.heads = p.heads;
  a.kv_heads = kv_heads;
  a.splits = splits;
  a.q_scale = p.scale * kLog2e;
  if (splits > 1) {
    a.ws_o = p.workspace;
    a.ws_ml = p.workspace + static_cast<size_t>(batch) * p.heads * splits * head_dim;
  }
}

// The partials of `splits` blocks per (sequence, head) merged into out (nothing when splits = 1).
void launch_merge_partials(const float* ws_o, const float* ws_ml, int splits, int batch, int heads, int head_dim, uint16_t* out,
                           cudaStream_t stream) {
  if (splits <= 1) return;
  const size_t smem = static_cast<size_t>(splits) * sizeof(float);
  kv_merge_kernel<<<static_cast<unsigned>(batch * heads), static_cast<unsigned>(head_dim), smem, stream>>>(ws_o, ws_ml, splits, out);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_kv_decode(const KvDecodeParams& p, cudaStream_t stream) {
  require_supported(p);
  const KvCacheView& c = p.cache;
  const int splits = launch_splits(p, kv_decode_splits, "kv decode");

  DecodeArgs a{};
  a.k = static_cast<const uint8_t*>(c.k);
  a.v = static_cast<const uint8_t*>(c.v);
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  a.block_table = c.block_table;
  a.max_blocks = c.max_blocks;
  a.block_size = c.block_size;
  a.block_div = make_fast_div(c.block_table ? c.block_size : 1);
  a.capacity = c.capacity;
  set_split_args(a, p, c.batch, c.kv_heads, c.head_dim, splits);
  a.group = p.heads / c.kv_heads;
  a.hchunks = head_chunks(p);

  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(c.kv_heads * a.hchunks), static_cast<unsigned>(c.batch));
  const DecodeKernel kernel = decode_kernel_for(p);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
  launch_merge_partials(a.ws_o, a.ws_ml, splits, c.batch, p.heads, c.head_dim, p.out, stream);
}

void launch_kv_fill_chunk(uint16_t* dst, int batch, int kv_heads, int head_dim, int chunk, int t0, int context, uint64_t seed,
                          cudaStream_t stream) {
  const size_t count = static_cast<size_t>(batch) * kv_heads * chunk * head_dim;
  if (count == 0) return;
  kv_fill_chunk_kernel<<<grid_for(count, 256), 256, 0, stream>>>(dst, count, head_dim, chunk, t0, context, seed);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_kv_append(const KvCacheView& cache, const uint16_t* k_new, const uint16_t* v_new, int n_tokens, const int32_t* first,
                      const int32_t* count, cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(cache.batch) * cache.kv_heads * n_tokens;
  if (rows == 0) return;
  const size_t blocks = (rows + kAppendWarps - 1) / kAppendWarps;
  if (blocks > 0x7fffffffu) throw std::invalid_argument("kv append: too many rows for one launch");
  const unsigned grid = static_cast<unsigned>(blocks);
  const AppendArgs a{cache, k_new, v_new, n_tokens, first, count};
  switch (cache.elem) {
    case KvElem::BF16: kv_append_kernel<KvElem::BF16><<<grid, kAppendWarps * 32, 0, stream>>>(a); break;
    case KvElem::FP8: kv_append_kernel<KvElem::FP8><<<grid, kAppendWarps * 32, 0, stream>>>(a); break;
    case KvElem::INT8: kv_append_kernel<KvElem::INT8><<<grid, kAppendWarps * 32, 0, stream>>>(a); break;
  }
  IB_CUDA_CHECK_LAUNCH();
}

void launch_kv_amax(float* k_amax, float* v_amax, const uint16_t* k_new, const uint16_t* v_new, int batch, int kv_heads,
                    int head_dim, int n_tokens, const int32_t* count, cudaStream_t stream) {
  if (batch * kv_heads == 0 || n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(batch * kv_heads), grid_for(static_cast<size_t>(n_tokens) * head_dim, 4 * kAmaxThreads));
  kv_amax_kernel<<<grid, kAmaxThreads, 0, stream>>>(k_amax, v_amax, k_new, v_new, kv_heads, head_dim, n_tokens, count);
  IB_CUDA_CHECK_LAUNCH();
}

std::string kivi_decode_unsupported(const KiviDecodeParams& p) {
  const KiviCacheView& c = p.cache;
  if (c.bits != 4 && c.bits != 2) return "KIVI decode supports 4-bit (int4) and 2-bit (int2) codes";
  const std::string name = kivi_name(c.bits);
  if (c.batch < 1 || p.heads < 1 || c.kv_heads < 1) return name + " decode needs batch, heads and kv_heads >= 1";
  if (p.heads % c.kv_heads != 0) return name + " decode needs heads to be a multiple of kv_heads";
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) return name + " decode supports head_dim 64, 128 and 256";
  if (c.group != 8 && c.group != 16 && c.group != 32)
    return name + " on CUDA supports " + name + "_group 8, 16 and 32 (a value group is a power-of-two run of a warp's lanes)";
  if (c.batch > 65535) return name + " decode supports at most 65535 sequences per launch";
  if (static_cast<int64_t>(c.kv_heads) * kivi_head_chunks(p) > 65535)
    return name + " decode supports at most 65535 (kv head, head chunk) blocks";
  if (p.splits < 0 || p.splits > kMaxSplits) return name + " decode needs splits in 0..4096";
  return {};
}

int kivi_decode_splits(const KiviDecodeParams& p, int sms) {
  if (std::string why = kivi_decode_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  int per_sm = 0;
  IB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kivi_kernel_for(p), kKiviThreads, 0));
  const int64_t slots = static_cast<int64_t>(std::max(sms, 1)) * std::max(per_sm, 1);
  const int64_t per_split = static_cast<int64_t>(p.cache.batch) * p.cache.kv_heads * kivi_head_chunks(p);
  const int64_t by_tokens = std::max<int64_t>(1, (p.max_length + kMinSplitTokens - 1) / kMinSplitTokens);
  return static_cast<int>(std::clamp<int64_t>(slots / per_split, 1, std::min<int64_t>(by_tokens, kMaxAutoSplits)));
}

size_t kivi_decode_workspace_floats(const KiviDecodeParams& p, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(p.cache.batch) * p.heads * splits * (p.cache.head_dim + 2);
}

void launch_kivi_decode(const KiviDecodeParams& p, cudaStream_t stream) {
  if (std::string why = kivi_decode_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  const KiviCacheView& c = p.cache;
  const int splits = launch_splits(p, kivi_decode_splits, (kivi_name(c.bits) + " decode").c_str());
  KiviArgs a{};
  a.k_codes = c.k_codes;
  a.v_codes = c.v_codes;
  a.k_params = c.k_params;
  a.v_params = c.v_params;
  a.k_res = c.k_residual;
  a.v_res = c.v_residual;
  a.capacity = c.capacity;
  a.group = c.group;
  a.key_groups = (c.capacity + c.group - 1) / c.group;
  set_split_args(a, p, c.batch, c.kv_heads, c.head_dim, splits);
  a.gqa = p.heads / c.kv_heads;
  a.hchunks = kivi_head_chunks(p);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(c.kv_heads * a.hchunks), static_cast<unsigned>(c.batch));
  const KiviKernel kernel = kivi_kernel_for(p);
  kernel<<<grid, kKiviThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
  launch_merge_partials(a.ws_o, a.ws_ml, splits, c.batch, p.heads, c.head_dim, p.out, stream);
}

void launch_kivi_append(const KiviCacheView& cache, const uint16_t* k_new, const uint16_t* v_new, int n_tokens, const int32_t* first,
                        const int32_t* count, cudaStream_t stream) {
  if (cache.batch * cache.kv_heads == 0 || n_tokens == 0) return;
  if (cache.head_dim % 32 != 0 || cache.head_dim > 1024 || (cache.group != 8 && cache.group != 16 && cache.group != 32) ||
      (cache.bits != 4 && cache.bits != 2))
    throw std::invalid_argument(kivi_name(cache.bits) +
                                " append needs head_dim a multiple of 32 (<= 1024), group 8, 16 or 32 and 4 or 2 bits");
  const KiviAppendArgs a{cache, (cache.capacity + cache.group - 1) / cache.group, k_new, v_new, n_tokens, first, count};
  const dim3 grid(static_cast<unsigned>(n_tokens / cache.group + 2), static_cast<unsigned>(cache.kv_heads),
                  static_cast<unsigned>(cache.batch));
  kivi_append_kernel<<<grid, static_cast<unsigned>(cache.head_dim), 0, stream>>>(a, true);
  IB_CUDA_CHECK_LAUNCH();
  kivi_append_kernel<<<grid, static_cast<unsigned>(cache.head_dim), 0, stream>>>(a, false);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
