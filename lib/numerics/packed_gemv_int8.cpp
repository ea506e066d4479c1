// The packed GEMV on GGUF block weights against int8 activations (packed_gemv.h, BlockDot::Int8),
// llama.cpp's arithmetic: each row of x is quantized per 32 inputs to Q8_0 (a float scale
// amax/127 and 32 int8 rounded to nearest, ggml's quantize_row_q8_0 but for the scale kept in
// float32), and each block's dot product is summed in integers, then scaled once:
//   Q8_0: y += (d·xd)·Σ q·a                Q4_1: y += (d·xd)·Σ q·a + m·(xd·Σ a)
// which is the dequantized weights times the dequantized activations, rounded once per block.
// Why: the exact kernels widen every weight to a float (4 instructions per 16 weights), which
// bounds a step by conversions at 11-18 GB/s on a core; AVX-512 VNNI's vpdpbusd multiplies and
// sums 64 byte pairs in one instruction, so a step is bound by memory.
//
// Layout: each 64-column panel is two halves of 32 columns, each a forward stream of in/32 block
// halves. vpdpbusd sums 4 adjacent byte products into one int32 lane, so the quants of 4
// consecutive inputs of a column are adjacent (group g holds inputs 4g..4g+3):
//   Q8_0: d[32] fp16 | q[8][32][4] uint8 = q + 128                        1,088 bytes
//   Q4_1: d[32] fp16 | m[32] fp16 | q[8][16][4]: lane j's low nibbles are    640 bytes
//         column j, its high nibbles column j + 16
// (same bytes per weight as the exact layout). vpdpbusd multiplies unsigned by signed bytes: Q8_0's
// quants are offset by 128 and the offset taken back with the row's quant sum, Σ(q+128)·a − 128·Σa.
// The generic kernel does the same integer sums and the same float operations in the same order,
// so every level gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include "numerics/half.h"
#include "numerics/packed_gemv.h"
#include "numerics/packed_gemv_store.h"

namespace ib {
namespace int8_kernels {

constexpr int kHalf = PackedWeights::kPanel / 2;  // columns of a half panel
constexpr int kBlock = 32;
constexpr int kGroups = kBlock / 4;
constexpr size_t kQ8Half = 2 * kHalf + kBlock * kHalf;          // 1,088
constexpr size_t kQ4Half = 4 * kHalf + kBlock * kHalf / 2;      // 640
constexpr size_t kQ8Quants = 2 * kHalf, kQ4Quants = 4 * kHalf;  // where a half block's quants start
constexpr size_t kPrefetch = 2048;
static_assert(kQ8Half % 64 == 0 && kQ4Half % 64 == 0, "half blocks keep 64-byte alignment");

constexpr size_t half_block_bytes(PackedType t) { return t == PackedType::Q8_0_I8 ? kQ8Half : kQ4Half; }

// x quantized per 32 inputs: q [rows][in], and per row and block the scale and the quants' sum.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};

// One block of 32: the scale's and the rounding's operations are the same at every level (a max is
// exact, the product x·(1/d) one rounding, the conversion to nearest even), so the quants are too.
void quantize_block_generic(const float* x, int8_t* q, float* d, int32_t* sum) {
  float amax = 0;
  for (int i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  *d = amax / 127.0f;
  const float id = *d != 0 ? 1.0f / *d : 0.0f;
  int32_t s = 0;
  for (int i = 0; i < kBlock; ++i) {
    q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
    s += q[i];
  }
  *sum = s;
}

// The zero-masked forms throughout, and reductions through memory: GCC 12's unmasked intrinsics
// warn of an uninitialised pass-through operand.
__attribute__((target("avx512f,avx512bw"))) void quantize_block_avx512(const float* x, int8_t* q, float* d, int32_t* sum) {
  constexpr __mmask16 all = 0xFFFF;
  const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
  alignas(64) float m16[16];
  _mm512_store_ps(m16, _mm512_maskz_max_ps(all, _mm512_abs_ps(v0), _mm512_abs_ps(v1)));
  const float amax = *std::max_element(m16, m16 + 16);
  *d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(*d != 0 ? 1.0f / *d : 0.0f);
  const __m512i q0 = _mm512_maskz_cvtps_epi32(all, _mm512_mul_ps(v0, id));
  const __m512i q1 = _mm512_maskz_cvtps_epi32(all, _mm512_mul_ps(v1, id));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_maskz_cvtepi32_epi8(all, q0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_maskz_cvtepi32_epi8(all, q1));
  alignas(64) int32_t s16[16];
  _mm512_store_si512(s16, _mm512_add_epi32(q0, q1));
  int32_t s = 0;
  for (int32_t v : s16) s += v;
  *sum = s;
}

void quantize_rows(const float* x, int rows, int in, bool vnni, QuantizedRows& a) {
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(in), nb = n / kBlock;
  a.q.resize(n);  // kept by the thread: no allocation past the first step of a shape
  a.d.resize(nb);
  a.sum.resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    const size_t at = b * kBlock;
    if (vnni)
      quantize_block_avx512(x + at, a.q.data() + at, &a.d[b], &a.sum[b]);
    else
      quantize_block_generic(x + at, a.q.data() + at, &a.d[b], &a.sum[b]);
  }
}

// ---- generic: one output at a time ----

template <PackedType T>
void half_generic(const QuantizedRows& a, int r0, int rows, int in, const unsigned char* half, int cols, float* y, int out) {
  const int nb = in / kBlock;
  for (int r = r0; r < r0 + rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float acc = 0;
      for (int b = 0; b < nb; ++b) {
        const unsigned char* bp = half + static_cast<size_t>(b) * half_block_bytes(T);
        const int8_t* aq = a.q.data() + static_cast<size_t>(r) * in + static_cast<size_t>(b) * kBlock;
        const size_t rb = static_cast<size_t>(r) * nb + static_cast<size_t>(b);
        int32_t dot = 0;
        for (int g = 0; g < kGroups; ++g)
          for (int k = 0; k < 4; ++k) {
            int32_t w;
            if constexpr (T == PackedType::Q8_0_I8) {
              w = bp[kQ8Quants + static_cast<size_t>(g) * 4 * kHalf + 4 * c + k];
            } else {
              const unsigned char byte = bp[kQ4Quants + static_cast<size_t>(g) * 2 * kHalf + 4 * (c & 15) + k];
              w = c < 16 ? (byte & 0x0F) : (byte >> 4);
            }
            dot += w * aq[4 * g + k];
          }
        if constexpr (T == PackedType::Q8_0_I8) dot -= 128 * a.sum[rb];
        const float scale = fp16_bits_to_float(static_cast<uint16_t>(bp[2 * c] | (bp[2 * c + 1] << 8))) * a.d[rb];
        acc = std::fma(static_cast<float>(dot), scale, acc);
        if constexpr (T == PackedType::Q4_1_I8) {
          const float m = fp16_bits_to_float(static_cast<uint16_t>(bp[2 * kHalf + 2 * c] | (bp[2 * kHalf + 2 * c + 1] << 8)));
          acc = std::fma(m, a.d[rb] * static_cast<float>(a.sum[rb]), acc);
        }
      }
      y[static_cast<size_t>(r) * out + c] = acc;
    }
}

// ---- AVX-512 VNNI: a half panel (two registers of 16 columns) against NR <= 4 rows ----

template <PackedType T, int NR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void half_vnni(const QuantizedRows& a, int r0, int in,
                                                                      const unsigned char* half, int cols, float* y, int out) {
  const int nb = in / kBlock;
  __m512 acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (int b = 0; b < nb; ++b) {
    const unsigned char* bp = half + static_cast<size_t>(b) * half_block_bytes(T);
    // One core's demand misses alone reach ~75% of what it can stream from DRAM (the hardware
    // prefetcher stops at 4 KB pages): the lines kPrefetch bytes ahead are asked for now.
    for (size_t l = 0; l < half_block_bytes(T); l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(bp + kPrefetch + l), _MM_HINT_T1);
    __m512i dot[NR][2];
    for (int r = 0; r < NR; ++r) dot[r][0] = dot[r][1] = _mm512_setzero_si512();
    for (int g = 0; g < kGroups; ++g) {
      __m512i w0, w1;
      if constexpr (T == PackedType::Q8_0_I8) {
        const unsigned char* q = bp + kQ8Quants + static_cast<size_t>(g) * 4 * kHalf;
        w0 = _mm512_load_si512(q);
        w1 = _mm512_load_si512(q + 64);
      } else {
        const __m512i v = _mm512_load_si512(bp + kQ4Quants + static_cast<size_t>(g) * 2 * kHalf);
        w0 = _mm512_and_si512(v, low4);
        w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
#pragma GCC unroll 4
      for (int r = 0; r < NR; ++r) {
        int32_t four;
        std::memcpy(&four, a.q.data() + static_cast<size_t>(r0 + r) * in + static_cast<size_t>(b) * kBlock + 4 * g, 4);
        const __m512i x4 = _mm512_set1_epi32(four);
        dot[r][0] = _mm512_dpbusd_epi32(dot[r][0], w0, x4);
        dot[r][1] = _mm512_dpbusd_epi32(dot[r][1], w1, x4);
      }
    }
    const __m512 d0 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(bp)));
    const __m512 d1 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(bp + 32)));
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const size_t rb = static_cast<size_t>(r0 + r) * nb + static_cast<size_t>(b);
      if constexpr (T == PackedType::Q8_0_I8) {
        const __m512i offset = _mm512_set1_epi32(128 * a.sum[rb]);
        dot[r][0] = _mm512_sub_epi32(dot[r][0], offset);
        dot[r][1] = _mm512_sub_epi32(dot[r][1], offset);
      }
      const __m512 xd = _mm512_set1_ps(a.d[rb]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, dot[r][0]), _mm512_mul_ps(d0, xd), acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, dot[r][1]), _mm512_mul_ps(d1, xd), acc[r][1]);
      if constexpr (T == PackedType::Q4_1_I8) {
        const __m512 xs = _mm512_set1_ps(a.d[rb] * static_cast<float>(a.sum[rb]));
        acc[r][0] = _mm512_fmadd_ps(_mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(bp + 64))),
                                    xs, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_maskz_cvtph_ps(0xFFFF, _mm256_load_si256(reinterpret_cast<const __m256i*>(bp + 96))),
                                    xs, acc[r][1]);
      }
    }
  }
  store_columns_avx512(acc, cols, y + static_cast<size_t>(r0) * out, out);
}

// Rows in groups of 4: a half panel (at most 48 blocks of 640-1,088 bytes for SmolLM2's 1,536
// inputs) stays in L1/L2 while the groups after the first re-read it.
template <PackedType T>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void half_vnni_rows(const QuantizedRows& a, int rows, int in,
                                                                           const unsigned char* half, int cols, float* y,
                                                                           int out) {
  for (int r0 = 0; r0 < rows; r0 += 4) switch (std::min(4, rows - r0)) {
      case 1:
        half_vnni<T, 1>(a, r0, in, half, cols, y, out);
        break;
      case 2:
        half_vnni<T, 2>(a, r0, in, half, cols, y, out);
        break;
      case 3:
        half_vnni<T, 3>(a, r0, in, half, cols, y, out);
        break;
      default:
        half_vnni<T, 4>(a, r0, in, half, cols, y, out);
        break;
    }
}

template <PackedType T>
void multiply(const unsigned char* data, int in, int out, const float* x, int rows, size_t p0, size_t p1, float* y, bool vnni) {
  thread_local QuantizedRows a;
  quantize_rows(x, rows, in, vnni, a);
  const size_t half_bytes = static_cast<size_t>(in / kBlock) * half_block_bytes(T);
  for (size_t p = p0; p < p1; ++p)
    for (int h = 0; h < 2; ++h) {
      const int c0 = static_cast<int>(p) * PackedWeights::kPanel + h * kHalf, cols = std::min(kHalf, out - c0);
      if (cols <= 0) break;
      const unsigned char* half = data + (2 * p + static_cast<size_t>(h)) * half_bytes;
      if (vnni)
        half_vnni_rows<T>(a, rows, in, half, cols, y + c0, out);
      else
        half_generic<T>(a, 0, rows, in, half, cols, y + c0, out);
    }
}

}  // namespace int8_kernels

size_t dot_panel_bytes(PackedType t, int in) {
  return 2 * static_cast<size_t>(in / int8_kernels::kBlock) * int8_kernels::half_block_bytes(t);
}

void pack_dot_panels(BlockType t, const uint8_t* rows, int in, int out, unsigned char* data) {
  namespace ik = int8_kernels;
  const PackedType pt = t == BlockType::Q8_0 ? PackedType::Q8_0_I8 : PackedType::Q4_1_I8;
  const size_t nb = static_cast<size_t>(in / ik::kBlock), hb = ik::half_block_bytes(pt);
  const size_t src_block = static_cast<size_t>(block_bytes(t));
  for (int c = 0; c < out; ++c) {
    const size_t half = static_cast<size_t>(c / ik::kHalf);  // panel p's halves are 2p and 2p + 1
    const int cc = c % ik::kHalf;
    for (size_t b = 0; b < nb; ++b) {
      const uint8_t* src = rows + (static_cast<size_t>(c) * nb + b) * src_block;
      unsigned char* bp = data + (half * nb + b) * hb;
      std::memcpy(bp + 2 * cc, src, 2);  // d, fp16 little-endian as stored
      if (t == BlockType::Q8_0) {
        for (int i = 0; i < ik::kBlock; ++i)
          bp[ik::kQ8Quants + static_cast<size_t>(i / 4) * 4 * ik::kHalf + 4 * cc + i % 4] =
              static_cast<unsigned char>(static_cast<int8_t>(src[2 + i]) + 128);
        continue;
      }
      const uint16_t m = block_offset_fp16(t, src);
      std::memcpy(bp + 2 * ik::kHalf + 2 * cc, &m, 2);
      const uint8_t* qs = src + (t == BlockType::Q4_1 ? 4 : 2);
      for (int i = 0; i < ik::kBlock; ++i) {
        const int nib = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
        unsigned char& dst = bp[ik::kQ4Quants + static_cast<size_t>(i / 4) * 2 * ik::kHalf + 4 * (cc & 15) + i % 4];
        dst = static_cast<unsigned char>(cc < 16 ? (dst & 0xF0) | nib : (dst & 0x0F) | (nib << 4));
      }
    }
  }
}

void multiply_dot_panels(PackedType t, const unsigned char* data, int in, int out, const float* x, int rows, size_t p0, size_t p1,
                         float* y, CpuIsa isa) {
  const bool vnni = isa == CpuIsa::Avx512 && cpu_has_avx512_vnni();
  if (t == PackedType::Q8_0_I8)
    int8_kernels::multiply<PackedType::Q8_0_I8>(data, in, out, x, rows, p0, p1, y, vnni);
  else
    int8_kernels::multiply<PackedType::Q4_1_I8>(data, in, out, x, rows, p0, p1, y, vnni);
}

}  // namespace ib
