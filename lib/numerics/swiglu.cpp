#include "numerics/swiglu.h"

#include <immintrin.h>

#include "numerics/vector_exp.h"

namespace ib {
namespace {

__attribute__((target("avx512f"))) void swiglu_avx512(float* gate, const float* up, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp_fixed_avx512(_mm512_sub_ps(zero, g));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + exp_fixed(0.0f - gate[i])) * up[i];
}

// exp_fixed's fused multiply-adds as instructions, not libm's fmaf.
__attribute__((target("avx2,fma"))) void swiglu_fma(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + exp_fixed(0.0f - gate[i])) * up[i];
}

void swiglu_generic(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + exp_fixed(0.0f - gate[i])) * up[i];
}

}  // namespace

void swiglu(float* gate, const float* up, size_t n, CpuIsa isa) {
  if (isa == CpuIsa::Avx512)
    swiglu_avx512(gate, up, n);
  else if (isa == CpuIsa::Avx2)
    swiglu_fma(gate, up, n);
  else
    swiglu_generic(gate, up, n);
}

}  // namespace ib
