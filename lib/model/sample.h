// Token choice from logits: greedy, temperature, top-k, top-p, with counter-based random numbers
// so the CPU and the GPU draw the same uniform for the same (seed, step, row).
#pragma once

#include <cstdint>
#include <vector>

#include "numerics/sampling.h"

namespace ib::model {

// The parameters and the counter-based uniform live in numerics/ (the GPU sampler uses them too).
using ib::sample_uniform;
using ib::SamplingParams;

// CPU reference sampler: the token for one row of logits. Probabilities are softmax(logits / T)
// restricted to the top_k most likely tokens and then to the smallest prefix (by descending
// probability, ties by index) whose mass reaches top_p; the token is where the uniform u falls in
// the cumulative distribution of the kept tokens taken in that order.
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, float u);

// softmax(logits / T) with the same top-k / top-p cut, renormalised (zeros elsewhere): the
// distribution sample_token draws from (speculative decoding's p and q). Greedy: one-hot.
void sampling_distribution(const float* logits, int vocab, const SamplingParams& p, float* probs);

}  // namespace ib::model
