// Pass 2 of standard attention: P = softmax(S) row by row, S and P n_q × n_k in HBM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention.h"
#include "element.cuh"
#include "numerics/cuda_check.h"
#include "numerics/online_softmax.h"

namespace ib {
namespace {

// Adds x to a running (max, sum) summary with one exponential.
__device__ __forceinline__ void online_add(SoftmaxSummary<float>& a, float x) {
  if (x > a.max) {
    a.sum = a.sum * __expf(a.max - x) + 1.0f;  // exp(-inf) = 0 on the first element
    a.max = x;
  } else {
    a.sum += __expf(x - a.max);
  }
}

__device__ __forceinline__ SoftmaxSummary<float> merge(SoftmaxSummary<float> a, SoftmaxSummary<float> b) {
  float sa, sb;
  return softmax_merge(a, b, &sa, &sb);
}

constexpr int kThreads = 256;

// v1: one block per row, 256 threads. Pass 1 reads the visible part of the row once, each thread
// keeping an online (max, sum); the summaries merge through warp shuffles and shared memory.
// Pass 2 reads the row again (mostly from L2) and writes P, zeros past the causal diagonal (and,
// with a sliding window, before its first key).
// Rows whose length is a multiple of 8 move 16 bytes per thread per access.
template <class T>
__global__ void __launch_bounds__(kThreads)
    softmax_rows(const T* __restrict__ s, T* __restrict__ p, int seq_q, int seq_k, bool causal, int window) {
  const int64_t row = blockIdx.x;
  const int i = static_cast<int>(row % seq_q);
  int n = seq_k, lo = 0;  // visible keys: lo .. n − 1
  if (causal) {
    const int64_t last = int64_t{i} + seq_k - seq_q;
    n = last < 0 ? 0 : (last + 1 < seq_k ? static_cast<int>(last + 1) : seq_k);
    if (window > 0 && last - window + 1 > 0) lo = static_cast<int>(min(last - window + 1, int64_t{seq_k}));
  }
  const T* sr = s + row * seq_k;
  T* pr = p + row * seq_k;
  const bool vec = seq_k % 8 == 0;

  SoftmaxSummary<float> acc = softmax_empty<float>();
  if (vec) {
    for (int j0 = (lo & ~7) + static_cast<int>(threadIdx.x) * 8; j0 < n; j0 += kThreads * 8) {  // from the window's chunk
      const uint4 raw = *reinterpret_cast<const uint4*>(sr + j0);
      const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (j0 + e < n && j0 + e >= lo) online_add(acc, to_float(x[e]));
    }
  } else {
    for (int j = lo + static_cast<int>(threadIdx.x); j < n; j += kThreads) online_add(acc, to_float(sr[j]));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    SoftmaxSummary<float> o{__shfl_xor_sync(0xffffffffu, acc.max, off), __shfl_xor_sync(0xffffffffu, acc.sum, off)};
    acc = merge(acc, o);
  }
  __shared__ SoftmaxSummary<float> warp_acc[kThreads / 32];
  __shared__ SoftmaxSummary<float> total;
  if ((threadIdx.x & 31) == 0) warp_acc[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    SoftmaxSummary<float> t = warp_acc[0];
    for (int w = 1; w < kThreads / 32; ++w) t = merge(t, warp_acc[w]);
    total = t;
  }
  __syncthreads();
  const float m = total.max;
  const float inv = total.sum > 0.0f ? 1.0f / total.sum : 0.0f;

  if (vec) {
    for (int j0 = threadIdx.x * 8; j0 < seq_k; j0 += kThreads * 8) {
      uint4 out;
      T* y = reinterpret_cast<T*>(&out);
      if (j0 < n && j0 + 8 > lo) {  // chunks wholly before the window or past the diagonal are zeros, not read
        const uint4 raw = *reinterpret_cast<const uint4*>(sr + j0);
        const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = from_float<T>(j0 + e < n && j0 + e >= lo ? __expf(to_float(x[e]) - m) * inv : 0.0f);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) y[e] = from_float<T>(0.0f);
      }
      *reinterpret_cast<uint4*>(pr + j0) = out;
    }
  } else {
    for (int j = threadIdx.x; j < seq_k; j += kThreads)
      pr[j] = from_float<T>(j < n && j >= lo ? __expf(to_float(sr[j]) - m) * inv : 0.0f);
  }
}

}  // namespace

void launch_attention_softmax(const void* s, void* p, int64_t rows, int seq_q, int seq_k, bool causal, int window, bool fp16,
                              cudaStream_t stream) {
  if (rows <= 0) return;
  const dim3 grid(static_cast<unsigned>(rows));
  if (fp16)
    softmax_rows<__half>
        <<<grid, kThreads, 0, stream>>>(static_cast<const __half*>(s), static_cast<__half*>(p), seq_q, seq_k, causal, window);
  else
    softmax_rows<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(s),
                                                               static_cast<__nv_bfloat16*>(p), seq_q, seq_k, causal, window);
  IB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ib
