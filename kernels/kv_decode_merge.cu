// The second kernel of split-K decode: the splits' partials merged (log-sum-exp) into the bf16
// output. Its own file because both launchers (bf16 / fp8 / int8 and KIVI) use it.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kv_decode_internal.cuh"
#include "numerics/cuda_check.h"
#include "numerics/half.h"

namespace ib {

namespace {

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

}  // namespace

namespace detail {

// The partials of `splits` blocks per (sequence, head) merged into out (nothing when splits = 1).
void launch_merge_partials(const float* ws_o, const float* ws_ml, int splits, int batch, int heads, int head_dim, uint16_t* out,
                           cudaStream_t stream) {
  if (splits <= 1) return;
  const size_t smem = static_cast<size_t>(splits) * sizeof(float);
  kv_merge_kernel<<<static_cast<unsigned>(batch * heads), static_cast<unsigned>(head_dim), smem, stream>>>(ws_o, ws_ml, splits,
                                                                                                           out);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace detail

}  // namespace ib
