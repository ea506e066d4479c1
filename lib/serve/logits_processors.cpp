#include "serve/logits_processors.h"

#include <cstddef>
#include <unordered_map>

namespace ib::serve {

void apply_logits_processors(const LogitsProcessors& p, const std::vector<int32_t>& prompt, const std::vector<int32_t>& output,
                             float* logits, int vocab) {
  auto in_vocab = [vocab](int32_t t) { return t >= 0 && t < vocab; };
  for (const auto& [t, b] : p.logit_bias)
    if (in_vocab(t)) logits[t] += b;
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(static_cast<size_t>(vocab), 0);
    for (const auto* list : {&prompt, &output})
      for (int32_t t : *list)
        if (in_vocab(t) && !seen[static_cast<size_t>(t)]) {
          seen[static_cast<size_t>(t)] = 1;
          float& l = logits[t];
          l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
        }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int> count;
    for (int32_t t : output)
      if (in_vocab(t)) ++count[t];
    for (const auto& [t, n] : count) logits[t] -= p.frequency_penalty * static_cast<float>(n) + p.presence_penalty;
  }
}

}  // namespace ib::serve
