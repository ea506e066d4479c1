#include "numerics/query_attention.h"

#include "numerics/vector_exp.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include <immintrin.h>

namespace ib {
namespace {

// ---- The per-key loop (every level; Avx2 is also the order the AVX-512 kernel reproduces) ----

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int d) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int e = 0;
  for (; e + 16 <= d; e += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e + 8), _mm256_loadu_ps(b + e + 8), acc1);
  }
  if (e + 8 <= d) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc0);
    e += 8;
  }
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
  float r = _mm_cvtss_f32(s4);
  for (; e < d; ++e) r = std::fma(a[e], b[e], r);
  return r;
}

float dot_generic(const float* a, const float* b, int d) {
  float acc = 0;
  for (int e = 0; e < d; ++e) acc += a[e] * b[e];
  return acc;
}

// GCC does not vectorise the scalar loop at -O2 (o and v might alias); each element is o + w·v
// with the product rounded first, at any width.
__attribute__((target("avx2"))) void axpy_avx2(float w, const float* v, float* o, int d) {
  const __m256 wv = _mm256_set1_ps(w);
  int e = 0;
  for (; e + 8 <= d; e += 8)
    _mm256_storeu_ps(o + e, _mm256_add_ps(_mm256_loadu_ps(o + e), _mm256_mul_ps(wv, _mm256_loadu_ps(v + e))));
  for (; e < d; ++e) o[e] += w * v[e];
}

void axpy_generic(float w, const float* v, float* o, int d) {
  for (int e = 0; e < d; ++e) o[e] += w * v[e];
}

// e^x in place: exp_fixed's bits at every level, its fused multiply-adds one instruction each
// where the CPU has them (inlined into a function compiled for them) rather than libm's fmaf.
__attribute__((target("avx512f"))) void exp_in_place_avx512(float* x, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(x + j, exp_fixed_avx512(_mm512_loadu_ps(x + j)));
  for (; j < n; ++j) x[j] = exp_fixed(x[j]);
}
__attribute__((target("avx2,fma"))) void exp_in_place_fma(float* x, int n) {
  for (int j = 0; j < n; ++j) x[j] = exp_fixed(x[j]);
}
void exp_in_place_generic(float* x, int n) {
  for (int j = 0; j < n; ++j) x[j] = exp_fixed(x[j]);
}
void exp_in_place(float* x, int n, CpuIsa isa) {
  if (isa == CpuIsa::Avx512)
    exp_in_place_avx512(x, n);
  else if (isa == CpuIsa::Avx2)
    exp_in_place_fma(x, n);
  else
    exp_in_place_generic(x, n);
}

void attend_loop(const AttentionQuery* queries, int m, const float* const* keys, const float* const* values, int d, float scale,
                 CpuIsa isa) {
  std::vector<float> s;
  for (int i = 0; i < m; ++i) {
    const AttentionQuery& a = queries[i];
    const int n = std::max(0, a.last - a.first + 1);
    s.resize(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) s[static_cast<size_t>(j)] = attention_dot(a.q, keys[a.first + j], d, isa) * scale;
    attention_softmax(s.data(), n, isa);
    std::fill(a.out, a.out + d, 0.0f);
    for (int j = 0; j < n; ++j) attention_axpy(s[static_cast<size_t>(j)], values[a.first + j], a.out, d, isa);
  }
}

// ---- AVX-512: many queries over blocks of keys ----

constexpr int kKeyBlock = 64;  // keys whose K (then V) rows stay in L1 while every query reads them

// Sixteen keys' chains summed as the AVX2 loop sums one: the chains added (a = c0 + c1), then
// (a_i + a_i+4), then (s_0 + s_2, s_1 + s_3), then their sum, each level pairing lanes of
// several keys at once. Returns the sixteen dot products in key order. (The maskz forms: GCC 12
// warns on the plain forms' undefined pass-through operand.)
__attribute__((target("avx512f"))) inline __m512 reduce_16_keys(const __m512 (&z)[16]) {
  __m512 w[8], v[4], u[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // [c0 | c1] of two keys → [a(key 2i) | a(key 2i+1)]
    w[i] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, z[2 * i], z[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_maskz_shuffle_f32x4(0xFFFF, z[2 * i], z[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 128-bit block t: a_0..3 + a_4..7 of key 4i+t
    v[i] = _mm512_add_ps(_mm512_maskz_shuffle_f32x4(0xFFFF, w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_maskz_shuffle_f32x4(0xFFFF, w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // block t: (s0+s2, s1+s3) of key 8i+t, then of key 8i+4+t
    u[i] = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_maskz_shuffle_ps(0xFFFF, v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // block t: the sums of keys t, t+4, t+8, t+12; lane 4t+c holds key t+4c.
  const __m512 s = _mm512_add_ps(_mm512_maskz_shuffle_ps(0xFFFF, u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_maskz_shuffle_ps(0xFFFF, u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_maskz_permutexvar_ps(0xFFFF, order, s);
}

// s[j - j0] = scale · q·k_j for keys [j0, j1), sixteen at a time. A key's register holds the AVX2
// loop's two chains (lanes 0-7: elements e ≡ 0..7 mod 16, lanes 8-15: 8..15; the d mod 16 ≥ 8
// block on the first only); the sixteen keys' chains advance together (independent fused
// multiply-adds, where one key's chain alone waits on each result).
__attribute__((target("avx512f"))) void scores_avx512(const float* q, const float* const* keys, int j0, int j1, int d,
                                                      float scale, float* s) {
  const int tail = d - d % 8;
  for (int g = j0; g < j1; g += 16) {
    const int n = std::min(16, j1 - g);
    const float* k[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) k[t] = keys[g + std::min(t, n - 1)];  // past n: a repeat, not stored
    __m512 z[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) z[t] = _mm512_setzero_ps();
    int e = 0;
    for (; e + 16 <= d; e += 16) {
      const __m512 qe = _mm512_loadu_ps(q + e);
#pragma GCC unroll 16  // z in registers: sixteen chains in flight
      for (int t = 0; t < 16; ++t) z[t] = _mm512_fmadd_ps(qe, _mm512_loadu_ps(k[t] + e), z[t]);
    }
    if (e + 8 <= d) {  // on the first chain only
      const __m512 qe = _mm512_maskz_loadu_ps(0xFF, q + e);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) z[t] = _mm512_mask3_fmadd_ps(qe, _mm512_maskz_loadu_ps(0xFF, k[t] + e), z[t], 0xFF);
    }
    __m512 dots = reduce_16_keys(z);
    if (tail < d) {  // the last d mod 8 elements one by one, as the loop adds them
      alignas(64) float r[16];
      _mm512_store_ps(r, dots);
      for (int t = 0; t < n; ++t)
        for (int i = tail; i < d; ++i) r[t] = std::fma(q[i], k[t][i], r[t]);
      dots = _mm512_load_ps(r);
    }
    _mm512_mask_storeu_ps(s + (g - j0), static_cast<__mmask16>((1u << n) - 1u), _mm512_mul_ps(dots, _mm512_set1_ps(scale)));
  }
}

// The softmax of G queries' scores over the same keys (n each, at s[i]): the maximum (exact in
// any order), exp, the sums in key order (G independent chains), each weight divided by its sum.
template <int G>
__attribute__((target("avx512f"))) void softmax_avx512(float* const (&s)[G], int n) {
  float sum[G];
  for (int i = 0; i < G; ++i) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 16 <= n; j += 16) m = _mm512_maskz_max_ps(0xFFFF, m, _mm512_loadu_ps(s[i] + j));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, m);
    float mx = lanes[0];
    for (int l = 1; l < 16; ++l) mx = std::max(mx, lanes[l]);
    for (; j < n; ++j) mx = std::max(mx, s[i][j]);
    for (j = 0; j < n; ++j) s[i][j] -= mx;
    exp_in_place_avx512(s[i], n);
    sum[i] = 0;
  }
  for (int j = 0; j < n; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < G; ++i) sum[i] += s[i][j];
  for (int i = 0; i < G; ++i) {
    const __m512 v = _mm512_set1_ps(sum[i]);
    int j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(s[i] + j, _mm512_div_ps(_mm512_loadu_ps(s[i] + j), v));
    for (; j < n; ++j) s[i][j] /= sum[i];
  }
}

// o_i += Σ_j w_i[j - j0]·v_j for keys [j0, j1) and G queries over them: each value row read once
// for the G outputs, held in registers 64 floats at a time (G chains of adds, where one waits).
template <int G>
__attribute__((target("avx512f"))) void weighted_values_avx512(const float* const (&w)[G], const float* const* values, int j0,
                                                               int j1, int d, float* const (&o)[G]) {
  for (int c = 0; c < d; c += 64) {
    const int width = std::min(64, d - c);
    __mmask16 mask[4];
    __m512 acc[G][4];
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      mask[t] = static_cast<__mmask16>((1u << std::clamp(width - 16 * t, 0, 16)) - 1u);
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) acc[i][t] = _mm512_maskz_loadu_ps(mask[t], o[i] + c + 16 * t);
    }
    for (int j = j0; j < j1; ++j) {
      const float* v = values[j] + c;
      __m512 vt[4];
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) vt[t] = _mm512_maskz_loadu_ps(mask[t], v + 16 * t);
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) {
        const __m512 wj = _mm512_set1_ps(w[i][j - j0]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) acc[i][t] = _mm512_add_ps(acc[i][t], _mm512_mul_ps(wj, vt[t]));
      }
    }
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t)
#pragma GCC unroll 4
      for (int i = 0; i < G; ++i) _mm512_mask_storeu_ps(o[i] + c + 16 * t, mask[t], acc[i][t]);
  }
}

// Queries [i0, i0 + G) over the same keys: the weighted sums of keys [j0, j1) of their block.
template <int G>
void weigh_group(const AttentionQuery* queries, int i0, const float* s, const size_t* offset, const float* const* values, int j0,
                 int j1, int d) {
  const float* w[G];
  float* o[G];
  for (int i = 0; i < G; ++i) {
    w[i] = s + offset[i0 + i] + static_cast<size_t>(j0 - queries[i0].first);
    o[i] = queries[i0 + i].out;
  }
  weighted_values_avx512<G>(w, values, j0, j1, d, o);
}

template <int G>
void softmax_group(float* s, const size_t* offset, int i0, int n) {
  float* rows[G];
  for (int i = 0; i < G; ++i) rows[i] = s + offset[i0 + i];
  softmax_avx512<G>(rows, n);
}

// f(std::integral_constant<int, G>) for a group of G = 1..4 queries.
template <class F>
void with_group_size(int g, F&& f) {
  switch (g) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});
  }
}

__attribute__((target("avx512f"))) void attend_avx512(const AttentionQuery* queries, int m, const float* const* keys,
                                                      const float* const* values, int d, float scale) {
  // Each query's scores at offset[i] of one buffer: its keys in order, first to last. Runs of up
  // to 4 consecutive queries over the same keys (a row's heads of one kv head) are weighed together.
  thread_local std::vector<float> s;
  thread_local std::vector<size_t> offset;
  thread_local std::vector<int> group;  // group[i]: queries in the group starting at i (0 inside one)
  offset.assign(static_cast<size_t>(m) + 1, 0);
  group.assign(static_cast<size_t>(m), 0);
  int lo = 0, hi = -1;
  for (int i = 0; i < m; ++i) {
    const AttentionQuery& a = queries[i];
    offset[static_cast<size_t>(i) + 1] = offset[static_cast<size_t>(i)] + static_cast<size_t>(std::max(0, a.last - a.first + 1));
    if (a.last >= a.first) {
      lo = hi < lo ? a.first : std::min(lo, a.first);
      hi = std::max(hi, a.last);
    }
  }
  for (int i = 0; i < m;) {
    int n = 1;
    while (i + n < m && n < 4 && queries[i + n].first == queries[i].first && queries[i + n].last == queries[i].last) ++n;
    group[static_cast<size_t>(i)] = n;
    i += n;
  }
  s.resize(offset.back());
  for (int b0 = lo; b0 <= hi; b0 += kKeyBlock)
    for (int i = 0; i < m; ++i) {
      const AttentionQuery& a = queries[i];
      const int j0 = std::max(a.first, b0), j1 = std::min(a.last + 1, b0 + kKeyBlock);
      if (j0 < j1)
        scores_avx512(a.q, keys, j0, j1, d, scale, &s[offset[static_cast<size_t>(i)] + static_cast<size_t>(j0 - a.first)]);
    }
  for (int i = 0; i < m; i += group[static_cast<size_t>(i)]) {
    const int n = queries[i].last - queries[i].first + 1;
    for (int k = i; k < i + group[static_cast<size_t>(i)]; ++k) std::fill(queries[k].out, queries[k].out + d, 0.0f);
    if (n > 0)
      with_group_size(group[static_cast<size_t>(i)],
                      [&](auto g) { softmax_group<decltype(g)::value>(s.data(), offset.data(), i, n); });
  }
  for (int b0 = lo; b0 <= hi; b0 += kKeyBlock)
    for (int i = 0; i < m; i += group[static_cast<size_t>(i)]) {
      const AttentionQuery& a = queries[i];
      const int j0 = std::max(a.first, b0), j1 = std::min(a.last + 1, b0 + kKeyBlock);
      if (j0 < j1)
        with_group_size(group[static_cast<size_t>(i)],
                        [&](auto g) { weigh_group<decltype(g)::value>(queries, i, s.data(), offset.data(), values, j0, j1, d); });
    }
}

}  // namespace

void attention_softmax(float* s, int n, CpuIsa isa) {
  float mx = -INFINITY;
  for (int j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  for (int j = 0; j < n; ++j) s[j] -= mx;
  exp_in_place(s, n, isa);
  float sum = 0;
  for (int j = 0; j < n; ++j) sum += s[j];
  for (int j = 0; j < n; ++j) s[j] /= sum;
}

float attention_dot(const float* q, const float* k, int d, CpuIsa isa) {
  return isa == CpuIsa::Generic ? dot_generic(q, k, d) : dot_avx2(q, k, d);
}

void attention_axpy(float w, const float* v, float* o, int d, CpuIsa isa) {
  if (isa == CpuIsa::Generic)
    axpy_generic(w, v, o, d);
  else
    axpy_avx2(w, v, o, d);
}

void attend_queries(const AttentionQuery* queries, int m, const float* const* keys, const float* const* values, int d,
                    float scale, CpuIsa isa) {
  if (isa == CpuIsa::Avx512)
    attend_avx512(queries, m, keys, values, d, scale);
  else
    attend_loop(queries, m, keys, values, d, scale, isa);
}

}  // namespace ib
