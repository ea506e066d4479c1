#include "numerics/packed_gemv.h"
#include "numerics/packed_gemv_store.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include <immintrin.h>

namespace ib {
namespace {

constexpr int P = PackedWeights::kPanel;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
float widen(float w) { return w; }
float widen(uint16_t w) {
  const uint32_t b = static_cast<uint32_t>(w) << 16;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// One panel (cols ≤ P valid columns of P stored) for `rows` rows, one output at a time.
template <class W>
void panel_generic(const float* x, int rows, int in, const W* panel, int cols, float* y, int out) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float acc = 0;
      for (int i = 0; i < in; ++i)
        acc = std::fma(x[static_cast<size_t>(r) * in + i], widen(panel[static_cast<size_t>(i) * P + c]), acc);
      y[static_cast<size_t>(r) * out + c] = acc;
    }
}

// AVX2: 16 columns (two registers) of the panel against NR ≤ 4 rows, the panel read with its
// stride of P elements (still one forward stream per 16-column slice).
__attribute__((target("avx2,fma"))) inline __m256 load8(const float* p) { return _mm256_load_ps(p); }
__attribute__((target("avx2,fma"))) inline __m256 load8(const uint16_t* p) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

template <int NR, class W>
__attribute__((target("avx2,fma"))) void slice_avx2(const float* x, int in, const W* panel, int c0, int cols, float* y, int out) {
  __m256 acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int i = 0; i < in; ++i) {
    const W* w = panel + static_cast<size_t>(i) * P + c0;
    const __m256 w0 = load8(w), w1 = load8(w + 8);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + static_cast<size_t>(r) * in + i);
      acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  const int n = std::min(16, cols - c0);
  for (int r = 0; r < NR; ++r) {
    float* yr = y + static_cast<size_t>(r) * out + c0;
    if (n == 16) {
      _mm256_storeu_ps(yr, acc[r][0]);
      _mm256_storeu_ps(yr + 8, acc[r][1]);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[r][0]);
      _mm256_store_ps(tmp + 8, acc[r][1]);
      std::copy(tmp, tmp + n, yr);
    }
  }
}

template <class W>
__attribute__((target("avx2,fma"))) void panel_avx2(const float* x, int rows, int in, const W* panel, int cols, float* y,
                                                    int out) {
  for (int c0 = 0; c0 < cols; c0 += 16)
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const float* xr = x + static_cast<size_t>(r0) * in;
      float* yr = y + static_cast<size_t>(r0) * out;
      switch (std::min(4, rows - r0)) {
        case 1:
          slice_avx2<1>(xr, in, panel, c0, cols, yr, out);
          break;
        case 2:
          slice_avx2<2>(xr, in, panel, c0, cols, yr, out);
          break;
        case 3:
          slice_avx2<3>(xr, in, panel, c0, cols, yr, out);
          break;
        default:
          slice_avx2<4>(xr, in, panel, c0, cols, yr, out);
          break;
      }
    }
}

// AVX-512: the whole panel (four registers) against NR ≤ 6 rows: four independent chains per
// row hide the FMA latency even at batch 1, and the panel is read once per 6 rows.
__attribute__((target("avx512f"))) inline __m512 load16(const float* p) { return _mm512_load_ps(p); }
__attribute__((target("avx512f"))) inline __m512 load16(const uint16_t* p) {
  // The zero-masked forms: GCC 12's unmasked ones warn of an uninitialised pass-through operand.
  const __m512i v = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, v, 16));
}

template <int NR, class W>
__attribute__((target("avx512f"))) void rows_avx512(const float* x, int in, const W* panel, int cols, float* y, int out) {
  __m512 acc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int i = 0; i < in; ++i) {
    const W* w = panel + static_cast<size_t>(i) * P;
    const __m512 w0 = load16(w), w1 = load16(w + 16), w2 = load16(w + 32), w3 = load16(w + 48);
    // Unrolled, so the accumulators stay in registers (GCC 12 otherwise kept them in memory:
    // a load and a store per FMA, 2.7x slower at 4 rows).
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const __m512 a = _mm512_set1_ps(x[static_cast<size_t>(r) * in + i]);
      acc[r][0] = _mm512_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(a, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(a, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(a, w3, acc[r][3]);
    }
  }
  store_columns_avx512(acc, cols, y, out);
}

// Rows in blocks of up to 6: 24 accumulators, the panel's 4 registers and a broadcast fill 29 of
// the 32, and a verify pass of K + 1 = 5 or 6 rows reads each panel once.
template <class W>
__attribute__((target("avx512f"))) void panel_avx512(const float* x, int rows, int in, const W* panel, int cols, float* y,
                                                     int out) {
  for (int r0 = 0; r0 < rows; r0 += 6) {
    const float* xr = x + static_cast<size_t>(r0) * in;
    float* yr = y + static_cast<size_t>(r0) * out;
    switch (std::min(6, rows - r0)) {
      case 1:
        rows_avx512<1>(xr, in, panel, cols, yr, out);
        break;
      case 2:
        rows_avx512<2>(xr, in, panel, cols, yr, out);
        break;
      case 3:
        rows_avx512<3>(xr, in, panel, cols, yr, out);
        break;
      case 4:
        rows_avx512<4>(xr, in, panel, cols, yr, out);
        break;
      case 5:
        rows_avx512<5>(xr, in, panel, cols, yr, out);
        break;
      default:
        rows_avx512<6>(xr, in, panel, cols, yr, out);
        break;
    }
  }
}

template <class W>
using PanelFn = void (*)(const float*, int, int, const W*, int, float*, int);

template <class W>
PanelFn<W> panel_fn(CpuIsa isa) {
  return for_isa<PanelFn<W>>(isa, panel_avx512<W>, panel_avx2<W>, panel_generic<W>);
}

}  // namespace

CpuIsa best_cpu_isa() {
  static const CpuIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return CpuIsa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::Avx2;
    return CpuIsa::Generic;
  }();
  return isa;
}

bool cpu_has_avx512_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

const char* to_string(CpuIsa i) {
  switch (i) {
    case CpuIsa::Avx512:
      return "avx512";
    case CpuIsa::Avx2:
      return "avx2";
    case CpuIsa::Generic:
      break;
  }
  return "generic";
}

const char* to_string(PackedType t) {
  switch (t) {
    case PackedType::BF16:
      return "bf16";
    case PackedType::Q8_0:
      return "q8_0";
    case PackedType::Q4_1:
      return "q4_1";
    case PackedType::Q8_0_I8:
      return "q8_0_i8";
    case PackedType::Q4_1_I8:
      return "q4_1_i8";
    case PackedType::F32:
      break;
  }
  return "f32";
}

void PackedWeights::Free::operator()(void* p) const { std::free(p); }

PackedWeights::PackedWeights(const float* wt, int in, int out, bool allow_bf16) : in_(in), out_(out) {
  const size_t n = static_cast<size_t>(in) * static_cast<size_t>(out);
  bool bf16 = allow_bf16;
  for (size_t e = 0; bf16 && e < n; ++e) bf16 = (bits_of(wt[e]) & 0xFFFFu) == 0;
  type_ = bf16 ? PackedType::BF16 : PackedType::F32;
  const size_t elem = bf16 ? 2 : 4;
  const size_t count = panels() * static_cast<size_t>(in) * P;
  bytes_ = count * elem;
  void* mem = std::aligned_alloc(64, (bytes_ + 63) / 64 * 64);
  if (!mem) throw std::bad_alloc();
  data_.reset(static_cast<unsigned char*>(mem));
  std::memset(mem, 0, bytes_);  // the columns past `out` in the last panel stay zero
  for (size_t p = 0; p < panels(); ++p) {
    const int c0 = static_cast<int>(p) * P, cols = std::min(P, out - c0);
    for (int i = 0; i < in; ++i) {
      const float* src = wt + static_cast<size_t>(i) * out + c0;
      const size_t at = (p * static_cast<size_t>(in) + static_cast<size_t>(i)) * P;
      if (bf16) {
        auto* dst = reinterpret_cast<uint16_t*>(data_.get()) + at;
        for (int c = 0; c < cols; ++c) dst[c] = static_cast<uint16_t>(bits_of(src[c]) >> 16);
      } else {
        std::copy(src, src + cols, reinterpret_cast<float*>(data_.get()) + at);
      }
    }
  }
}

void PackedWeights::multiply(const float* x, int rows, size_t p0, size_t p1, float* y, CpuIsa isa) const {
  if (int8_dot()) {
    multiply_dot_panels(type_, data_.get(), in_, out_, x, rows, p0, p1, y, isa);
    return;
  }
  if (blocks()) {
    multiply_block_panels(type_, data_.get(), in_, out_, x, rows, p0, p1, y, isa);
    return;
  }
  for (size_t p = p0; p < p1; ++p) {
    const int c0 = static_cast<int>(p) * P, cols = std::min(P, out_ - c0);
    const size_t at = p * static_cast<size_t>(in_) * P;
    if (type_ == PackedType::BF16) {
      panel_fn<uint16_t>(isa)(x, rows, in_, reinterpret_cast<const uint16_t*>(data_.get()) + at, cols, y + c0, out_);
    } else {
      panel_fn<float>(isa)(x, rows, in_, reinterpret_cast<const float*>(data_.get()) + at, cols, y + c0, out_);
    }
  }
}

}  // namespace ib
