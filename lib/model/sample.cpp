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
void kept_tokens(const float* logits, int vocab, const SamplingParams& p, std::vector<int32_t>& order,
                 std::vector<double>& probs) {
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

// Weighted quickselect over order[0, n): the position, in descending probability order
// (`before`), of the first token whose cumulative probability reaches `target` (> target, or
// >= with `inclusive`), and the mass of the tokens before it. Partitions order around medians
// (nth_element) instead of sorting: O(n). Afterwards order[0, position] holds exactly the tokens
// up to that one.
template <typename Before>
std::pair<size_t, double> first_reaching(std::vector<int32_t>& order, size_t n, const std::vector<double>& prob,
                                         const Before& before, double target, bool inclusive) {
  auto reached = [&](double cum) { return inclusive ? cum >= target : cum > target; };
  size_t lo = 0, hi = n;
  double cum = 0;  // the mass of order[0, lo): every token ranked before order[lo, hi)
  while (hi - lo > 32) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(order.begin() + static_cast<std::ptrdiff_t>(lo), order.begin() + static_cast<std::ptrdiff_t>(mid),
                     order.begin() + static_cast<std::ptrdiff_t>(hi), before);
    double m = 0;
    for (size_t j = lo; j < mid; ++j) m += prob[static_cast<size_t>(order[j])];
    if (reached(cum + m)) {
      hi = mid;
    } else {
      cum += m;
      lo = mid;
    }
  }
  std::sort(order.begin() + static_cast<std::ptrdiff_t>(lo), order.begin() + static_cast<std::ptrdiff_t>(hi), before);
  for (size_t j = lo; j < hi; ++j) {
    const double next = cum + prob[static_cast<size_t>(order[j])];
    if (reached(next) || j + 1 == hi) return {j, cum};
    cum = next;
  }
  return {hi - 1, cum};  // n == 0 never happens: vocab >= 1
}

// sample_token without a top-k cut in O(vocab): the same order, cut and token as sorting
// everything (the normaliser and the partial sums are added in another order, so a draw within
// rounding of a boundary can differ).
int32_t sample_uncut(const float* logits, int vocab, const SamplingParams& p, float u) {
  const double inv_t = 1.0 / p.temperature;
  const double top = static_cast<double>(logits[argmax(logits, vocab)]) * inv_t;
  std::vector<double> prob(static_cast<size_t>(vocab));
  double sum = 0;
  for (int t = 0; t < vocab; ++t) sum += prob[static_cast<size_t>(t)] = std::exp(static_cast<double>(logits[t]) * inv_t - top);
  // Candidates: the tokens within e^-12 of the most likely, a prefix of the order. The draw (and
  // the nucleus) usually ends inside them; otherwise every token is a candidate.
  const double floor = std::exp(-12.0) / sum;
  std::vector<int32_t> order;
  double head = 0;
  for (int t = 0; t < vocab; ++t) {
    double& x = prob[static_cast<size_t>(t)];
    x /= sum;
    if (x >= floor) {
      order.push_back(t);
      head += x;
    }
  }
  if (p.top_p < 1.0f ? head < static_cast<double>(p.top_p) : head <= static_cast<double>(u)) {
    order.resize(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
  }
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t n = order.size();
  double kept = 1.0;
  if (p.top_p < 1.0f) {  // the nucleus: the smallest prefix whose mass reaches top_p
    const auto [last, mass_before] = first_reaching(order, n, prob, before, static_cast<double>(p.top_p), true);
    n = last + 1;
    kept = mass_before + prob[static_cast<size_t>(order[last])];
  }
  return order[first_reaching(order, n, prob, before, static_cast<double>(u) * kept, false).first];
}

}  // namespace

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, float u) {
  if (p.greedy()) return argmax(logits, vocab);
  if (p.top_k <= 0 || p.top_k >= vocab) return sample_uncut(logits, vocab, p, u);
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
  if ((p.top_k <= 0 || p.top_k >= vocab) && p.top_p >= 1.0f) {
    // No cut: softmax(logits / T) in index order, no sort.
    const double inv_t = 1.0 / p.temperature;
    const double top = static_cast<double>(logits[argmax(logits, vocab)]) * inv_t;
    double sum = 0;
    for (int t = 0; t < vocab; ++t) sum += out[t] = static_cast<float>(std::exp(static_cast<double>(logits[t]) * inv_t - top));
    for (int t = 0; t < vocab; ++t) out[t] = static_cast<float>(out[t] / sum);
    return;
  }
  std::vector<int32_t> order;
  std::vector<double> probs;
  kept_tokens(logits, vocab, p, order, probs);
  for (size_t i = 0; i < order.size(); ++i) out[order[i]] = static_cast<float>(probs[i]);
}

}  // namespace ib::model
