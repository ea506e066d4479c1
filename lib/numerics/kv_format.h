// Storage formats of a KV cache and their quantize/dequantize rules, identical on the host and
// in kernels (IB_HD), so a CPU reference can dequantize a GPU cache bit for bit.
//
//   bf16  2 bytes/element, no scale.
//   fp8   OCP FP8 e4m3 ("fn": no inf, max 448), one float scale per (sequence, kv head) for K and
//         one for V: scale = amax/448 of that head's values (the calibration pass), element =
//         e4m3(x / scale) with round-to-nearest-even and saturation to ±448.
//   int8  symmetric, one float scale per (token, kv head) for K and one for V: scale = amax/127 of
//         the head's head_dim values of that token, element = clamp(rne(x / scale), -127, 127).
//   int4, int2  KIVI (Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
//         Cache") with B = 4 or B = 2 bits (kivi_bits: the rules and the kernels take either; int2
//         is the paper's main configuration) and a group of G tokens/channels (G = kKiviGroup =
//         32 for both unless a kind says otherwise, the paper's group size), per (sequence, kv
//         head) of n tokens:
//         * residual: the last r = n mod G tokens (the key group not yet full; KIVI's R = G here,
//           where the paper keeps R = 128 recent tokens) are kept as bf16, K and V alike;
//         * keys per channel: each full group of G tokens [jG, jG + G) has, per channel c, an
//           asymmetric range: zero = fp16 of min rounded down, scale = fp16 of (max - zero) /
//           (2^B - 1) rounded up (so every x lies in [zero, zero + (2^B - 1)·scale] and the
//           error is at most scale/2); code = clamp(rne((x - zero) / scale), 0, 2^B - 1)
//           (0 when scale = 0); x' = zero + code·scale. Keys are re-quantized when a group
//           completes, i.e. whenever the residual reaches G tokens (quantize-on-append of KIVI);
//         * values per token: the same rule over each group of G channels of one token
//           (channels [gG, gG + G)), for the tokens of the full groups;
//         * storage: codes packed 8/B per byte along the channels of a token, element c of a row
//           in bits (c mod 8/B)·B of byte c / (8/B) (B = 4: the even channel in the low nibble;
//           B = 2: channel 4i in bits 0-1 of byte i); scale and zero as fp16 bits. Bytes per
//           (token, kv head) of a full group: d·B/8 of codes + 4·d/G of (scale, zero) for K and
//           the same for V, + a G-token bf16 residual buffer per (sequence, kv head). With d =
//           128, G = 32: int4 80 B, int2 48 B per token-head for K (bf16: 256 B).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "numerics/half.h"
#include "numerics/hd.h"

namespace ib::kvcache {

enum class KvFormat { BF16, FP8, INT8, INT4, INT2 };

inline const char* to_string(KvFormat f) {
  switch (f) {
    case KvFormat::BF16:
      return "bf16";
    case KvFormat::FP8:
      return "fp8";
    case KvFormat::INT8:
      return "int8";
    case KvFormat::INT4:
      return "int4";
    case KvFormat::INT2:
      return "int2";
  }
  return "?";
}

inline std::optional<KvFormat> kv_format_from_string(const std::string& s) {
  if (s == "bf16") return KvFormat::BF16;
  if (s == "fp8") return KvFormat::FP8;
  if (s == "int8") return KvFormat::INT8;
  if (s == "int4") return KvFormat::INT4;
  if (s == "int2") return KvFormat::INT2;
  return std::nullopt;
}

// B, the bits of a KIVI code (int4: 4, int2: 2); 0 for the other formats.
IB_HD constexpr int kivi_bits(KvFormat f) { return f == KvFormat::INT4 ? 4 : f == KvFormat::INT2 ? 2 : 0; }
IB_HD constexpr bool is_kivi(KvFormat f) { return kivi_bits(f) > 0; }

// Bytes of one stored element (int4: half a byte, int2: a quarter).
inline double kv_element_bytes(KvFormat f) {
  switch (f) {
    case KvFormat::BF16:
      return 2;
    case KvFormat::FP8:
      return 1;
    case KvFormat::INT8:
      return 1;
    case KvFormat::INT4:
    case KvFormat::INT2:
      return kivi_bits(f) / 8.0;
  }
  return 2;
}

constexpr int kKiviGroup = 32;  // G: tokens per key group, channels per value group (int4 and int2)

// Scale bytes stored per (token, kv head) for K or for V: int8 keeps one float per token and
// head; fp8's per-head scale is per sequence, not per token (0 here); int4 and int2 (KIVI) an
// fp16 scale and an fp16 zero per (G-token group, channel) for K and per (token, G-channel
// group) for V: 4·head_dim/G bytes either way, whatever B.
inline double kv_scale_bytes_per_token_head(KvFormat f, int head_dim, int group = kKiviGroup) {
  if (f == KvFormat::INT8) return 4;
  return is_kivi(f) ? 4.0 * head_dim / group : 0.0;
}

// Bytes held per (sequence, kv head) for K or for V whatever the length: KIVI's bf16 residual
// buffer of G tokens (the key group being filled).
inline double kv_residual_bytes_per_seq_head(KvFormat f, int head_dim, int group = kKiviGroup) {
  return is_kivi(f) ? 2.0 * head_dim * group : 0.0;
}

constexpr float kE4m3Max = 448.0f;
constexpr float kInt8Max = 127.0f;

// float -> e4m3 bits, round to nearest even, saturating (as cvt.rn.satfinite.e4m3x2.f32).
IB_HD uint8_t float_to_e4m3_bits(float f) {
  uint32_t x = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);   // NaN
  if (x >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  if (x < 0x3c800000u) {                                            // below 2^-6: subnormal, m·2^-9
    const float m = rintf(bits_float(x) * 512.0f);                  // exact scaling, RNE; 8 = 2^-6
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(m));
  }
  const uint32_t r = x - (120u << 23);  // rebias the exponent from 127 to 7
  uint32_t h = r >> 20;
  const uint32_t rem = r & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (h & 1u))) ++h;
  if (h > 0x7eu) h = 0x7eu;
  return static_cast<uint8_t>(sign | h);
}

IB_HD float e4m3_bits_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 0x7u;
  if (e == 15 && m == 7) return bits_float(0x7fc00000u);
  if (e == 0) return bits_float(float_bits(static_cast<float>(m) * 0.001953125f) | sign);  // m·2^-9
  return bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

// Scale of a group whose largest magnitude is `amax` (0 for an all-zero group).
IB_HD float fp8_scale(float amax) { return amax / kE4m3Max; }
IB_HD float int8_scale(float amax) { return amax / kInt8Max; }

IB_HD uint8_t fp8_quantize(float x, float scale) { return scale > 0.0f ? float_to_e4m3_bits(x / scale) : uint8_t{0}; }
IB_HD float fp8_dequantize(uint8_t b, float scale) { return e4m3_bits_to_float(b) * scale; }

IB_HD int8_t int8_quantize(float x, float scale) {
  if (!(scale > 0.0f)) return 0;
  const float q = rintf(x / scale);
  return static_cast<int8_t>(q > kInt8Max ? kInt8Max : (q < -kInt8Max ? -kInt8Max : q));
}
IB_HD float int8_dequantize(int8_t q, float scale) { return static_cast<float>(q) * scale; }

// ---- int4 / int2 (KIVI) ----

// fp16 bits of the largest fp16 <= x / the smallest fp16 >= x (x finite, |x| < 65504).
IB_HD uint16_t fp16_bits_down(float x) {
  uint16_t h = float_to_fp16_bits(x);
  if (fp16_bits_to_float(h) > x)
    h = (h & 0x8000u) ? static_cast<uint16_t>(h + 1u) : (h == 0 ? uint16_t{0x8001u} : static_cast<uint16_t>(h - 1u));
  return h;
}
IB_HD uint16_t fp16_bits_up(float x) {
  uint16_t h = float_to_fp16_bits(x);
  if (fp16_bits_to_float(h) < x)
    h = (h & 0x8000u) ? (h == 0x8000u ? uint16_t{1} : static_cast<uint16_t>(h - 1u)) : static_cast<uint16_t>(h + 1u);
  return h;
}

IB_HD int kivi_max_code(int bits) { return (1 << bits) - 1; }

// The (scale, zero) fp16 bits of a group whose values lie in [lo, hi].
struct KiviRange {
  uint16_t scale = 0, zero = 0;
};
IB_HD KiviRange kivi_range(float lo, float hi, int bits) {
  KiviRange r;
  r.zero = fp16_bits_down(lo);
  const float span = hi - fp16_bits_to_float(r.zero);
  r.scale = span > 0.0f ? fp16_bits_up(span / static_cast<float>(kivi_max_code(bits))) : uint16_t{0};
  return r;
}

IB_HD uint32_t kivi_quantize(float x, float scale, float zero, int bits) {
  if (!(scale > 0.0f)) return 0;
  const float q = rintf((x - zero) / scale);
  const float top = static_cast<float>(kivi_max_code(bits));
  return static_cast<uint32_t>(q < 0.0f ? 0.0f : (q > top ? top : q));
}
IB_HD float kivi_dequantize(uint32_t code, float scale, float zero) { return zero + static_cast<float>(code) * scale; }

// Bytes of one packed row of d codes.
IB_HD int kivi_row_bytes(int d, int bits) { return d * bits / 8; }
IB_HD uint32_t kivi_get_code(const uint8_t* row, int c, int bits) {
  const int per = 8 / bits;
  return (static_cast<uint32_t>(row[c / per]) >> ((c % per) * bits)) & static_cast<uint32_t>(kivi_max_code(bits));
}
IB_HD void kivi_set_code(uint8_t* row, int c, int bits, uint32_t code) {
  const int per = 8 / bits, shift = (c % per) * bits;
  const uint32_t mask = static_cast<uint32_t>(kivi_max_code(bits)) << shift;
  row[c / per] = static_cast<uint8_t>((row[c / per] & ~mask) | ((code << shift) & mask));
}

// Rounds values in place through the rules (what a cache in the format returns), as the engine
// stores them: the keys of one full group (tokens x[t·stride + c] for t < G, c < d) per channel,
// and the values of one token (x[c], c < d) per group of G channels (d a multiple of G).
IB_HD void kivi_round_key_group(float* x, int group, int stride, int d, int bits) {
  for (int c = 0; c < d; ++c) {
    float lo = x[c], hi = x[c];
    for (int t = 1; t < group; ++t) {
      lo = fminf(lo, x[t * stride + c]);
      hi = fmaxf(hi, x[t * stride + c]);
    }
    const KiviRange r = kivi_range(lo, hi, bits);
    const float scale = fp16_bits_to_float(r.scale), zero = fp16_bits_to_float(r.zero);
    for (int t = 0; t < group; ++t)
      x[t * stride + c] = kivi_dequantize(kivi_quantize(x[t * stride + c], scale, zero, bits), scale, zero);
  }
}
IB_HD void kivi_round_value_row(float* x, int d, int group, int bits) {
  for (int g0 = 0; g0 < d; g0 += group) {
    float lo = x[g0], hi = x[g0];
    for (int c = g0 + 1; c < g0 + group; ++c) {
      lo = fminf(lo, x[c]);
      hi = fmaxf(hi, x[c]);
    }
    const KiviRange r = kivi_range(lo, hi, bits);
    const float scale = fp16_bits_to_float(r.scale), zero = fp16_bits_to_float(r.zero);
    for (int c = g0; c < g0 + group; ++c) x[c] = kivi_dequantize(kivi_quantize(x[c], scale, zero, bits), scale, zero);
  }
}

}  // namespace ib::kvcache
