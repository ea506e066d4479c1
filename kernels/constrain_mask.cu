#include "constrain_mask.h"

#include <cfloat>

#include "numerics/cuda_check.h"

namespace ib {

namespace {

// v1: one block of 1024 threads per row. Each thread scans a strided slice, reading the mask
// word once per 32 tokens, and keeps its best (value, index); a warp-shuffle reduction, then
// one across warps through shared memory. The mask costs one extra 4-byte read per 32 logits,
// so the fused kernel stays bandwidth-bound on the logits like the unmasked one.
__device__ __forceinline__ void better(float& v, int32_t& i, float ov, int32_t oi) {
  if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) {
    v = ov;
    i = oi;
  }
}

template <bool kMasked>
__global__ void __launch_bounds__(1024) masked_argmax_kernel(const float* __restrict__ logits, const uint32_t* __restrict__ mask,
                                                             int32_t vocab, int32_t* __restrict__ out) {
  const int32_t row = blockIdx.x;
  const float* l = logits + static_cast<size_t>(row) * vocab;
  const int32_t words = (vocab + 31) / 32;
  const uint32_t* m = kMasked ? mask + static_cast<size_t>(row) * words : nullptr;
  float best = -FLT_MAX;
  int32_t idx = -1;
  for (int32_t t = threadIdx.x; t < vocab; t += blockDim.x) {
    if (kMasked && !((__ldg(m + (t >> 5)) >> (t & 31)) & 1u)) continue;
    const float v = __ldg(l + t);
    if (v != v) continue;  // NaN
    better(best, idx, v, t);
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float ov = __shfl_down_sync(0xffffffffu, best, offset);
    const int32_t oi = __shfl_down_sync(0xffffffffu, idx, offset);
    better(best, idx, ov, oi);
  }
  __shared__ float warp_best[32];
  __shared__ int32_t warp_idx[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_idx[warp] = idx;
  }
  __syncthreads();
  if (warp == 0) {
    const int nwarps = (blockDim.x + 31) / 32;
    best = lane < nwarps ? warp_best[lane] : -FLT_MAX;
    idx = lane < nwarps ? warp_idx[lane] : -1;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_down_sync(0xffffffffu, best, offset);
      const int32_t oi = __shfl_down_sync(0xffffffffu, idx, offset);
      better(best, idx, ov, oi);
    }
    if (lane == 0) out[row] = idx;
  }
}

}  // namespace

void launch_masked_argmax(const float* logits, const uint32_t* mask, int32_t vocab, int32_t rows, int32_t* out,
                          cudaStream_t stream) {
  if (rows <= 0) return;
  if (mask)
    masked_argmax_kernel<true><<<rows, 1024, 0, stream>>>(logits, mask, vocab, out);
  else
    masked_argmax_kernel<false><<<rows, 1024, 0, stream>>>(logits, nullptr, vocab, out);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
