#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "core/stats.h"

namespace ib {
namespace {

TEST(Stats, KnownSamples) {
  Stats s = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  EXPECT_NEAR(s.stdev, std::sqrt(2.5), 1e-12);  // sample stdev (n - 1)
  EXPECT_NEAR(s.p10, 1.4, 1e-12);               // linear interpolation between ranks
  EXPECT_NEAR(s.p90, 4.6, 1e-12);
  EXPECT_NEAR(s.rel_stdev(), std::sqrt(2.5) / 3, 1e-12);
}

TEST(Stats, EvenCountMedianAndEdgeCases) {
  EXPECT_DOUBLE_EQ(summarize({4, 1, 3, 2}).median, 2.5);
  Stats one = summarize({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.stdev, 0);
  EXPECT_EQ(summarize({}).n, 0u);
}

std::vector<double> normal_samples(double mean, double rel_sd, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(mean, mean * rel_sd);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(d(rng));
  return v;
}

TEST(Speedup, ClearlyFasterHasIntervalAboveOne) {
  auto base = normal_samples(10.0, 0.02, 50, 1);
  auto fast = normal_samples(4.0, 0.02, 50, 2);
  Speedup s = bootstrap_speedup(base, fast, 123);
  EXPECT_NEAR(s.ratio, 2.5, 0.05);
  EXPECT_GT(s.lo, 1.0);
  EXPECT_LE(s.lo, s.ratio);
  EXPECT_GE(s.hi, s.ratio);
  EXPECT_EQ(s.verdict, Verdict::Faster);
}

TEST(Speedup, SameDistributionIsSame) {
  auto a = normal_samples(10.0, 0.05, 40, 3);
  auto b = normal_samples(10.0, 0.05, 40, 4);
  Speedup s = bootstrap_speedup(a, b, 7);
  EXPECT_LT(s.lo, 1.0);
  EXPECT_GT(s.hi, 1.0);
  EXPECT_EQ(s.verdict, Verdict::Same);
}

TEST(Speedup, SlowerAndDeterministic) {
  auto base = normal_samples(1.0, 0.01, 30, 5);
  auto slow = normal_samples(1.3, 0.01, 30, 6);
  Speedup s1 = bootstrap_speedup(base, slow, 99), s2 = bootstrap_speedup(base, slow, 99);
  EXPECT_EQ(s1.verdict, Verdict::Slower);
  EXPECT_LT(s1.hi, 1.0);
  EXPECT_DOUBLE_EQ(s1.lo, s2.lo);
  EXPECT_DOUBLE_EQ(s1.hi, s2.hi);
}

// Items that vary 10x among themselves (requests of different lengths), each 5% faster on the
// variant: pairing sees it; the same data unpaired cannot.
TEST(Speedup, PairedPercentilesSeeWhatItemsSpreadHides) {
  auto item = normal_samples(1.0, 0.5, 200, 8);
  auto jitter = normal_samples(1.0, 0.01, 200, 9);
  std::vector<double> base, var;
  for (size_t i = 0; i < item.size(); ++i) {
    base.push_back(std::exp(item[i]));
    var.push_back(std::exp(item[i]) * 0.95 * jitter[i]);
  }
  for (double q : {0.5, 0.99}) {
    const Speedup p = paired_percentile_speedup(base, var, q, 11);
    EXPECT_NEAR(p.ratio, 1 / 0.95, 0.02) << q;
    EXPECT_EQ(p.verdict, Verdict::Faster) << q;
    EXPECT_GT(p.lo, 1.0);
  }
  EXPECT_EQ(bootstrap_speedup(base, var, 11).verdict, Verdict::Same);
  const Speedup same = paired_percentile_speedup(base, base, 0.5, 11);
  EXPECT_EQ(same.verdict, Verdict::Same);
  EXPECT_DOUBLE_EQ(same.ratio, 1.0);
  EXPECT_EQ(paired_percentile_speedup(base, std::vector<double>(3, 1.0), 0.5, 1).verdict, Verdict::Same);  // unpaired input
}

// Feeds a synthetic stream: sample i takes `sample` seconds; wall time = sum + overhead.
StoppingRule feed(StoppingRule::Limits lim, const std::vector<double>& samples, double overhead = 0) {
  StoppingRule r(lim);
  double wall = 0;
  for (double s : samples) {
    wall += s + overhead;
    if (r.add(s, wall)) break;
  }
  return r;
}

TEST(StoppingRule, QuietStreamStopsAtMinSamplesAndMinTime) {
  StoppingRule r = feed({10, 0.05, 0.01, 10}, std::vector<double>(1000, 0.001));
  EXPECT_TRUE(r.done());
  EXPECT_TRUE(r.criteria_met());
  EXPECT_GE(r.samples(), 50u);  // min_time 0.05 s of 1 ms samples (50, or 51 after rounding)
  EXPECT_LE(r.samples(), 51u);
  EXPECT_NE(r.reason().find("noise"), std::string::npos);
}

TEST(StoppingRule, MinSamplesBindsWhenSamplesAreLong) {
  StoppingRule r = feed({10, 0.05, 0.01, 100}, std::vector<double>(1000, 0.5));
  EXPECT_EQ(r.samples(), 10u);
}

TEST(StoppingRule, NoisyStationaryStreamSettles) {
  // 5% noise never meets a 0.5% target; the estimate settles and the rule stops long before
  // the timeout.
  auto s = normal_samples(0.001, 0.05, 100000, 11);
  StoppingRule r = feed({10, 0.01, 0.005, 1000}, s);
  EXPECT_TRUE(r.done());
  EXPECT_TRUE(r.criteria_met());
  EXPECT_NE(r.reason().find("settled"), std::string::npos) << r.reason();
  EXPECT_LT(r.samples(), 5000u);
  EXPECT_NEAR(r.noise(), 0.05, 0.01);
}

TEST(StoppingRule, TimeoutNamesUnmetMinSamples) {
  StoppingRule r = feed({10, 0, 0.01, 1.0}, std::vector<double>(100, 0.3));
  EXPECT_TRUE(r.done());
  EXPECT_FALSE(r.criteria_met());
  EXPECT_EQ(r.samples(), 4u);
  EXPECT_NE(r.reason().find("unmet: min_samples 4 of 10"), std::string::npos) << r.reason();
}

TEST(StoppingRule, TimeoutNamesUnmetMinTime) {
  // Wall time grows by overhead much faster than measured time.
  StoppingRule r = feed({1, 5.0, 0.5, 1.0}, std::vector<double>(1000, 0.001), 0.05);
  EXPECT_FALSE(r.criteria_met());
  EXPECT_NE(r.reason().find("unmet: min_time"), std::string::npos) << r.reason();
}

TEST(StoppingRule, TimeoutNamesUnmetNoiseWhileNoiseStillFalls) {
  // Alternating 1 ms / 2 ms: the noise estimate is far from 0.1% and the timeout comes first.
  std::vector<double> s;
  for (int i = 0; i < 1000; ++i) s.push_back(i % 2 ? 0.002 : 0.001);
  StoppingRule r = feed({5, 0, 0.001, 0.02}, s);
  EXPECT_FALSE(r.criteria_met());
  EXPECT_NE(r.reason().find("unmet: max_noise"), std::string::npos) << r.reason();
}

}  // namespace
}  // namespace ib
