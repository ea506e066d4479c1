// Element types of tensors the kernels read and write.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "numerics/half.h"

namespace ib {

enum class DType { F32, BF16, F16, U32 };

inline size_t dtype_size(DType t) { return t == DType::BF16 || t == DType::F16 ? 2 : 4; }

inline const char* to_string(DType t) {
  switch (t) {
    case DType::F32:
      return "fp32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "fp16";
    case DType::U32:
      return "u32";
  }
  return "?";
}

inline std::optional<DType> dtype_from_string(const std::string& s) {
  if (s == "fp32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "fp16") return DType::F16;
  if (s == "u32") return DType::U32;
  return std::nullopt;
}

// The float a value takes after storage in `t` (what the GPU reads back).
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::BF16:
      return bf16_bits_to_float(float_to_bf16_bits(v));
    case DType::F16:
      return fp16_bits_to_float(float_to_fp16_bits(v));
    default:
      return v;
  }
}

}  // namespace ib
