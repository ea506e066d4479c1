// The `ceiling` kind's keys, bound to the fields they fill (core/params.h): declared once, in
// ceiling_kind.cpp, and read back into this struct by every variant (copy and memcpy read
// `bytes`, gemm and sgemm the rest).
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"

namespace ib {

struct CeilingKeys {
  int64_t bytes = 0;
  int64_t m = 0, n = 0, k = 0;
  std::string dtype;  // bf16, fp16 or fp32
};

const ParamSet<CeilingKeys>& ceiling_keys();

}  // namespace ib
