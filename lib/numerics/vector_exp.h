// e^x in float32 with the same bits one at a time and sixteen at a time: the CPU engine's softmax
// and SiLU, where libm's expf (a call per element, no vector form with its bits) was a fifth of
// a prefill's attention.
//
// Cephes' expf: x = n·ln2 + r with n = round(x·log2 e) and ln2 in two parts (r exact to a few
// ulps), e^r by a degree-7 polynomial in Horner form with fused multiply-adds, times 2^n built in
// the exponent bits. Every step is one IEEE operation in a fixed order, so the scalar and vector
// forms agree bit for bit. Within 1.5 ulp of the exact value for x ≥ -87.3 (1.0 measured against
// double in steps of 1e-4);
// below that (e^x < 2^-126, a subnormal) it gives 0, above 88.37 infinity (float's largest is at
// 88.72), and NaN for NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <immintrin.h>

namespace ib {
namespace vector_exp_detail {
constexpr float kLog2e = 1.44269504088896341f, kShift = 12582912.0f;  // 1.5·2^23
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kMin = -87.3f, kMax = 88.37f;  // n stays in [-126, 127]: 2^n a normal float
constexpr float kP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                         4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace vector_exp_detail

// n = round(x·log2 e) by adding and taking away 1.5·2^23 in one fused multiply-add (round to
// nearest even, no libm call), and n itself from the sum's low bits. Every product that meets an
// add is an explicit fused multiply-add, so a compiler's contraction cannot change the bits;
// the callers (numerics/query_attention.cpp) are compiled without contraction all the same.
inline float exp_fixed(float x) {
  using namespace vector_exp_detail;
  if (x != x) return x;
  if (x < kMin) return 0.0f;
  if (x > kMax) return INFINITY;
  const float shifted = std::fma(x, kLog2e, kShift), n = shifted - kShift, minus_n = 0.0f - n;
  float r = std::fma(minus_n, kLn2Hi, x);
  r = std::fma(minus_n, kLn2Lo, r);
  float p = kP[0];
  for (int i = 1; i < 6; ++i) p = std::fma(p, r, kP[i]);
  p = std::fma(p, r * r, r) + 1.0f;
  int32_t shifted_bits, shift_bits;
  std::memcpy(&shifted_bits, &shifted, 4);
  std::memcpy(&shift_bits, &kShift, 4);
  const int32_t bits = (shifted_bits - shift_bits + 127) * (1 << 23);
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// (The maskz forms throughout: GCC 12 warns on the plain forms' undefined pass-through operand.)
__attribute__((target("avx512f"))) inline __m512 exp_fixed_avx512(__m512 x) {
  using namespace vector_exp_detail;
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), low = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMin), _CMP_LT_OQ),
                  high = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kMax), _CMP_GT_OQ);
  const __m512 xc = _mm512_maskz_mov_ps(static_cast<__mmask16>(~(nan | low | high)), x);  // 0 where handled apart
  const __m512 shift = _mm512_set1_ps(kShift);
  const __m512 shifted = _mm512_fmadd_ps(xc, _mm512_set1_ps(kLog2e), shift);
  const __m512 minus_n = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_sub_ps(shifted, shift));
  __m512 r = _mm512_fmadd_ps(minus_n, _mm512_set1_ps(kLn2Hi), xc);
  r = _mm512_fmadd_ps(minus_n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP[i]));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i n = _mm512_maskz_sub_epi32(0xFFFF, _mm512_castps_si512(shifted), _mm512_castps_si512(shift));
  const __m512i bits = _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_add_epi32(0xFFFF, n, _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  y = _mm512_mask_mov_ps(y, low, _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, high, _mm512_set1_ps(INFINITY));
  return _mm512_mask_mov_ps(y, nan, x);
}

}  // namespace ib
