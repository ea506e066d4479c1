// A request's own changes to its logits before a token is drawn, as vLLM's OpenAI server takes
// them: logit_bias, the repetition penalty (Hugging Face's, over prompt and output) and OpenAI's
// frequency and presence penalties (over the output).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace ib::serve {

struct LogitsProcessors {
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to those tokens' logits
  float repetition_penalty = 1.0f;                    // a token seen: logit / p if positive, · p if not
  float frequency_penalty = 0.0f;                     // minus this times the token's count in the output
  float presence_penalty = 0.0f;                      // minus this once the token is in the output
  bool active() const {
    return !logit_bias.empty() || repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

// Applies `p` to `logits` (the whole vocabulary) in place: bias, then repetition, then frequency
// and presence, vLLM's order.
void apply_logits_processors(const LogitsProcessors& p, const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                             float* logits, int vocab);

}  // namespace ib::serve
