// Attention on the CPU: the online-softmax merge, the problem's geometry, the correctness gate,
// and every CPU variant against the float64 reference on the shapes kernels get wrong (tails,
// one token, q ≠ k lengths, GQA, causal or not).
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "../common/run_kind.h"

#include "core/runner.h"
#include "core/spec.h"
#include "kinds/attention/problem.h"
#include "numerics/online_softmax.h"

namespace ib::attention {
namespace {

// Softmax-weighted sum of v over x, directly.
double direct(const std::vector<double>& x, const std::vector<double>& v) {
  double m = -INFINITY;
  for (double e : x) m = std::max(m, e);
  double l = 0, o = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    l += std::exp(x[i] - m);
    o += std::exp(x[i] - m) * v[i];
  }
  return o / l;
}

TEST(OnlineSoftmax, MergingPiecesInAnyOrderEqualsTheDirectSoftmax) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0, 20);  // wide: the pieces' maxima differ a lot
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::vector<double> x(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      x[static_cast<size_t>(i)] = normal(rng);
      v[static_cast<size_t>(i)] = normal(rng);
    }
    // Cut into random pieces, summarise each, fold left to right with the output rescaled.
    SoftmaxSummary<double> acc = softmax_empty<double>();
    double out = 0;
    for (int lo = 0; lo < n;) {
      const int len = 1 + static_cast<int>(rng() % 40), hi = std::min(n, lo + len);
      const SoftmaxSummary<double> piece = softmax_summarize(x.data() + lo, hi - lo);
      double piece_out = 0;
      for (int i = lo; i < hi; ++i) piece_out += std::exp(x[static_cast<size_t>(i)] - piece.max) * v[static_cast<size_t>(i)];
      double sa = -1, sb = -1;
      acc = softmax_merge(acc, piece, &sa, &sb);
      out = out * sa + piece_out * sb;
      lo = hi;
    }
    EXPECT_NEAR(out / acc.sum, direct(x, v), 1e-9 * (1 + std::fabs(direct(x, v)))) << "trial " << trial;
  }
}

TEST(OnlineSoftmax, MergeIsSymmetricAndHandlesEmptyPieces) {
  const SoftmaxSummary<float> a{3.0f, 2.0f}, b{5.0f, 1.5f}, e = softmax_empty<float>();
  float s1, s2, t1, t2;
  const auto ab = softmax_merge(a, b, &s1, &s2), ba = softmax_merge(b, a, &t1, &t2);
  EXPECT_FLOAT_EQ(ab.max, 5.0f);
  EXPECT_FLOAT_EQ(ab.sum, ba.sum);
  EXPECT_FLOAT_EQ(ab.sum, 2.0f * std::exp(-2.0f) + 1.5f);
  EXPECT_FLOAT_EQ(s1, std::exp(-2.0f));
  EXPECT_FLOAT_EQ(s2, 1.0f);
  // An empty side contributes nothing and leaves the other untouched.
  const auto ae = softmax_merge(a, e, &s1, &s2);
  EXPECT_FLOAT_EQ(ae.max, 3.0f);
  EXPECT_FLOAT_EQ(ae.sum, 2.0f);
  EXPECT_FLOAT_EQ(s1, 1.0f);
  EXPECT_FLOAT_EQ(s2, 0.0f);
  // Two empty pieces (a fully masked row): empty, and factors that are 0, not NaN.
  const auto ee = softmax_merge(e, e, &s1, &s2);
  EXPECT_EQ(ee.max, -INFINITY);
  EXPECT_EQ(ee.sum, 0.0f);
  EXPECT_EQ(s1, 0.0f);
  EXPECT_EQ(s2, 0.0f);
  // Huge scores do not overflow: everything is relative to the maximum.
  const auto big = softmax_merge(SoftmaxSummary<float>{1e30f, 1.0f}, SoftmaxSummary<float>{1e30f, 3.0f}, &s1, &s2);
  EXPECT_FLOAT_EQ(big.sum, 4.0f);
  // softmax_summarize masks -inf entries and sums the rest relative to the maximum.
  const float xs[4] = {1.0f, -INFINITY, 2.0f, -INFINITY};
  const auto sx = softmax_summarize(xs, 4);
  EXPECT_FLOAT_EQ(sx.max, 2.0f);
  EXPECT_FLOAT_EQ(sx.sum, 1.0f + std::exp(-1.0f));
  const float none[2] = {-INFINITY, -INFINITY};
  EXPECT_EQ(softmax_summarize(none, 2).sum, 0.0f);
}

TEST(AttentionShape, CausalMaskIsAlignedBottomRight) {
  AttentionShape s;
  s.seq_q = 3;
  s.seq_k = 5;
  s.causal = true;
  EXPECT_EQ(s.visible_keys(0), 3);  // the last query sees every key
  EXPECT_EQ(s.visible_keys(2), 5);
  s.seq_q = 5;
  s.seq_k = 3;  // more queries than keys: the first two see nothing
  EXPECT_EQ(s.visible_keys(0), 0);
  EXPECT_EQ(s.visible_keys(1), 0);
  EXPECT_EQ(s.visible_keys(2), 1);
  s.seq_q = s.seq_k = 4;
  EXPECT_DOUBLE_EQ(s.visible_pairs(), 10);  // 1 + 2 + 3 + 4
  s.causal = false;
  EXPECT_DOUBLE_EQ(s.visible_pairs(), 16);
  s.batch = 2;
  s.heads = 3;
  s.head_dim = 64;
  EXPECT_DOUBLE_EQ(s.flops(), 4.0 * 64 * 16 * 3 * 2);
}

TEST(AttentionGate, CatchesAWrongOrUnwrittenOutput) {
  AttentionShape s;
  s.heads = s.kv_heads = 2;
  s.head_dim = 64;
  s.seq_q = s.seq_k = 40;
  const AttentionInputs in{11, DType::BF16};
  std::vector<double> ref(static_cast<size_t>(s.rows() * s.head_dim));
  for (int64_t r = 0; r < s.rows(); ++r)
    reference_row(s, in, 0, static_cast<int>(r / s.seq_q), static_cast<int>(r % s.seq_q),
                  &ref[static_cast<size_t>(r * s.head_dim)]);
  auto at = [&](int64_t r, int c) { return static_cast<float>(ref[static_cast<size_t>(r * s.head_dim + c)]); };
  EXPECT_TRUE(check_output(s, in, 1, at, 1e-4).ok);
  // One row off by 10%.
  auto off = [&](int64_t r, int c) { return at(r, c) * (r == 17 ? 1.1f : 1.0f); };
  const Validation v = check_output(s, in, 1, off, 1e-4);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.metric, "rel_l2");
  // One element never written (still the NaN poison).
  auto hole = [&](int64_t r, int c) { return r == 79 && c == 63 ? std::numeric_limits<float>::quiet_NaN() : at(r, c); };
  const Validation h = check_output(s, in, 1, hole, 1e-2);
  EXPECT_FALSE(h.ok);
  EXPECT_EQ(h.metric, "nan_rows");
  // Heads swapped (an indexing bug).
  auto swapped = [&](int64_t r, int c) { return at((r + s.seq_q) % s.rows(), c); };
  EXPECT_FALSE(check_output(s, in, 1, swapped, 1e-2).ok);
}

using ib::testing::expect_all_ok;

ExperimentResult run_attention(const std::string& axes, const std::string& variants = "cpu_standard, cpu_flash, reference") {
  return ib::testing::run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 1s}",
                                    "  - {name: a, kind: attention, variants: [" + variants + "], " + axes + "}\n");
}

TEST(CpuAttention, EveryVariantMatchesTheReferenceOnAwkwardShapes) {
  // Lengths 1 and 17 (below one tile), 100 (a partial tile), q ≠ k both ways, GQA, d 64/128.
  expect_all_ok(run_attention("heads: 4, kv_heads: [4, 2, 1], head_dim: [64, 128], seq: [1, 17, 100], causal: [true, false]"),
                3 * 2 * 3 * 2 * 3);
  expect_all_ok(run_attention("heads: 2, kv_heads: 1, head_dim: 64, seq: [33, 100], seq_q: [1, 7, 150], causal: [true, false]"),
                2 * 3 * 2 * 3);
  expect_all_ok(run_attention("batch: 2, heads: 2, head_dim: 64, seq: 65, dtype: fp16"), 3);
}

// A sliding window (Mistral): each query sees its last `window` keys; windows shorter than a
// tile, across tile edges, longer than the sequence, with queries fewer than keys.
TEST(CpuAttention, SlidingWindowMatchesTheReference) {
  expect_all_ok(
      run_attention("heads: 4, kv_heads: 2, head_dim: 64, seq: [100, 300], seq_q: [0, 7], window: [1, 5, 64, 97, 1000]"),
      3 * 2 * 2 * 5);
  // Not causal: no window.
  const auto r = run_attention("heads: 2, head_dim: 64, seq: 50, causal: false, window: 8");
  ASSERT_EQ(r.rows.size(), 3u);
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.status, RowStatus::Unsupported) << row.variant;
    EXPECT_NE(row.message.find("causal"), std::string::npos) << row.variant << ": " << row.message;
  }
}

TEST(AttentionShape, SlidingWindowBoundsTheVisibleKeys) {
  AttentionShape s;
  s.seq_q = s.seq_k = 10;
  s.window = 3;
  EXPECT_EQ(s.first_key(0), 0);
  EXPECT_EQ(s.visible_keys(0), 1);
  EXPECT_EQ(s.first_key(5), 3);  // keys 3, 4, 5
  EXPECT_EQ(s.visible_keys(5), 6);
  EXPECT_DOUBLE_EQ(s.visible_pairs(), 1 + 2 + 3 * 8);
  s.seq_q = 4;  // bottom-right: query 0 is position 6
  EXPECT_EQ(s.first_key(0), 4);
  EXPECT_EQ(s.visible_keys(0), 7);
}

TEST(CpuAttention, LongSequencesAndTails) {
  // 1000 and 4097 (one past a power of two): the gate samples rows when the problem is large.
  expect_all_ok(run_attention("heads: 1, head_dim: 64, seq: [1000, 4097], causal: [true, false]", "cpu_standard, cpu_flash"),
                2 * 2 * 2);
}

TEST(CpuAttention, StandardMemoryGrowsWithTheSquareFlashDoesNot) {
  auto r = run_attention("heads: 2, head_dim: 64, seq: [256, 1024], causal: true");
  expect_all_ok(r, 6);
  auto extra = [&](size_t i) {
    for (const auto& m : r.rows[i].metrics)
      if (m.key == "extra mem") return m.value;
    ADD_FAILURE() << "no extra mem";
    return 0.0;
  };
  // Rows: seq 256 (standard, flash, reference), seq 1024 (...). S and P are 2·heads·n² floats.
  EXPECT_NEAR(extra(0), 2.0 * 2 * 256 * 256 * 4 / (1 << 20), 0.1);    // 1 MiB (+ one head's Kᵀ)
  EXPECT_NEAR(extra(3), 2.0 * 2 * 1024 * 1024 * 4 / (1 << 20), 0.3);  // 16 MiB: 4x the length, 16x the memory
  EXPECT_LT(extra(4), 1.0);                                           // flash: tiles per thread only, below 1 MiB
  EXPECT_DOUBLE_EQ(extra(4), extra(1));                               // ... and independent of n
}

}  // namespace
}  // namespace ib::attention
