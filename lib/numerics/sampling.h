// What a token choice is parameterised by and the uniform it draws: counter-based random numbers,
// so the CPU sampler (model/sample.h) and the GPU's (kernels/model_ops_sample.cu) draw the same
// uniform for the same (seed, step, row).
#pragma once

#include <cstdint>

#include "numerics/hd.h"
#include "numerics/random.h"

namespace ib {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, smallest index on ties)
  int top_k = 0;             // 0: no top-k cut
  float top_p = 1.0f;        // 1: no nucleus cut
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// Uniform in [0, 1) for row `row` of decoding step `step`.
IB_HD float sample_uniform(uint64_t seed, uint64_t step, int row) {
  return static_cast<float>(random_bits(seed ^ 0x5A3D1E0Bull, step * 65536u + static_cast<uint64_t>(row)) >> 40) *
         (1.0f / 16777216.0f);
}

}  // namespace ib
