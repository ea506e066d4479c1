#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ib::model {

namespace {

int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int32_t t = 1; t < vocab; ++t)
    if (logits[t] > logits[best]) best = t;
  return best;
}

// The kept tokens in descending probability (ties: smaller index first) and their renormalised
// probabilities.
void kept_tokens(const float* logits, int vocab, const SamplingParams& p, std::vector<int32_t>& order, std::vector<double>& probs) {
  order.resize(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t keep = order.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), before);
    order.resize(keep);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  const double inv_t = 1.0 / p.temperature;
  const double top = static_cast<double>(logits[order[0]]) * inv_t;
  probs.resize(keep);
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += probs[i] = std::exp(static_cast<double>(logits[order[i]]) * inv_t - top);
  for (auto& x : probs) x /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep) {
      cum += probs[n++];
      if (cum >= static_cast<double>(p.top_p)) break;
    }
    order.resize(n);
    probs.resize(n);
    for (auto& x : probs) x /= cum;
  }
}

}  // namespace

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, float u) {
  if (p.greedy()) return argmax(logits, vocab);
  std::vector<int32_t> order;
  std::vector<double> probs;
  kept_tokens(logits, vocab, p, order, probs);
  double cum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    cum += probs[i];
    if (static_cast<double>(u) < cum) return order[i];
  }
  return order.back();
}

void sampling_distribution(const float* logits, int vocab, const SamplingParams& p, float* out) {
  std::fill(out, out + vocab, 0.0f);
  if (p.greedy()) {
    out[argmax(logits, vocab)] = 1.0f;
    return;
  }
  std::vector<int32_t> order;
  std::vector<double> probs;
  kept_tokens(logits, vocab, p, order, probs);
  for (size_t i = 0; i < order.size(); ++i) out[order[i]] = static_cast<float>(probs[i]);
}

}  // namespace ib::model
