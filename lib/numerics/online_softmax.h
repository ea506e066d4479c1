// The online softmax (Milakov & Gimelshein 2018) that FlashAttention is built on: a softmax over
// a row seen in pieces, each piece summarised by its maximum m and its sum l = Σ exp(x − m).
// Merging two summaries gives the summary of their union and the factors by which each side's
// partial output (Σ exp(x − m)·v) must be rescaled. Shared by the CPU flash variant and the CUDA
// kernels, and unit-tested on the CPU.
#pragma once

#include <cmath>

#include "numerics/hd.h"

namespace ib {

IB_HD float softmax_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return std::exp(x);
#endif
}
IB_HD double softmax_exp(double x) { return exp(x); }

template <class T>
struct SoftmaxSummary {
  T max;  // -inf for an empty (or fully masked) piece
  T sum;  // Σ exp(x − max); 0 for an empty piece
};

template <class T>
IB_HD SoftmaxSummary<T> softmax_empty() {
  return {-static_cast<T>(INFINITY), T(0)};
}

// Union of a and b. scale_a and scale_b multiply a's and b's partial outputs so that both are
// relative to the merged maximum. Two empty pieces give an empty piece and zero factors (never NaN).
template <class T>
IB_HD SoftmaxSummary<T> softmax_merge(SoftmaxSummary<T> a, SoftmaxSummary<T> b, T* scale_a, T* scale_b) {
  const T m = a.max > b.max ? a.max : b.max;
  if (m == -static_cast<T>(INFINITY)) {
    *scale_a = T(0);
    *scale_b = T(0);
    return softmax_empty<T>();
  }
  *scale_a = softmax_exp(a.max - m);  // exp(-inf) = 0 for an empty side
  *scale_b = softmax_exp(b.max - m);
  return {m, a.sum * *scale_a + b.sum * *scale_b};
}

// The summary of a piece of n scores (entries equal to -inf are masked out).
template <class T>
IB_HD SoftmaxSummary<T> softmax_summarize(const T* x, int n) {
  T m = -static_cast<T>(INFINITY);
  for (int i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  if (m == -static_cast<T>(INFINITY)) return softmax_empty<T>();
  T l = 0;
  for (int i = 0; i < n; ++i) l += softmax_exp(x[i] - m);
  return {m, l};
}

}  // namespace ib
