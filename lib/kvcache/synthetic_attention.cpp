#include "kvcache/synthetic_attention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/stats.h"
#include "numerics/random.h"

namespace ib::kvcache {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Standard normal number i of stream `seed` (Box–Muller on two counter-based uniforms).
double gaussian(uint64_t seed, uint64_t i) {
  const double u1 = (static_cast<double>(random_bits(seed, 2 * i) >> 11) + 1.0) * 0x1p-53;  // (0, 1]
  const double u2 = static_cast<double>(random_bits(seed, 2 * i + 1) >> 11) * 0x1p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

double rel_l2(const float* got, const float* want, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    num += e * e;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Eight independent partial sums: the compiler vectorises them (one running sum it may not
// reorder), which makes the measured decode several times faster.
float dot(const float* a, const float* b, int d) {
  float acc[8] = {};
  int e = 0;
  for (; e + 8 <= d; e += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[e + l] * b[e + l];
  for (; e < d; ++e) acc[0] += a[e] * b[e];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Seed offsets of the generator's independent streams.
enum Stream : uint64_t { kKeys = 0, kValues = 1, kQueries = 2, kHeavy = 3, kNeedle = 4, kPull = 5 };

}  // namespace

std::string synthetic_problem(const SyntheticParams& p) {
  if (p.head_dim < 8 || p.head_dim % 4) return fmt::format("head_dim {} must be a multiple of 4, at least 8", p.head_dim);
  if (p.context < 2) return "context must be at least 2 tokens";
  if (p.sink_tokens < 0 || p.sink_tokens >= p.context)
    return fmt::format("sink_tokens {} must lie in [0, context)", p.sink_tokens);
  if (p.heavy_tokens < 0 || p.heavy_tokens > p.context - p.sink_tokens)
    return fmt::format("heavy_tokens {} must lie in [0, context − sink_tokens]", p.heavy_tokens);
  if (!(p.recency_theta > 1)) return "recency_theta must exceed 1";
  if (p.probe_every < 1) return "probe_every must be at least 1";
  return {};
}

SyntheticAttention::SyntheticAttention(const SyntheticParams& p, uint64_t seed) : p_(p), seed_(seed) {
  if (std::string why = synthetic_problem(p); !why.empty()) throw std::invalid_argument(why);
  const int d = p.head_dim, m = d / 4, r = 2 * m, c = d - r - 2, n = p.context;
  const size_t D = static_cast<size_t>(d);
  k_.assign(static_cast<size_t>(n) * D, 0.0f);
  v_.assign(static_cast<size_t>(n) * D, 0.0f);
  q_.assign(static_cast<size_t>(n) * D, 0.0f);
  heavy_.assign(static_cast<size_t>(n), 0);
  for (int i = 0, drawn = 0; i < p.heavy_tokens; ++drawn) {
    const uint64_t span = static_cast<uint64_t>(n - p.sink_tokens);
    const size_t j =
        static_cast<size_t>(p.sink_tokens) + static_cast<size_t>(random_bits(seed + kHeavy, static_cast<uint64_t>(drawn)) % span);
    if (!heavy_[j]) {
      heavy_[j] = 1;
      ++i;
    }
  }
  std::vector<double> omega(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) omega[static_cast<size_t>(i)] = std::pow(p.recency_theta, -static_cast<double>(i) / m);
  const double inv_sqrt_m = 1.0 / std::sqrt(static_cast<double>(m)), inv_sqrt_c = 1.0 / std::sqrt(static_cast<double>(c));
  for (int j = 0; j < n; ++j) {
    float* k = &k_[static_cast<size_t>(j) * D];
    float* q = &q_[static_cast<size_t>(j) * D];
    float* v = &v_[static_cast<size_t>(j) * D];
    for (int i = 0; i < m; ++i) {
      const double a = j * omega[static_cast<size_t>(i)];
      k[2 * i] = static_cast<float>(std::cos(a) * inv_sqrt_m);
      k[2 * i + 1] = static_cast<float>(std::sin(a) * inv_sqrt_m);
      q[2 * i] = static_cast<float>(p.recency_logit * std::cos(a) * inv_sqrt_m);
      q[2 * i + 1] = static_cast<float>(p.recency_logit * std::sin(a) * inv_sqrt_m);
    }
    k[r] = is_sink(j) ? static_cast<float>(p.sink_logit) : 0.0f;
    k[r + 1] = heavy_[static_cast<size_t>(j)] ? static_cast<float>(p.heavy_logit) : 0.0f;
    q[r] = 1.0f;
    q[r + 1] = static_cast<float>(1.0 + 0.5 * random_uniform(seed + kPull, static_cast<uint64_t>(j)));
    for (int e = 0; e < c; ++e) {
      const uint64_t idx = static_cast<uint64_t>(j) * static_cast<uint64_t>(c) + static_cast<uint64_t>(e);
      k[r + 2 + e] = static_cast<float>(gaussian(seed + kKeys, idx) * inv_sqrt_c);
      q[r + 2 + e] = static_cast<float>(p.noise * gaussian(seed + kQueries, idx));
    }
    const double vs = (is_sink(j) ? p.sink_value : 1.0) / std::sqrt(static_cast<double>(d));
    for (int e = 0; e < d; ++e)
      v[e] = static_cast<float>(vs * gaussian(seed + kValues, static_cast<uint64_t>(j) * D + static_cast<uint64_t>(e)));
  }
}

int SyntheticAttention::needle(int t) const {
  const int lo = p_.sink_tokens, hi = std::max(lo, t / 2);
  const int n =
      lo + static_cast<int>(random_bits(seed_ + kNeedle, static_cast<uint64_t>(t)) % static_cast<uint64_t>(hi - lo + 1));
  return std::min(n, t);
}

void SyntheticAttention::probe_query(int t, float* q) const {
  const int d = p_.head_dim, c = d - d / 2 - 2, first = d - c;
  const float* z = key(needle(t)) + first;
  double zz = 0;
  for (int e = 0; e < c; ++e) zz += static_cast<double>(z[e]) * z[e];
  std::copy(query(t), query(t) + first, q);
  for (int e = 0; e < c; ++e) q[first + e] = static_cast<float>(p_.needle_logit * z[e] / zz);
}

void attend(const float* q, const float* k, const float* v, int n, int d, float* out, float* w) {
  float mx = -INFINITY;
  for (int j = 0; j < n; ++j) {
    const float acc = dot(q, k + static_cast<size_t>(j) * d, d);
    w[j] = acc;
    mx = std::max(mx, acc);
  }
  float sum = 0;
  for (int j = 0; j < n; ++j) sum += w[j] = std::exp(w[j] - mx);
  const float inv = 1.0f / sum;
  std::fill(out, out + d, 0.0f);
  for (int j = 0; j < n; ++j) {
    const float wj = w[j] *= inv;
    const float* vj = v + static_cast<size_t>(j) * d;
    for (int e = 0; e < d; ++e) out[e] += wj * vj[e];
  }
}

AttentionShares attention_shares(const SyntheticAttention& g, int t, int recent) {
  const int d = g.head_dim();
  std::vector<float> w(static_cast<size_t>(t + 1)), out(static_cast<size_t>(d));
  attend(g.query(t), g.keys(), g.values(), t + 1, d, out.data(), w.data());
  AttentionShares s;
  for (int j = 0; j <= t; ++j) {
    const double x = w[static_cast<size_t>(j)];
    if (g.is_sink(j))
      s.sinks += x;
    else if (j > t - recent)
      s.recent += x;
    else if (g.is_heavy(j))
      s.heavy += x;
    else
      s.rest += x;
  }
  return s;
}

EvictionReplay::EvictionReplay(const SyntheticAttention& g, std::unique_ptr<KvPolicy> policy, int decode_steps)
    : g_(g), first_(g.context() - decode_steps), live_(std::move(policy)) {
  if (decode_steps < 1 || decode_steps > g.context())
    throw std::invalid_argument(fmt::format("{} decode steps of a {}-token context", decode_steps, g.context()));
  const size_t slots = static_cast<size_t>(std::min(live_->budget(), g.context())), d = static_cast<size_t>(g.head_dim());
  k_.assign(slots * d, 0.0f);
  v_.assign(slots * d, 0.0f);
  out_.assign(d, 0.0f);
  w_.assign(slots, 0.0f);
  for (int t = 0; t < first_; ++t) step(t, false);
  saved_ = live_->clone();
  saved_k_ = k_;
  saved_v_ = v_;
}

void EvictionReplay::restore() {
  live_ = saved_->clone();
  k_ = saved_k_;
  v_ = saved_v_;
}

// The new token's K/V go into the slot the policy gives it; the query attends to the slots.
void EvictionReplay::step(int t, bool attend_always) {
  const int d = g_.head_dim();
  const KvPolicy::Append a = live_->on_append(t);
  const size_t at = static_cast<size_t>(a.slot) * static_cast<size_t>(d);
  std::copy(g_.key(t), g_.key(t) + d, k_.begin() + static_cast<std::ptrdiff_t>(at));
  std::copy(g_.value(t), g_.value(t) + d, v_.begin() + static_cast<std::ptrdiff_t>(at));
  if (!attend_always && !live_->uses_attention()) return;
  attend(g_.query(t), k_.data(), v_.data(), live_->size(), d, out_.data(), w_.data());
  live_->on_attention(w_.data());
}

void EvictionReplay::decode(const StepObserver* observe) {
  for (int t = first_; t < g_.context(); ++t) {
    step(t, true);
    if (observe) (*observe)(t);
  }
}

void EvictionReplay::run() {
  restore();
  decode(nullptr);
}

EvictionQuality EvictionReplay::measure() {
  restore();
  const int d = g_.head_dim(), every = g_.params().probe_every;
  EvictionQuality q;
  step_weights_.clear();
  std::vector<float> full_w(static_cast<size_t>(g_.context())), full_out(static_cast<size_t>(d));
  std::vector<float> probe(static_cast<size_t>(d)), probe_out(static_cast<size_t>(d)), probe_w(w_.size());
  std::vector<double> ref(static_cast<size_t>(d)), logit;
  std::vector<float> ref_f(static_cast<size_t>(d));
  const StepObserver observe = [&](int t) {
    const int n = live_->size();
    const std::vector<int> kept = live_->kept();
    if (q.invariant_error.empty()) q.invariant_error = live_->check_invariants();
    step_weights_.emplace_back(w_.begin(), w_.begin() + (live_->uses_attention() ? n : 0));
    // Full attention over every token so far: the reference.
    attend(g_.query(t), g_.keys(), g_.values(), t + 1, d, full_out.data(), full_w.data());
    const double err = rel_l2(out_.data(), full_out.data(), d);
    q.err_mean += err;
    q.err_max = std::max(q.err_max, err);
    for (int p : kept) q.mass += full_w[static_cast<size_t>(p)];
    // Float64 attention over the kept positions, read from the generator (not from the slots).
    logit.assign(kept.size(), 0.0);
    double mx = -INFINITY, sum = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      for (int e = 0; e < d; ++e) logit[i] += static_cast<double>(g_.query(t)[e]) * g_.key(kept[i])[e];
      mx = std::max(mx, logit[i]);
    }
    std::fill(ref.begin(), ref.end(), 0.0);
    for (auto& l : logit) sum += l = std::exp(l - mx);
    for (size_t i = 0; i < kept.size(); ++i)
      for (int e = 0; e < d; ++e) ref[static_cast<size_t>(e)] += logit[i] / sum * g_.value(kept[i])[e];
    std::transform(ref.begin(), ref.end(), ref_f.begin(), [](double x) { return static_cast<float>(x); });
    q.kernel_err = std::max(q.kernel_err, rel_l2(out_.data(), ref_f.data(), d));
    if ((t - first_) % every == 0) {
      const int needle = g_.needle(t);
      g_.probe_query(t, probe.data());
      attend(probe.data(), k_.data(), v_.data(), n, d, probe_out.data(), probe_w.data());
      attend(probe.data(), g_.keys(), g_.values(), t + 1, d, full_out.data(), full_w.data());
      q.needle_recall += std::binary_search(kept.begin(), kept.end(), needle) ? 1.0 : 0.0;
      q.needle_err += rel_l2(probe_out.data(), full_out.data(), d);
      q.needle_weight += full_w[static_cast<size_t>(needle)];
      ++q.probes;
    }
    ++q.steps;
  };
  decode(&observe);
  q.err_mean /= q.steps;
  q.mass /= q.steps;
  if (q.probes) {
    q.needle_recall /= q.probes;
    q.needle_err /= q.probes;
    q.needle_weight /= q.probes;
  }
  q.held = live_->size();
  return q;
}

double EvictionReplay::bookkeeping_seconds_per_step() {
  using Clock = std::chrono::steady_clock;
  if (step_weights_.size() != static_cast<size_t>(g_.context() - first_))
    throw std::logic_error("bookkeeping_seconds_per_step needs the weights of a measure() first");
  std::vector<double> per_step;
  double total = 0;
  // At least 5 repetitions and 20 ms: one decode of a window policy takes microseconds.
  while (per_step.size() < 5 || (total < 0.02 && per_step.size() < 10000)) {
    std::unique_ptr<KvPolicy> p = saved_->clone();
    const auto t0 = Clock::now();
    for (int t = first_; t < g_.context(); ++t) {
      p->on_append(t);
      if (p->uses_attention()) p->on_attention(step_weights_[static_cast<size_t>(t - first_)].data());
    }
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    total += s;
    per_step.push_back(s / (g_.context() - first_));
  }
  return summarize(per_step).median;
}

}  // namespace ib::kvcache
