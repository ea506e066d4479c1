// Storage formats of a KV cache and their quantize/dequantize rules, identical on the host and
// in kernels (IB_HD), so a CPU reference can dequantize a GPU cache bit for bit.
//
//   bf16  2 bytes/element, no scale.
//   fp8   OCP FP8 e4m3 ("fn": no inf, max 448), one float scale per (sequence, kv head) for K and
//         one for V: scale = amax/448 of that head's values (the calibration pass), element =
//         e4m3(x / scale) with round-to-nearest-even and saturation to ±448.
//   int8  symmetric, one float scale per (token, kv head) for K and one for V: scale = amax/127 of
//         the head's head_dim values of that token, element = clamp(rne(x / scale), -127, 127).
//   int4  (memory calculator only) 0.5 bytes/element + a per-group scale.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "core/half.h"
#include "core/hd.h"

namespace ib::kvcache {

enum class KvFormat { BF16, FP8, INT8, INT4 };

inline const char* to_string(KvFormat f) {
  switch (f) {
    case KvFormat::BF16: return "bf16";
    case KvFormat::FP8: return "fp8";
    case KvFormat::INT8: return "int8";
    case KvFormat::INT4: return "int4";
  }
  return "?";
}

inline std::optional<KvFormat> kv_format_from_string(const std::string& s) {
  if (s == "bf16") return KvFormat::BF16;
  if (s == "fp8") return KvFormat::FP8;
  if (s == "int8") return KvFormat::INT8;
  if (s == "int4") return KvFormat::INT4;
  return std::nullopt;
}

// Bytes of one stored element (int4: half a byte).
inline double kv_element_bytes(KvFormat f) {
  switch (f) {
    case KvFormat::BF16: return 2;
    case KvFormat::FP8: return 1;
    case KvFormat::INT8: return 1;
    case KvFormat::INT4: return 0.5;
  }
  return 2;
}

// Scale bytes stored per (token, kv head) for K or for V: int8 keeps one float per token and
// head; fp8's per-head scale is per sequence, not per token (0 here); int4 one fp16 scale per
// group of 32 elements (KIVI-style grouping) – `head_dim / 32 · 2` bytes.
inline double kv_scale_bytes_per_token_head(KvFormat f, int head_dim) {
  switch (f) {
    case KvFormat::INT8: return 4;
    case KvFormat::INT4: return 2.0 * ((head_dim + 31) / 32);
    default: return 0;
  }
}

constexpr float kE4m3Max = 448.0f;
constexpr float kInt8Max = 127.0f;

// float -> e4m3 bits, round to nearest even, saturating (as cvt.rn.satfinite.e4m3x2.f32).
IB_HD uint8_t float_to_e4m3_bits(float f) {
  uint32_t x = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);     // NaN
  if (x >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);    // >= 448 (and inf): saturate
  if (x < 0x3c800000u) {                                             // below 2^-6: subnormal, m·2^-9
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

}  // namespace ib::kvcache
