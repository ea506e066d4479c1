// GPU decode attention over a bf16 / FP8 / INT8 KV cache, contiguous or paged (each test skips
// itself without a device): every format × layout through the runner against the float64
// reference, with the shapes that break such kernels (lengths that are not multiples of the block
// or of the kernel's tile, one token, ragged batches, GQA groups above a block's head count,
// head_dim 64/128/256, one split, many splits, more splits than tiles); the int4 and int2 (KIVI)
// caches likewise (lengths inside and across key groups, all-residual sequences, GQA, splits).
// The kernels called directly: test_gpu_kv_kernels.cpp.
#include <string>

#include <gtest/gtest.h>

#include "../common/run_kind.h"
#include "require_gpu.h"

namespace ib::kvcache {
namespace {

using ib::testing::expect_all_ok;
using ib::testing::metric;

ExperimentResult run_gpu(const std::string& kind, const std::string& variants, const std::string& axes) {
  const std::string body = "  - {name: k, kind: " + kind + ", variants: [" + variants + "], " + axes + "}\n";
  return ib::testing::run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 1s}", body, Backend::Cuda);
}

TEST(GpuKvDecode, EveryFormatContiguousAndPaged) {
  REQUIRE_GPU();
  expect_all_ok(run_gpu("kv-quant", "bf16, fp8, int8",
                        "batch: 3, heads: 8, kv_heads: [8, 2], head_dim: [64, 128], context: [1, 100, 1000], ragged: true, "
                        "block_size: [0, 16], splits: [1, 0]"));
}

TEST(GpuKvDecode, HeadDim256) {
  REQUIRE_GPU();
  expect_all_ok(run_gpu("kv-quant", "bf16, fp8, int8",
                        "batch: 2, heads: 4, kv_heads: [4, 1], head_dim: 256, context: 777, block_size: [0, 32]"));
}

TEST(GpuKvDecode, PagedLayoutsAndOddBlockSizes) {
  REQUIRE_GPU();
  // Blocks of 1 token, of a size no tile divides, and one larger than every sequence.
  expect_all_ok(run_gpu("kv-paged", "contiguous, paged",
                        "batch: 4, heads: 8, kv_heads: 2, head_dim: 128, context: 1000, ragged: true, "
                        "block_size: [1, 7, 16, 2048], kv_dtype: [bf16, fp8, int8]"));
}

TEST(GpuKvDecode, GroupsLargerThanABlockHolds) {
  REQUIRE_GPU();
  // Groups 24, 6 and 3: head chunks of 8 (bf16) or 4 (fp8, int8) heads, some partly filled.
  expect_all_ok(run_gpu("kv-quant", "bf16, fp8, int8",
                        "batch: 2, heads: 24, kv_heads: [1, 4, 8], head_dim: 128, context: 500, ragged: true, "
                        "block_size: [0, 16]"));
}

TEST(GpuKvDecode, ManySplitsIncludingEmptyOnes) {
  REQUIRE_GPU();
  // 64 splits of 300 tokens: most splits are empty once chunks are rounded up to whole tiles.
  expect_all_ok(run_gpu("kv-quant", "bf16, fp8, int8",
                        "batch: 2, heads: 4, kv_heads: 2, head_dim: 64, context: [2, 300], ragged: true, block_size: [0, 16], "
                        "splits: [2, 7, 64]"));
}

TEST(GpuKvDecode, LongContextAutoSplits) {
  REQUIRE_GPU();
  auto r = run_gpu("kv-quant", "bf16, fp8, int8",
                   "batch: 1, heads: 32, kv_heads: 8, head_dim: 128, context: 32768, block_size: [0, 16]");
  expect_all_ok(r, 6);
  for (const auto& row : r.rows) EXPECT_GT(metric(row, "splits"), 1.0) << row.variant << " " << row.point.label();
}

// int4 and int2 share the kernel (a template over the code bits): the same shapes for both.
// head_dim 64 gives int2 lanes half a byte of codes each.
TEST(GpuKvDecode, Int4AndInt2EveryShape) {
  REQUIRE_GPU();
  double long_err[2] = {};
  for (int i = 0; i < 2; ++i) {
    const std::string f = i == 0 ? "int4" : "int2";
    SCOPED_TRACE(f);
    expect_all_ok(run_gpu("kv-quant", f,
                          "batch: 3, heads: 8, kv_heads: [8, 2], head_dim: [64, 128, 256], context: [1, 31, 100, 1000], "
                          "ragged: true, splits: [1, 0, 7], " +
                              f + "_group: [32, 16, 8]"));
    // Groups larger than a block's 8 heads, and a long context with automatic splits.
    expect_all_ok(run_gpu("kv-quant", f, "batch: 2, heads: 24, kv_heads: [1, 4], head_dim: 128, context: 500, ragged: true"));
    auto r = run_gpu("kv-quant", f, "batch: 1, heads: 32, kv_heads: 8, head_dim: 128, context: 32768");
    expect_all_ok(r, 1);
    long_err[i] = metric(r.rows[0], "rel L2 vs bf16 KV");
  }
  EXPECT_LT(long_err[0], 0.15);
  EXPECT_GT(long_err[1], 2 * long_err[0]);  // int2's step is 5× int4's
  EXPECT_LT(long_err[1], 0.5);
}

TEST(GpuKvDecode, Int4AndInt2SayWhatTheyDoNotSupport) {
  REQUIRE_GPU();
  for (const std::string f : {"int4", "int2"}) {
    SCOPED_TRACE(f);
    auto r = run_gpu("kv-quant", f, "heads: 4, head_dim: 128, context: 64, block_size: 16");
    ASSERT_EQ(r.rows.size(), 1u);
    EXPECT_EQ(r.rows[0].status, RowStatus::Unsupported);
    EXPECT_NE(r.rows[0].message.find("contiguous only"), std::string::npos) << r.rows[0].message;
    auto g = run_gpu("kv-quant", f, "heads: 4, head_dim: 128, context: 64, " + f + "_group: 64");
    ASSERT_EQ(g.rows.size(), 1u);
    EXPECT_EQ(g.rows[0].status, RowStatus::Unsupported);
    EXPECT_NE(g.rows[0].message.find(f + "_group"), std::string::npos) << g.rows[0].message;
  }
}

TEST(GpuKvDecode, UnsupportedHeadDimIsSaidSo) {
  REQUIRE_GPU();
  auto r = run_gpu("kv-quant", "bf16", "heads: 4, head_dim: 96, context: 64");
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.rows[0].status, RowStatus::Unsupported);
  EXPECT_NE(r.rows[0].message.find("head_dim"), std::string::npos) << r.rows[0].message;
}

}  // namespace
}  // namespace ib::kvcache
