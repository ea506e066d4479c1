// What the files of the engine's small kernels (model_ops*.cu) share: bf16 <-> float in device
// code and a deterministic block sum. Not a public header.
#pragma once

#include <cstdint>

#include "numerics/half.h"

namespace ib::detail {

__device__ __forceinline__ float bf2f(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
// Round-to-nearest-even, bit-identical to the host's float_to_bf16_bits.
__device__ __forceinline__ uint16_t f2bf(float f) { return float_to_bf16_bits(f); }

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

}  // namespace ib::detail
