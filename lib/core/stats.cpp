#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

namespace ib {

double percentile_sorted(const std::vector<double>& s, double q) {
  if (s.empty()) return 0;
  if (s.size() == 1) return s[0];
  double pos = q * static_cast<double>(s.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, s.size() - 1);
  double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, r = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    e += d * d;
    r += static_cast<double>(want[i]) * want[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

Stats summarize(const std::vector<double>& samples) {
  Stats st;
  st.n = samples.size();
  if (samples.empty()) return st;
  std::vector<double> s = samples;
  std::sort(s.begin(), s.end());
  st.min = s.front();
  st.max = s.back();
  st.median = percentile_sorted(s, 0.5);
  st.p10 = percentile_sorted(s, 0.1);
  st.p90 = percentile_sorted(s, 0.9);
  st.mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  if (s.size() > 1) {
    double ss = 0;
    for (double x : s) ss += (x - st.mean) * (x - st.mean);
    st.stdev = std::sqrt(ss / static_cast<double>(s.size() - 1));
  }
  return st;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::Faster:
      return "faster";
    case Verdict::Same:
      return "same";
    case Verdict::Slower:
      return "slower";
  }
  return "?";
}

namespace {
double median_of(std::vector<double>& v) {
  size_t n = v.size();
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(v.begin(), mid, v.end());
  double m = *mid;
  if (n % 2 == 0) m = (m + *std::max_element(v.begin(), mid)) / 2;
  return m;
}
}  // namespace

Speedup bootstrap_speedup(const std::vector<double>& base, const std::vector<double>& var, uint64_t seed, int resamples) {
  Speedup sp;
  if (base.empty() || var.empty()) return sp;
  std::vector<double> b = base, v = var;
  double mb = median_of(b), mv = median_of(v);
  sp.ratio = mv > 0 ? mb / mv : 0;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick_b(0, base.size() - 1), pick_v(0, var.size() - 1);
  std::vector<double> ratios;
  ratios.reserve(static_cast<size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (auto& x : b) x = base[pick_b(rng)];
    for (auto& x : v) x = var[pick_v(rng)];
    double rv = median_of(v);
    ratios.push_back(rv > 0 ? median_of(b) / rv : 0);
  }
  std::sort(ratios.begin(), ratios.end());
  sp.lo = std::min(percentile_sorted(ratios, 0.025), sp.ratio);
  sp.hi = std::max(percentile_sorted(ratios, 0.975), sp.ratio);
  sp.verdict = sp.lo > 1.0 ? Verdict::Faster : sp.hi < 1.0 ? Verdict::Slower : Verdict::Same;
  return sp;
}

Speedup paired_percentile_speedup(const std::vector<double>& base, const std::vector<double>& var, double q, uint64_t seed,
                                  int resamples) {
  Speedup sp;
  if (base.empty() || base.size() != var.size()) return sp;
  auto pct = [q](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return percentile_sorted(x, q);
  };
  const double pv = pct(var);
  sp.ratio = pv > 0 ? pct(base) / pv : 0;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, base.size() - 1);
  std::vector<double> b(base.size()), v(var.size()), ratios;
  ratios.reserve(static_cast<size_t>(resamples));
  for (int r = 0; r < resamples; ++r) {
    for (size_t i = 0; i < b.size(); ++i) {
      const size_t k = pick(rng);
      b[i] = base[k];
      v[i] = var[k];
    }
    const double rv = pct(v);
    ratios.push_back(rv > 0 ? pct(b) / rv : 0);
  }
  std::sort(ratios.begin(), ratios.end());
  sp.lo = std::min(percentile_sorted(ratios, 0.025), sp.ratio);
  sp.hi = std::max(percentile_sorted(ratios, 0.975), sp.ratio);
  sp.verdict = sp.lo > 1.0 ? Verdict::Faster : sp.hi < 1.0 ? Verdict::Slower : Verdict::Same;
  return sp;
}

double StoppingRule::noise() const {
  if (n_ < 2 || mean_ == 0) return 0;
  return std::sqrt(m2_ / static_cast<double>(n_ - 1)) / mean_;
}

bool StoppingRule::add(double x, double wall) {
  if (done_) return true;
  ++n_;
  measured_ += x;
  double d = x - mean_;
  mean_ += d / static_cast<double>(n_);
  m2_ += d * (x - mean_);
  const double nz = noise();
  noise_history_.push_back(nz);

  const bool enough_samples = static_cast<int64_t>(n_) >= limits_.min_samples;
  const bool enough_time = measured_ >= limits_.min_time;
  if (enough_samples && enough_time) {
    if (nz <= limits_.max_noise) {
      done_ = met_ = true;
      reason_ = fmt::format("noise {:.2f}% <= {:.2f}%", nz * 100, limits_.max_noise * 100);
      return true;
    }
    // Settled: over the last window (at least 20 samples, a fifth of all) the noise estimate
    // moved by less than 10% of itself, so more samples would only cost time.
    const size_t window = std::max<size_t>(20, n_ / 5);
    if (n_ >= 2 * window) {
      auto first = noise_history_.end() - static_cast<std::ptrdiff_t>(window);
      auto [lo, hi] = std::minmax_element(first, noise_history_.end());
      if (nz > 0 && (*hi - *lo) <= 0.10 * nz) {
        done_ = met_ = true;
        reason_ = fmt::format("noise settled at {:.2f}%", nz * 100);
        return true;
      }
    }
  }
  if (wall >= limits_.timeout) {
    done_ = true;
    met_ = false;
    std::string unmet;
    if (!enough_samples)
      unmet = fmt::format("min_samples {} of {}", n_, limits_.min_samples);
    else if (!enough_time)
      unmet = fmt::format("min_time {:.3g} s of {:.3g} s", measured_, limits_.min_time);
    else
      unmet = fmt::format("max_noise {:.2f}% > {:.2f}%", nz * 100, limits_.max_noise * 100);
    reason_ = fmt::format("timeout {:.3g} s (unmet: {})", limits_.timeout, unmet);
    return true;
  }
  return false;
}

}  // namespace ib
