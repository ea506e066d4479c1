// Summary statistics of samples, the bootstrap speedup interval and the adaptive stopping rule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ib {

struct Stats {
  size_t n = 0;
  double median = 0, mean = 0, stdev = 0, min = 0, max = 0, p10 = 0, p90 = 0;
  double rel_stdev() const { return mean != 0 ? stdev / mean : 0; }
};

// Percentile q in [0, 1] of sorted data, linear interpolation between closest ranks.
double percentile_sorted(const std::vector<double>& sorted, double q);
// stdev is the sample standard deviation (n - 1); zeros for an empty input.
Stats summarize(const std::vector<double>& samples);

// ‖got − want‖₂ / ‖want‖₂ (the absolute norm when want is all zeros): the error metric of the
// correctness gates.
double relative_l2(const std::vector<float>& got, const std::vector<float>& want);

enum class Verdict { Faster, Same, Slower };
const char* to_string(Verdict v);

// ratio = median(baseline) / median(variant): above 1 the variant is faster. lo/hi bound a
// 95% percentile-bootstrap interval (both sample sets resampled); "same" when it covers 1.
struct Speedup {
  double ratio = 1, lo = 1, hi = 1;
  Verdict verdict = Verdict::Same;
};
Speedup bootstrap_speedup(const std::vector<double>& baseline, const std::vector<double>& variant, uint64_t seed,
                          int resamples = 2000);

// The same for paired observations (baseline[i] and variant[i] measured on the same item: one
// request of a seeded load sent to two servers): ratio = percentile q of the baseline's over the
// variant's; the bootstrap resamples the pairs together, so what the items share cancels out.
Speedup paired_percentile_speedup(const std::vector<double>& baseline, const std::vector<double>& variant, double q,
                                  uint64_t seed, int resamples = 2000);

// Decides when a row has enough samples: at least min_samples and min_time of measured time,
// then stop when the relative stdev is at most max_noise, or when the noise has settled (a
// further window of samples no longer changes it), or at the timeout (wall clock), naming
// what was not met.
class StoppingRule {
 public:
  struct Limits {
    int64_t min_samples = 10;
    double min_time = 0.25;
    double max_noise = 0.01;
    double timeout = 10;
  };
  explicit StoppingRule(Limits limits) : limits_(limits) {}

  // Adds one sample (seconds) with the wall time since measurement began; true when done.
  bool add(double sample_seconds, double wall_elapsed);
  bool done() const { return done_; }
  // True when the stop was by noise or settled noise, false after a timeout.
  bool criteria_met() const { return met_; }
  const std::string& reason() const { return reason_; }
  size_t samples() const { return n_; }
  double noise() const;

 private:
  Limits limits_;
  size_t n_ = 0;
  double mean_ = 0, m2_ = 0, measured_ = 0;
  std::vector<double> noise_history_;
  bool done_ = false, met_ = false;
  std::string reason_;
};

}  // namespace ib
