// Fills device tensors with counter-based random values (numerics/random.h), so host references
// can regenerate any element without a copy back.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "numerics/dtype.h"

namespace ib {

// dst[i] = round_to(dtype, scale * random_uniform(seed, i)); for U32, the raw random bits.
void launch_fill_random(void* dst, size_t count, DType dtype, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace ib
