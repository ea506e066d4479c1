// The packed GEMV on GGUF block-quantized weights (packed_gemv.h): the blocks regrouped into
// 64-column panels, each weight widened in registers to exactly ggml's dequantized float.
//
// A panel holds in/32 block panels, one per 32 inputs, each of the 64 columns' scales followed by
// their quants input-major, so a step reads one forward stream per panel and widens 16 columns
// per instruction:
//   Q8_0: d[64] fp16 | q[32][64] int8                                    2,176 bytes
//   Q4_1: d[64] fp16 | m[64] fp16 | q[32][32] bytes: the low nibble of    1,280 bytes
//         byte c is column c, its high nibble column c + 32
// (sizes multiples of 64, so every load is aligned). Columns past `out` have d = m = q = 0.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include <immintrin.h>

#include "numerics/half.h"
#include "numerics/packed_gemv.h"
#include "numerics/packed_gemv_store.h"

namespace ib {
// Named, not anonymous: the sanitizer preset's unity build compiles this file with packed_gemv.cpp,
// whose float kernels have the same names.
namespace block_kernels {

constexpr int P = PackedWeights::kPanel;
constexpr int kBlock = 32;
constexpr size_t kQ8Bytes = 2 * P + kBlock * P;      // a Q8_0 block panel
constexpr size_t kQ4Bytes = 4 * P + kBlock * P / 2;  // a Q4_1 block panel
static_assert(kQ8Bytes % 64 == 0 && kQ4Bytes % 64 == 0, "block panels keep 64-byte alignment");

size_t block_panel_bytes(PackedType t) { return t == PackedType::Q8_0 ? kQ8Bytes : kQ4Bytes; }

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// ---- generic: one output at a time, the reference's order ----

template <PackedType T>
void panel_generic(const float* x, int rows, int in, const unsigned char* panel, int cols, float* y, int out) {
  const int nb = in / kBlock;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float acc = 0;
      for (int b = 0; b < nb; ++b) {
        const unsigned char* bp = panel + static_cast<size_t>(b) * block_panel_bytes(T);
        const float* xb = x + static_cast<size_t>(r) * in + b * kBlock;
        const float d = fp16_bits_to_float(le16(bp + 2 * c));
        if constexpr (T == PackedType::Q8_0) {
          const auto* q = reinterpret_cast<const int8_t*>(bp + 2 * P);
          for (int i = 0; i < kBlock; ++i) acc = std::fma(xb[i], static_cast<float>(q[i * P + c]) * d, acc);
        } else {
          const float m = fp16_bits_to_float(le16(bp + 2 * P + 2 * c));
          const unsigned char* q = bp + 4 * P;
          for (int i = 0; i < kBlock; ++i) {
            const unsigned char byte = q[i * (P / 2) + (c & 31)];
            const int nib = c < 32 ? (byte & 0x0F) : (byte >> 4);
            acc = std::fma(xb[i], std::fma(static_cast<float>(nib), d, m), acc);
          }
        }
      }
      y[static_cast<size_t>(r) * out + c] = acc;
    }
}

// ---- AVX2: 16 columns (two registers) against NR ≤ 4 rows ----

template <PackedType T, int NR>
__attribute__((target("avx2,fma,f16c"))) void slice_avx2(const float* x, int in, const unsigned char* panel, int c0, int cols,
                                                         float* y, int out) {
  __m256 acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int nb = in / kBlock;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (int b = 0; b < nb; ++b) {
    const unsigned char* bp = panel + static_cast<size_t>(b) * block_panel_bytes(T);
    const __m256 d0 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bp + 2 * c0)));
    const __m256 d1 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bp + 2 * c0 + 16)));
    __m256 m0 = _mm256_setzero_ps(), m1 = _mm256_setzero_ps();
    if constexpr (T == PackedType::Q4_1) {
      m0 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bp + 2 * P + 2 * c0)));
      m1 = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(bp + 2 * P + 2 * c0 + 16)));
    }
    const size_t xb = static_cast<size_t>(b) * kBlock;
    for (int i = 0; i < kBlock; ++i) {
      __m256 w0, w1;
      if constexpr (T == PackedType::Q8_0) {
        const unsigned char* q = bp + 2 * P + static_cast<size_t>(i) * P + c0;
        w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)))), d0);
        w1 =
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8)))), d1);
      } else {
        const __m128i v =
            _mm_load_si128(reinterpret_cast<const __m128i*>(bp + 4 * P + static_cast<size_t>(i) * (P / 2) + (c0 & 31)));
        const __m128i n = c0 < 32 ? _mm_and_si128(v, low4) : _mm_and_si128(_mm_srli_epi16(v, 4), low4);
        w0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(n)), d0, m0);
        w1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(n, 8))), d1, m1);
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const __m256 a = _mm256_broadcast_ss(x + static_cast<size_t>(r) * in + xb + i);
        acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
      }
    }
  }
  const int n = std::min(16, cols - c0);
  for (int r = 0; r < NR; ++r) {
    float* yr = y + static_cast<size_t>(r) * out + c0;
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, acc[r][0]);
    _mm256_store_ps(tmp + 8, acc[r][1]);
    std::copy(tmp, tmp + n, yr);
  }
}

template <PackedType T>
__attribute__((target("avx2,fma,f16c"))) void panel_avx2(const float* x, int rows, int in, const unsigned char* panel, int cols,
                                                         float* y, int out) {
  for (int c0 = 0; c0 < cols; c0 += 16)
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const float* xr = x + static_cast<size_t>(r0) * in;
      float* yr = y + static_cast<size_t>(r0) * out;
      switch (std::min(4, rows - r0)) {
        case 1:
          slice_avx2<T, 1>(xr, in, panel, c0, cols, yr, out);
          break;
        case 2:
          slice_avx2<T, 2>(xr, in, panel, c0, cols, yr, out);
          break;
        case 3:
          slice_avx2<T, 3>(xr, in, panel, c0, cols, yr, out);
          break;
        default:
          slice_avx2<T, 4>(xr, in, panel, c0, cols, yr, out);
          break;
      }
    }
}

// ---- AVX-512: the whole panel (four registers) against NR ≤ 4 rows ----
// Four rows, not the float panel's six: the block's scales (and offsets) take eight registers.

__attribute__((target("avx512f"))) inline __m512 widen_u8(__m128i v) {
  // The zero-masked forms: GCC 12's unmasked ones warn of an uninitialised pass-through operand.
  return _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, v));
}
__attribute__((target("avx512f"))) inline __m512 widen_i8(const unsigned char* p) {
  return _mm512_maskz_cvtepi32_ps(0xFFFF,
                                  _mm512_maskz_cvtepi8_epi32(0xFFFF, _mm_load_si128(reinterpret_cast<const __m128i*>(p))));
}
__attribute__((target("avx512f"))) inline __m512 halves(const unsigned char* p) {
  return _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

// The 64 columns' weights of input i of a block panel, widened exactly to ggml's floats.
template <PackedType T>
__attribute__((target("avx512f"))) inline void widen_input(const unsigned char* bp, int i, const __m512* d, const __m512* m,
                                                           __m512* w) {
  if constexpr (T == PackedType::Q8_0) {
    const unsigned char* q = bp + 2 * P + static_cast<size_t>(i) * P;
    for (int j = 0; j < 4; ++j) w[j] = _mm512_mul_ps(widen_i8(q + 16 * j), d[j]);
  } else {
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(bp + 4 * P + static_cast<size_t>(i) * (P / 2)));
    const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    w[0] = _mm512_fmadd_ps(widen_u8(_mm256_castsi256_si128(lo)), d[0], m[0]);
    w[1] = _mm512_fmadd_ps(widen_u8(_mm256_extracti128_si256(lo, 1)), d[1], m[1]);
    w[2] = _mm512_fmadd_ps(widen_u8(_mm256_castsi256_si128(hi)), d[2], m[2]);
    w[3] = _mm512_fmadd_ps(widen_u8(_mm256_extracti128_si256(hi, 1)), d[3], m[3]);
  }
}

template <PackedType T>
__attribute__((target("avx512f"))) inline void block_scales(const unsigned char* bp, __m512* d, __m512* m) {
  for (int j = 0; j < 4; ++j) {
    d[j] = halves(bp + 32 * j);
    m[j] = T == PackedType::Q4_1 ? halves(bp + 2 * P + 32 * j) : _mm512_setzero_ps();
  }
}

// Up to 4 rows: each weight widened in registers as it streams by, once per row group.
template <PackedType T, int NR>
__attribute__((target("avx512f"))) void rows_avx512(const float* x, int in, const unsigned char* panel, int cols, float* y,
                                                    int out) {
  __m512 acc[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int nb = in / kBlock;
  for (int b = 0; b < nb; ++b) {
    const unsigned char* bp = panel + static_cast<size_t>(b) * block_panel_bytes(T);
    __m512 d[4], m[4];
    block_scales<T>(bp, d, m);
    const size_t xb = static_cast<size_t>(b) * kBlock;
    for (int i = 0; i < kBlock; ++i) {
      __m512 w[4];
      widen_input<T>(bp, i, d, m, w);
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        const __m512 a = _mm512_set1_ps(x[static_cast<size_t>(r) * in + xb + i]);
        acc[r][0] = _mm512_fmadd_ps(a, w[0], acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, w[1], acc[r][1]);
        acc[r][2] = _mm512_fmadd_ps(a, w[2], acc[r][2]);
        acc[r][3] = _mm512_fmadd_ps(a, w[3], acc[r][3]);
      }
    }
  }
  store_columns_avx512(acc, cols, y, out);
}

// NR ≤ 6 rows of a block against its widened tile [32][64], their running sums in acc [NR][64]
// (zero before the first block): the float panel's kernel, carried across blocks.
template <int NR>
__attribute__((target("avx512f"))) void tile_rows_avx512(const float* x, int in, const float* tile, bool first, float* acc) {
  __m512 a4[NR][4];
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < 4; ++j) a4[r][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + r * P + 16 * j);
  for (int i = 0; i < kBlock; ++i) {
    const float* w = tile + i * P;
    const __m512 w0 = _mm512_load_ps(w), w1 = _mm512_load_ps(w + 16), w2 = _mm512_load_ps(w + 32), w3 = _mm512_load_ps(w + 48);
#pragma GCC unroll 6
    for (int r = 0; r < NR; ++r) {
      const __m512 a = _mm512_set1_ps(x[static_cast<size_t>(r) * in + i]);
      a4[r][0] = _mm512_fmadd_ps(a, w0, a4[r][0]);
      a4[r][1] = _mm512_fmadd_ps(a, w1, a4[r][1]);
      a4[r][2] = _mm512_fmadd_ps(a, w2, a4[r][2]);
      a4[r][3] = _mm512_fmadd_ps(a, w3, a4[r][3]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int j = 0; j < 4; ++j) _mm512_store_ps(acc + r * P + 16 * j, a4[r][j]);
}

// Past 4 rows: each block panel is widened once into a float tile (8 KB, in L1) that every group
// of up to 6 of up to 32 rows multiplies; widening per 4-row group made a batch of 16 four times
// the work of a batch of 4 (63.5 vs 14.8 ms a SmolLM2 step on one core).
template <PackedType T>
__attribute__((target("avx512f"))) void many_rows_avx512(const float* x, int rows, int in, const unsigned char* panel, int cols,
                                                         float* y, int out) {
  alignas(64) float tile[kBlock * P];
  alignas(64) float acc[32 * P];
  const int nb = in / kBlock;
  for (int r0 = 0; r0 < rows; r0 += 32) {
    const int nr = std::min(32, rows - r0);
    for (int b = 0; b < nb; ++b) {
      const unsigned char* bp = panel + static_cast<size_t>(b) * block_panel_bytes(T);
      __m512 d[4], m[4];
      block_scales<T>(bp, d, m);
      for (int i = 0; i < kBlock; ++i) {
        __m512 w[4];
        widen_input<T>(bp, i, d, m, w);
        for (int j = 0; j < 4; ++j) _mm512_store_ps(tile + i * P + 16 * j, w[j]);
      }
      for (int g = 0; g < nr; g += 6) {
        const float* xg = x + static_cast<size_t>(r0 + g) * in + static_cast<size_t>(b) * kBlock;
        float* ag = acc + g * P;
        switch (std::min(6, nr - g)) {
          case 1:
            tile_rows_avx512<1>(xg, in, tile, b == 0, ag);
            break;
          case 2:
            tile_rows_avx512<2>(xg, in, tile, b == 0, ag);
            break;
          case 3:
            tile_rows_avx512<3>(xg, in, tile, b == 0, ag);
            break;
          case 4:
            tile_rows_avx512<4>(xg, in, tile, b == 0, ag);
            break;
          case 5:
            tile_rows_avx512<5>(xg, in, tile, b == 0, ag);
            break;
          default:
            tile_rows_avx512<6>(xg, in, tile, b == 0, ag);
            break;
        }
      }
    }
    for (int r = 0; r < nr; ++r) std::copy_n(acc + r * P, cols, y + static_cast<size_t>(r0 + r) * out);
  }
}

template <PackedType T>
__attribute__((target("avx512f"))) void panel_avx512(const float* x, int rows, int in, const unsigned char* panel, int cols,
                                                     float* y, int out) {
  if (rows > 4) {
    many_rows_avx512<T>(x, rows, in, panel, cols, y, out);
    return;
  }
  switch (rows) {
    case 1:
      rows_avx512<T, 1>(x, in, panel, cols, y, out);
      break;
    case 2:
      rows_avx512<T, 2>(x, in, panel, cols, y, out);
      break;
    case 3:
      rows_avx512<T, 3>(x, in, panel, cols, y, out);
      break;
    default:
      rows_avx512<T, 4>(x, in, panel, cols, y, out);
      break;
  }
}

using PanelFn = void (*)(const float*, int, int, const unsigned char*, int, float*, int);

template <PackedType T>
PanelFn panel_fn(CpuIsa isa) {
  return for_isa<PanelFn>(isa, panel_avx512<T>, panel_avx2<T>, panel_generic<T>);
}

}  // namespace block_kernels

int block_bytes(BlockType t) {
  switch (t) {
    case BlockType::Q8_0:
      return 34;
    case BlockType::Q4_0:
      return 18;
    case BlockType::Q4_1:
      break;
  }
  return 20;
}

uint16_t block_offset_fp16(BlockType t, const uint8_t* block) {
  if (t == BlockType::Q4_1) return block_kernels::le16(block + 2);
  // Q4_0: d·(q - 8) = d·q + (-8·d), both exact when -8·d is an fp16
  const float neg8d = -8.0f * fp16_bits_to_float(block_kernels::le16(block));
  const uint16_t m = float_to_fp16_bits(neg8d);
  if (fp16_bits_to_float(m) != neg8d)
    throw std::invalid_argument("a Q4_0 block scale too large to keep exact as Q4_1 (|d| >= 8192)");
  return m;
}

PackedWeights::PackedWeights(BlockType t, const uint8_t* rows, int in, int out, BlockDot dot) : in_(in), out_(out) {
  namespace bk = block_kernels;
  if (in <= 0 || in % bk::kBlock != 0 || out <= 0)
    throw std::invalid_argument("block-quantized weights need a positive multiple of 32 inputs, got " + std::to_string(in));
  const bool int8 = dot == BlockDot::Int8;
  type_ =
      t == BlockType::Q8_0 ? (int8 ? PackedType::Q8_0_I8 : PackedType::Q8_0) : (int8 ? PackedType::Q4_1_I8 : PackedType::Q4_1);
  const size_t nb = static_cast<size_t>(in / bk::kBlock);
  bytes_ = panels() * (int8 ? dot_panel_bytes(type_, in) : nb * bk::block_panel_bytes(type_));
  void* mem = std::aligned_alloc(64, bytes_);
  if (!mem) throw std::bad_alloc();
  data_.reset(static_cast<unsigned char*>(mem));
  std::memset(mem, 0, bytes_);  // the columns past `out` in the last panel: d = m = q = 0, so w = 0
  if (int8) {
    pack_dot_panels(t, rows, in, out, data_.get());
    return;
  }
  const size_t bpb = bk::block_panel_bytes(type_), src_block = static_cast<size_t>(block_bytes(t));
  for (size_t p = 0; p < panels(); ++p) {
    const int c0 = static_cast<int>(p) * bk::P, cols = std::min(bk::P, out - c0);
    for (size_t b = 0; b < nb; ++b) {
      unsigned char* bp = data_.get() + (p * nb + b) * bpb;
      for (int c = 0; c < cols; ++c) {
        const uint8_t* src = rows + (static_cast<size_t>(c0 + c) * nb + b) * src_block;
        std::memcpy(bp + 2 * c, src, 2);  // d, fp16 little-endian as stored
        if (t == BlockType::Q8_0) {
          for (int i = 0; i < bk::kBlock; ++i) bp[2 * bk::P + static_cast<size_t>(i) * bk::P + c] = src[2 + i];
          continue;
        }
        const uint16_t m = block_offset_fp16(t, src);
        const uint8_t* qs = src + (t == BlockType::Q4_1 ? 4 : 2);
        std::memcpy(bp + 2 * bk::P + 2 * c, &m, 2);
        for (int i = 0; i < bk::kBlock; ++i) {
          const int nib = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
          unsigned char& dst = bp[4 * bk::P + static_cast<size_t>(i) * (bk::P / 2) + (c & 31)];
          dst = static_cast<unsigned char>(c < 32 ? (dst & 0xF0) | nib : (dst & 0x0F) | (nib << 4));
        }
      }
    }
  }
}

void multiply_block_panels(PackedType t, const unsigned char* data, int in, int out, const float* x, int rows, size_t p0,
                           size_t p1, float* y, CpuIsa isa) {
  namespace bk = block_kernels;
  const size_t panel_bytes = static_cast<size_t>(in / bk::kBlock) * bk::block_panel_bytes(t);
  const bk::PanelFn fn = t == PackedType::Q8_0 ? bk::panel_fn<PackedType::Q8_0>(isa) : bk::panel_fn<PackedType::Q4_1>(isa);
  for (size_t p = p0; p < p1; ++p) {
    const int c0 = static_cast<int>(p) * bk::P, cols = std::min(bk::P, out - c0);
    fn(x, rows, in, data + p * panel_bytes, cols, y + c0, out);
  }
}

}  // namespace ib
