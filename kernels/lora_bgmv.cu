// BGMV (lora_bgmv.h), v1: the plain version, one row per block row.
//
// shrink: a block of 8 warps owns one row and 8 of its rank outputs; a warp computes one
// t[r][k] = A_a[k]·x[r] with its lanes striding `in` (coalesced 2-byte loads of A and x, fp32
// accumulation in element order per lane) and a fixed xor-shuffle tree, so the result does not
// depend on the other rows of the launch.
// expand: a block owns one row and 256 outputs; it stages t[r] (rank floats) in shared memory and
// each thread sums Σ_k t[r][k]·B_a[o][k] in k order, then adds scaling·sum to y[r][o] (a bf16 y is
// read, added in fp32 and rounded once, as the engine's bf16 activations are).
#include "lora_bgmv.h"

#include <stdexcept>
#include <string>

#include "numerics/cuda_check.h"
#include "numerics/half.h"

namespace ib {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void lora_shrink_kernel(const uint16_t* __restrict__ x, int in, const int32_t* __restrict__ adapter_of_row,
                                   const uint16_t* const* __restrict__ a, int rank, float* __restrict__ t) {
  const int r = blockIdx.x;
  const int k = blockIdx.y * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int ad = adapter_of_row[r];
  if (ad < 0 || k >= rank) return;
  const uint16_t* ak = a[ad] + static_cast<size_t>(k) * in;
  const uint16_t* xr = x + static_cast<size_t>(r) * in;
  float acc = 0.0f;
  for (int i = lane; i < in; i += 32) acc = fmaf(bf16_bits_to_float(ak[i]), bf16_bits_to_float(xr[i]), acc);
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) t[static_cast<size_t>(r) * rank + k] = acc;
}

__global__ void lora_expand_kernel(const float* __restrict__ t, int rank, const int32_t* __restrict__ adapter_of_row,
                                   const uint16_t* const* __restrict__ b, const float* __restrict__ scaling, int out, void* y,
                                   LoraOut kind) {
  extern __shared__ float tr[];
  const int r = blockIdx.x;
  const int ad = adapter_of_row[r];
  if (ad < 0) return;  // the whole block leaves together: no barrier is skipped by some threads only
  for (int k = threadIdx.x; k < rank; k += kThreads) tr[k] = t[static_cast<size_t>(r) * rank + k];
  __syncthreads();
  const int o = blockIdx.y * kThreads + threadIdx.x;
  if (o >= out) return;
  const uint16_t* bo = b[ad] + static_cast<size_t>(o) * rank;
  float acc = 0.0f;
  for (int k = 0; k < rank; ++k) acc = fmaf(tr[k], bf16_bits_to_float(bo[k]), acc);
  const size_t at = static_cast<size_t>(r) * out + o;
  const float delta = scaling[ad] * acc;
  if (kind == LoraOut::Fp32Add) {
    static_cast<float*>(y)[at] += delta;
  } else {
    uint16_t* yb = static_cast<uint16_t*>(y);
    yb[at] = float_to_bf16_bits(bf16_bits_to_float(yb[at]) + delta);
  }
}

void check_shape(const char* what, int rows, int a, int rank, int bdim) {
  if (rows < 1 || a < 1 || bdim < 1 || rank < 1 || rank > kLoraMaxRank)
    throw std::invalid_argument(std::string(what) + ": rows " + std::to_string(rows) + ", rank " + std::to_string(rank) +
                                " (1.." + std::to_string(kLoraMaxRank) + "), dims " + std::to_string(a) + " and " +
                                std::to_string(bdim) + " must be positive");
}

}  // namespace

void launch_lora_shrink_bf16(const uint16_t* x, int rows, int in, const int32_t* adapter_of_row, const uint16_t* const* a,
                             int rank, float* t, cudaStream_t stream) {
  check_shape("lora shrink", rows, in, rank, 1);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((rank + kWarps - 1) / kWarps));
  lora_shrink_kernel<<<grid, kThreads, 0, stream>>>(x, in, adapter_of_row, a, rank, t);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_lora_expand_bf16(const float* t, int rows, int rank, const int32_t* adapter_of_row, const uint16_t* const* b,
                             const float* scaling, int out, void* y, LoraOut y_kind, cudaStream_t stream) {
  check_shape("lora expand", rows, 1, rank, out);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((out + kThreads - 1) / kThreads));
  lora_expand_kernel<<<grid, kThreads, static_cast<size_t>(rank) * sizeof(float), stream>>>(t, rank, adapter_of_row, b, scaling,
                                                                                            out, y, y_kind);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
