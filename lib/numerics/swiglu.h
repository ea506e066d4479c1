// The SwiGLU activation of the CPU engine's MLP: gate[i] = silu(gate[i]) · up[i], with
// silu(g) = g / (1 + e^-g) by exp_fixed (numerics/vector_exp.h), so sixteen at a time and one at
// a time give the same bits. libm's expf, one call per element on one thread, was a tenth of a
// 512-token prefill.
#pragma once

#include <cstddef>

#include "numerics/packed_gemv.h"  // CpuIsa

namespace ib {

void swiglu(float* gate, const float* up, size_t n, CpuIsa isa = best_cpu_isa());

}  // namespace ib
