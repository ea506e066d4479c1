// Token choice from logits: greedy, temperature, top-k, top-p, with counter-based random numbers
// so the CPU and the GPU draw the same uniform for the same (seed, step, row).
#pragma once

#include <cstdint>
#include <vector>

#include "core/hd.h"
#include "core/random.h"

namespace ib::model {

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

// CPU reference sampler: the token for one row of logits. Probabilities are softmax(logits / T)
// restricted to the top_k most likely tokens and then to the smallest prefix (by descending
// probability, ties by index) whose mass reaches top_p; the token is where the uniform u falls in
// the cumulative distribution of the kept tokens taken in that order.
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, float u);

// softmax(logits / T) with the same top-k / top-p cut, renormalised (zeros elsewhere): the
// distribution sample_token draws from (speculative decoding's p and q). Greedy: one-hot.
void sampling_distribution(const float* logits, int vocab, const SamplingParams& p, float* probs);

}  // namespace ib::model
