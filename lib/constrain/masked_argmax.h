// Greedy sampling under a token mask: the reference the GPU kernel is checked against.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace ib::constrain {

// Index of the largest logit among allowed tokens (mask == nullptr: all), smallest index on
// ties, -1 when nothing is allowed. NaN logits are skipped.
inline int32_t masked_argmax(const float* logits, const uint32_t* mask, int32_t vocab) {
  int32_t best = -1;
  float best_v = -INFINITY;
  for (int32_t t = 0; t < vocab; ++t) {
    if (mask && !((mask[t >> 5] >> (t & 31)) & 1u)) continue;
    const float v = logits[t];
    if (std::isnan(v)) continue;
    if (best < 0 || v > best_v) {
      best = t;
      best_v = v;
    }
  }
  return best;
}

// LM-head shapes of the engine presets the overhead experiment uses.
struct LmHeadShape {
  int32_t hidden, vocab;
};
inline bool lm_head_shape(const std::string& model, LmHeadShape* out) {
  if (model == "llama2-7b")
    *out = {4096, 32000};
  else if (model == "qwen2-0.5b")
    *out = {896, 151936};
  else if (model == "gpt2")
    *out = {768, 50257};
  else if (model == "tiny")
    *out = {256, 50257};
  else
    return false;
  return true;
}

}  // namespace ib::constrain
