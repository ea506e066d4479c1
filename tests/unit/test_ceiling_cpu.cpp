#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/ceilings.h"
#include "core/runner.h"
#include "numerics/random.h"
#include "numerics/sgemm.h"

namespace ib {
namespace {

void check_sgemm(int m, int n, int k) {
  std::vector<float> a(static_cast<size_t>(m) * k), b(static_cast<size_t>(k) * n), c(static_cast<size_t>(m) * n, NAN);
  for (size_t i = 0; i < a.size(); ++i) a[i] = random_uniform(1, i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = random_uniform(2, i);
  sgemm_blocked(m, n, k, a.data(), k, b.data(), n, c.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int p = 0; p < k; ++p) {
        ref += double(a[size_t(i) * k + p]) * b[size_t(p) * n + j];
        mag += std::fabs(double(a[size_t(i) * k + p]) * b[size_t(p) * n + j]);
      }
      ASSERT_LE(std::fabs(c[size_t(i) * n + j] - ref), 1e-5 * mag + 1e-30)
          << m << "x" << n << "x" << k << " at " << i << "," << j;
    }
}

TEST(Sgemm, MatchesFloat64OnRaggedShapes) {
  check_sgemm(1, 1, 1);
  check_sgemm(7, 17, 5);     // tails in every dimension
  check_sgemm(13, 33, 300);  // k crosses a KC block
  check_sgemm(64, 64, 64);
  check_sgemm(1, 100, 513);  // decode-like: one row
}

TEST(Ceiling, CpuVariantsPassTheGateAndYieldPeaks) {
  RunControlOverrides quick;
  quick.min_samples = 3;
  quick.min_time = 0;
  quick.timeout = 2;
  quick.warmup = 0;
  Spec spec = ceiling_spec(Backend::Cpu, true, quick);
  auto rt = make_cpu_runtime();
  Runner runner(*rt, RunnerOptions{});
  std::vector<ExperimentResult> results;
  for (const auto& e : spec.experiments) results.push_back(runner.run(e));
  ASSERT_EQ(results.size(), 2u);
  ASSERT_EQ(results[0].rows.size(), 1u);  // memcpy
  ASSERT_EQ(results[1].rows.size(), 3u);  // our SGEMM, OpenBLAS's and the FMA peak
  for (const auto& r : results)
    for (const auto& row : r.rows) {
      EXPECT_EQ(row.status, RowStatus::Ok) << row.message;
      ASSERT_TRUE(row.validation);
      EXPECT_TRUE(row.validation->ok);
    }
  Ceilings c = ceilings_from_results(results);
  EXPECT_GT(c.copy_bytes_per_s, 1e8);
  EXPECT_GT(c.gemm_flops_per_s, 1e8);
  EXPECT_NE(c.gemm_label.find("SGEMM fp32 1024x1024x1024"), std::string::npos) << c.gemm_label;
  // The peak is the faster of the two, so "% of peak" is the machine's, not our SGEMM's.
  const double ours = results[1].rows[0].work.flops / results[1].rows[0].stats.median,
               blas = results[1].rows[1].work.flops / results[1].rows[1].stats.median;
  EXPECT_DOUBLE_EQ(c.gemm_flops_per_s, std::max(ours, blas));
  // The FMA peak (registers only) beside it: a GEMM cannot beat the FMAs it is made of by much
  // (timing noise aside; not under the sanitizers, whose -O1 build keeps the chains in memory
  // while OpenBLAS runs uninstrumented), and the label says what ran.
  ASSERT_EQ(results[1].rows[2].variant, "fma_peak");
  EXPECT_GT(c.fma_flops_per_s, 0);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_GT(c.fma_flops_per_s, 0.8 * c.gemm_flops_per_s);
#endif
  EXPECT_NE(c.fma_label.find("FMAs on registers"), std::string::npos) << c.fma_label;
  EXPECT_NE(c.describe().find(", FMA "), std::string::npos) << c.describe();
  EXPECT_EQ(Ceilings::from_json(c.to_json()).fma_flops_per_s, c.fma_flops_per_s);
}

}  // namespace
}  // namespace ib
