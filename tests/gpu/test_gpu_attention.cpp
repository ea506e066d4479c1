// GPU attention variants through the runner against the float64 reference (each skips itself
// without a device): the shapes that break kernels — one token, tails of every tile size,
// q ≠ k both ways, GQA, head_dim 64/128, causal or not, bf16 and fp16.
#include <gtest/gtest.h>

#include "../common/run_kind.h"
#include "require_gpu.h"

#include "core/backend.h"
#include "core/runner.h"
#include "core/spec.h"

namespace ib {
namespace {

using testing::expect_all_ok;

ExperimentResult run_gpu(const std::string& variants, const std::string& axes) {
  return testing::run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 1s}",
                                "  - {name: a, kind: attention, variants: [" + variants + "], " + axes + "}\n", Backend::Cuda);
}

const char* kGpuVariants = "standard, flash1, flash2";

TEST(GpuAttention, ShortAndOddLengths) {
  REQUIRE_GPU();
  expect_all_ok(run_gpu(
      kGpuVariants, "heads: 4, kv_heads: [4, 2, 1], head_dim: [64, 128], seq: [1, 17, 63, 64, 65, 129], causal: [true, false]"));
}

TEST(GpuAttention, QueriesAndKeysOfDifferentLengths) {
  REQUIRE_GPU();
  expect_all_ok(
      run_gpu(kGpuVariants,
              "heads: 4, kv_heads: 2, head_dim: [64, 128], seq: [100, 1000], seq_q: [1, 7, 150, 1500], causal: [true, false]"));
}

// Sliding windows (Mistral) in standard (the softmax kernel's mask) and flash2 (tiles before
// the window skipped, edge tiles masked); flash1 rows say unsupported.
TEST(GpuAttention, SlidingWindow) {
  REQUIRE_GPU();
  const auto r =
      run_gpu("standard, flash2",
              "heads: 4, kv_heads: 2, head_dim: [64, 128], seq: [100, 1000, 4097], seq_q: [0, 9], window: [1, 50, 128, 1000]");
  expect_all_ok(r, 2 * 2 * 3 * 2 * 4);
}

TEST(GpuAttention, LongSequencesBf16AndFp16) {
  REQUIRE_GPU();
  expect_all_ok(run_gpu(kGpuVariants,
                        "batch: 2, heads: 8, kv_heads: [8, 2], head_dim: [64, 128], seq: [1000, 4097], causal: [true, false], "
                        "dtype: [bf16, fp16]"));
}

TEST(GpuAttention, StandardHoldsTheSquareMatricesFlashDoesNot) {
  REQUIRE_GPU();
  auto r = run_gpu("standard, flash2", "heads: 8, head_dim: 128, seq: 4096, baseline: standard");
  expect_all_ok(r);
  ASSERT_EQ(r.rows.size(), 2u);
  auto extra = [&](const Row& row) {
    for (const auto& m : row.metrics)
      if (m.key == "extra mem") return m.value;
    return -1.0;
  };
  EXPECT_NEAR(extra(r.rows[0]), 2.0 * 8 * 4096.0 * 4096 * 2 / (1 << 20), 1.0);  // S and P, bf16
  EXPECT_EQ(extra(r.rows[1]), 0.0);
}

TEST(GpuAttention, StandardIsAnOomRowPastTheMemoryLimit) {
  REQUIRE_GPU();
  auto r = run_gpu("standard, flash2", "heads: 32, head_dim: 128, seq: 32768, memory_limit: 80GiB, baseline: standard");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].status, RowStatus::Oom) << r.rows[0].message;
  EXPECT_EQ(r.rows[1].status, RowStatus::Ok) << r.rows[1].message;
}

}  // namespace
}  // namespace ib
