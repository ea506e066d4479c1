// Few-row matmuls as a weight stream (gemv.h). A decode step of llama2-7b reads 12.6 GiB of
// weights to do 2 FLOPs per weight and row: at rows <= 8 the time is bytes / bandwidth, and the
// kernel's only job is to keep enough 16-byte loads of W in flight on every SM.
//
// v1 (this file): one warp owns G consecutive outputs (W rows) over a slice of `in`; its lanes
// take 16-byte chunks (8 elements) lane, lane + 32, ... of the slice, so a warp step reads 512
// contiguous bytes of each of its G rows. Per step a lane loads G chunks of W and, per row of X,
// one chunk of X that all G outputs share; U steps are issued before any is consumed, G·U = 8
// loads = 128 bytes of W in flight per thread, 32 KiB per 256-thread block, >= 64 KiB per SM at
// the 2 blocks that __launch_bounds__ guarantees (Little's law on an H200: 4.2 TB/s × ~1 µs of
// loaded latency / 132 SMs ≈ 32 KiB). G = 2 up to 2 rows, 4 above: X chunks come from L1 and cost
// an LSU slot and 8 conversions each, so more rows share each X chunk across more outputs
// (at 8 rows and G = 4, L1 serves 3 bytes per byte of W, well inside its bandwidth).
//
// W goes through ld.global.nc.L1::no_allocate with an L2 evict-first policy: read once, it must
// neither evict X from L1 nor the activations and KV cache from L2. X (at most 8 rows × in bf16, e.g. 176 KiB for
// llama2-7b's down_proj at 8 rows) is read with __ldg and stays in L1/L2 for every warp that
// shares it; staging it in shared memory would not save L1 bandwidth and would cap occupancy.
//
// Small `out` (qwen2-0.5b: o_proj and down_proj have 896 outputs, 448 warps) cannot fill 132 SMs
// with whole rows, so the 8 warps of a block split `in` S ways (gemv_split: 1, 2, 4, 8) and add
// their partial sums through shared memory in a fixed order. A block owns its outputs outright:
// no atomics, and the result is deterministic. Each lane's chunks are summed in increasing order
// (8 fmaf per chunk, element order), then a fixed xor-shuffle tree, then the slices in order: the
// summation order of an output depends on (in, S) only, so a row gives bitwise the same result
// whatever the number of rows launched with it, and whatever G and U that row count picks.
//
// v2: the gate/up GEMV may end in SwiGLU (kSwiGlu): a warp's G rows are then P = G/2 gate rows and
// the P up rows of the same columns, so one thread ends holding both sums of an activation and
// writes bf16(silu(g)·u) – once per element – instead of g and u for a second kernel. The rows'
// sums are those of v1 (same chunks, lanes and split), so the result is bit-identical.
#include "gemv.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "swiglu.cuh"

namespace ib {

namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kGemvLoads = 8;  // 16-byte loads of W in flight per thread (G · U)

constexpr int outs_per_warp(int rows) { return rows <= 2 ? 2 : 4; }

struct GemvArgs {
  const uint4* w;  // [out][chunks]
  const uint4* x;  // [rows][chunks]
  void* y;         // [rows][out]; SwiGLU: act, [rows][out] bf16
  GemvOut kind;    // not SwiGLU
  int chunks;      // in / 8
  int out;         // columns of Y (SwiGLU: mlp, W having 2·mlp rows)
  int split;       // warps per output (S); a block holds kGemvWarps / split output groups
  int slice;       // chunks per warp: ceil(chunks / split)
};

// W: a streaming load that allocates in L1 not at all and in L2 first in line for eviction
// (Hopper takes an L2 eviction priority on a 16-byte load only through a cache policy operand).
__device__ __forceinline__ uint64_t weight_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

__device__ __forceinline__ uint4 load_weights(const uint4* p, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
  return v;
#else
  (void)policy;
  return __ldcs(p);
#endif
}

// acc[g][r] += Σ_e w[g][e] · x[r][e] over the 8 elements of one chunk, in element order. A bf16
// is the top half of an fp32: element 2i is bits 0..15 of word i, element 2i + 1 bits 16..31.
template <int G, int R>
__device__ __forceinline__ void fma_chunk(float (&acc)[G][R], const uint4 (&w)[G], const uint4 (&x)[R]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint32_t xw = i == 0 ? x[r].x : i == 1 ? x[r].y : i == 2 ? x[r].z : x[r].w;
        const float xf = __uint_as_float(half ? xw & 0xffff0000u : xw << 16);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          const uint32_t ww = i == 0 ? w[g].x : i == 1 ? w[g].y : i == 2 ? w[g].z : w[g].w;
          acc[g][r] = fmaf(__uint_as_float(half ? ww & 0xffff0000u : ww << 16), xf, acc[g][r]);
        }
      }
    }
  }
}

template <int R>
__device__ __forceinline__ void load_x(uint4 (&xv)[R], const uint4* __restrict__ x, int chunks, int c) {
#pragma unroll
  for (int r = 0; r < R; ++r) xv[r] = __ldg(x + static_cast<size_t>(r) * chunks + c);
}

// v[g][r] of lane `lane` after the warp sums: lane j < G·R takes element (j / R, j % R). Unrolled
// compares instead of a dynamic index, which would put acc in local memory.
template <int G, int R>
__device__ __forceinline__ float pick(const float (&acc)[G][R], int j) {
  float v = 0.0f;
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (j == g * R + r) v = acc[g][r];
  return v;
}

__device__ __forceinline__ void store(const GemvArgs& a, int r, int o, float v) {
  const size_t i = static_cast<size_t>(r) * a.out + o;
  switch (a.kind) {
    case GemvOut::Bf16:
      static_cast<uint16_t*>(a.y)[i] = float_to_bf16_bits(v);
      break;
    case GemvOut::Fp32:
      static_cast<float*>(a.y)[i] = v;
      break;
    case GemvOut::Fp32Add:
      static_cast<float*>(a.y)[i] += v;
      break;
  }
}

// SwiGLU of the gate and up sums of act[r][o].
__device__ __forceinline__ void store_swiglu(const GemvArgs& a, int r, int o, float gate, float up) {
  static_cast<uint16_t*>(a.y)[static_cast<size_t>(r) * a.out + o] =
      swiglu_bf16(bf16_bits_to_float(float_to_bf16_bits(gate)), bf16_bits_to_float(float_to_bf16_bits(up)));
}

template <int R, bool kSwiGlu>
__global__ void __launch_bounds__(kGemvThreads, 2) gemv_kernel(const GemvArgs a) {
  constexpr int G = outs_per_warp(R), U = kGemvLoads / G;
  constexpr int P = kSwiGlu ? G / 2 : G;     // columns of Y per warp (SwiGLU: a gate and an up row each)
  __shared__ float part[kGemvWarps][G * R];  // split > 1: each warp's sums, added slice by slice

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / a.split, s = warp % a.split;  // warps of one output group are adjacent
  const int o0 = (blockIdx.x * (kGemvWarps / a.split) + group) * P;
  const int c_begin = min(s * a.slice, a.chunks);
  const int c_end = o0 < a.out ? min(c_begin + a.slice, a.chunks) : c_begin;  // a warp past `out` only joins the barrier

  // Outputs past `out` (the last group's tail) re-read the last row and are never stored: the
  // loop carries no per-output branch.
  const uint64_t policy = weight_policy();
  const uint4* wrow[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int row = g < P ? min(o0 + g, a.out - 1) : a.out + min(o0 + g - P, a.out - 1);  // up rows follow the gate rows
    wrow[g] = a.w + static_cast<size_t>(row) * a.chunks;
  }

  float acc[G][R];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[g][r] = 0.0f;

  int c = c_begin;
#pragma unroll 1  // the U steps are the unroll; more would only raise register pressure
  for (; c + 32 * U <= c_end; c += 32 * U) {
    uint4 wv[U][G];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int g = 0; g < G; ++g) wv[u][g] = load_weights(wrow[g] + c + 32 * u + lane, policy);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint4 xv[R];
      load_x<R>(xv, a.x, a.chunks, c + 32 * u + lane);
      fma_chunk<G, R>(acc, wv[u], xv);
    }
  }
  if (c < c_end) {  // fewer than 32·U chunks left: the same steps, predicated per lane
    uint4 wv[U][G];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int cc = c + 32 * u + lane;
#pragma unroll
      for (int g = 0; g < G; ++g) wv[u][g] = cc < c_end ? load_weights(wrow[g] + cc, policy) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int cc = c + 32 * u + lane;
      if (cc < c_end) {
        uint4 xv[R];
        load_x<R>(xv, a.x, a.chunks, cc);
        fma_chunk<G, R>(acc, wv[u], xv);
      }
    }
  }

#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[g][r] += __shfl_xor_sync(0xffffffffu, acc[g][r], off);

  // Element j = p·R + r of a warp's sums is column o0 + p, row r; with SwiGLU, its up sum is
  // element j + P·R.
  if (a.split == 1) {  // every lane holds the warp's sums; lane j < P·R writes element j
    const float v = pick<G, R>(acc, lane);
    const int o = o0 + lane / R;
    if constexpr (kSwiGlu) {
      const float up = pick<G, R>(acc, lane + P * R);
      if (lane < P * R && o < a.out) store_swiglu(a, lane % R, o, v, up);
    } else {
      if (lane < P * R && o < a.out) store(a, lane % R, o, v);
    }
    return;
  }
  if (lane < G * R) part[warp][lane] = pick<G, R>(acc, lane);
  __syncthreads();
  // Thread t < groups · P · R finishes element j = t % (P·R) of group t / (P·R): slices in order.
  const int groups = kGemvWarps / a.split;
  const int t = threadIdx.x;
  if (t < groups * P * R) {
    const int gi = t / (P * R), j = t % (P * R);
    const int o = (blockIdx.x * groups + gi) * P + j / R;
    float sum = 0.0f;
    for (int k = 0; k < a.split; ++k) sum += part[gi * a.split + k][j];
    if constexpr (kSwiGlu) {
      float up = 0.0f;
      for (int k = 0; k < a.split; ++k) up += part[gi * a.split + k][j + P * R];
      if (o < a.out) store_swiglu(a, j % R, o, sum, up);
    } else {
      if (o < a.out) store(a, j % R, o, sum);
    }
  }
}

template <int R, bool kSwiGlu>
void launch_rows(const GemvArgs& a, cudaStream_t stream) {
  const int64_t per_block = int64_t{kGemvWarps / a.split} * (kSwiGlu ? outs_per_warp(R) / 2 : outs_per_warp(R));
  const int64_t blocks = (a.out + per_block - 1) / per_block;
  gemv_kernel<R, kSwiGlu><<<static_cast<unsigned>(blocks), kGemvThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
}

template <bool kSwiGlu>
void launch_any(const GemvArgs& a, int rows, cudaStream_t stream) {
  switch (rows) {
    case 1:
      launch_rows<1, kSwiGlu>(a, stream);
      break;
    case 2:
      launch_rows<2, kSwiGlu>(a, stream);
      break;
    case 3:
      launch_rows<3, kSwiGlu>(a, stream);
      break;
    case 4:
      launch_rows<4, kSwiGlu>(a, stream);
      break;
    case 5:
      launch_rows<5, kSwiGlu>(a, stream);
      break;
    case 6:
      launch_rows<6, kSwiGlu>(a, stream);
      break;
    case 7:
      launch_rows<7, kSwiGlu>(a, stream);
      break;
    default:
      launch_rows<8, kSwiGlu>(a, stream);
      break;
  }
}

GemvArgs args(const uint16_t* w, const uint16_t* x, void* y, int in, int out) {
  GemvArgs a;
  a.w = reinterpret_cast<const uint4*>(w);
  a.x = reinterpret_cast<const uint4*>(x);
  a.y = y;
  a.kind = GemvOut::Fp32;
  a.chunks = in / 8;
  a.out = out;
  return a;
}

std::invalid_argument unsupported(int in) {
  return std::invalid_argument("gemv: rows must be 1.." + std::to_string(kGemvMaxRows) + ", in a positive multiple of 8 (got " +
                               std::to_string(in) + "), W and X 16-byte aligned");
}

}  // namespace

bool gemv_bf16_supports(int rows, int in, int out, const void* w, const void* x) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return rows >= 1 && rows <= kGemvMaxRows && out >= 1 && in >= 8 && in % 8 == 0 && aligned(w) && aligned(x);
}

int gemv_split(int in, int out, int sm_count) {
  // Enough (output, slice) pairs for ~16 warps of 2 outputs per SM, as long as the next split
  // leaves every warp a full step (32 chunks) of `in`.
  const int chunks = in / 8;
  const int64_t want = int64_t{32} * std::max(sm_count, 1);
  int s = 1;
  while (s < kGemvWarps && int64_t{out} * s < want && chunks / (2 * s) >= 32) s *= 2;
  return s;
}

void launch_gemv_bf16(const uint16_t* w, const uint16_t* x, void* y, GemvOut y_kind, int rows, int in, int out, int sm_count,
                      cudaStream_t stream) {
  if (!gemv_bf16_supports(rows, in, out, w, x) || !y) throw unsupported(in);
  GemvArgs a = args(w, x, y, in, out);
  a.kind = y_kind;
  a.split = gemv_split(in, out, sm_count);
  a.slice = (a.chunks + a.split - 1) / a.split;
  launch_any<false>(a, rows, stream);
}

void launch_gemv_swiglu_bf16(const uint16_t* w, const uint16_t* x, uint16_t* act, int rows, int in, int mlp, int sm_count,
                             cudaStream_t stream) {
  if (mlp < 1 || mlp > (1 << 30) || !gemv_bf16_supports(rows, in, 2 * mlp, w, x) || !act) throw unsupported(in);
  GemvArgs a = args(w, x, act, in, mlp);
  a.split = gemv_split(in, 2 * mlp, sm_count);  // the unfused gate/up GEMV's: the same sums
  a.slice = (a.chunks + a.split - 1) / a.split;
  launch_any<true>(a, rows, stream);
}

}  // namespace ib
