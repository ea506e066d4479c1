// SwiGLU's element in one place, for launch_swiglu (model_ops.cu) and the gate/up GEMV that fuses
// it (gemv.cu): the engine's two matmul paths must round alike, bit for bit.
#pragma once

#include <cstdint>

#include "numerics/half.h"

namespace ib {

// bf16(silu(g) · u), silu(g) = g / (1 + e^−g): fp32 math, one rounding; g and u are the bf16
// values of the gate and up projections.
__device__ __forceinline__ uint16_t swiglu_bf16(float g, float u) { return float_to_bf16_bits(g / (1.0f + expf(-g)) * u); }

}  // namespace ib
