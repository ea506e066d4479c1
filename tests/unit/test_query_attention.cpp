// attend_queries against the per-key loop written out here (each score attention_dot's, softmax
// by exp_fixed,
// each output Σ w·v by attention_axpy): bit for bit at every instruction level this CPU runs,
// for head sizes with and without the d mod 16 and d mod 8 tails, queries over different key
// ranges in one call (a prefill piece's causal rows, a sliding window), keys at scattered rows
// (a paged cache), and a query's result unchanged by the other queries of its call.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "numerics/query_attention.h"
#include "numerics/random.h"
#include "numerics/vector_exp.h"

namespace ib {
namespace {

std::vector<float> query_attention_loop(const float* q, const std::vector<const float*>& keys,
                                        const std::vector<const float*>& values, int first, int last, int d, float scale,
                                        CpuIsa isa) {
  std::vector<float> s;
  for (int j = first; j <= last; ++j) s.push_back(attention_dot(q, keys[static_cast<size_t>(j)], d, isa) * scale);
  float mx = -INFINITY;
  for (float x : s) mx = std::max(mx, x);
  float sum = 0;
  for (float& x : s) sum += x = exp_fixed(x - mx);
  std::vector<float> o(static_cast<size_t>(d), 0.0f);
  for (int j = first; j <= last; ++j)
    attention_axpy(s[static_cast<size_t>(j - first)] / sum, values[static_cast<size_t>(j)], o.data(), d, isa);
  return o;
}

__attribute__((target("avx512f"))) void exp_fixed_many(const float* x, int n, float* y) {
  for (int j = 0; j < n; j += 16) {
    alignas(64) float in[16] = {}, out[16];
    std::copy(x + j, x + std::min(n, j + 16), in);
    _mm512_store_ps(out, exp_fixed_avx512(_mm512_load_ps(in)));
    std::copy(out, out + std::min(16, n - j), y + j);
  }
}

std::vector<CpuIsa> levels_here() {
  std::vector<CpuIsa> levels = {CpuIsa::Generic};
  if (best_cpu_isa() != CpuIsa::Generic) levels.push_back(CpuIsa::Avx2);
  if (best_cpu_isa() == CpuIsa::Avx512) levels.push_back(CpuIsa::Avx512);
  return levels;
}

TEST(QueryAttention, EveryLevelGivesThePerKeyLoopsBitsForAnyQueriesAndRanges) {
  constexpr int kKeys = 300;
  for (int d : {4, 8, 12, 16, 24, 40, 64, 72, 100, 128}) {
    // Keys and values at scattered rows of one pool, as a paged cache holds them.
    std::vector<float> pool(static_cast<size_t>(2 * kKeys + 7) * static_cast<size_t>(d));
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<float>(random_uniform(static_cast<uint64_t>(d), i)) * 2.0f;
    std::vector<const float*> keys(kKeys), values(kKeys);
    for (int j = 0; j < kKeys; ++j) {
      keys[static_cast<size_t>(j)] = pool.data() + static_cast<size_t>((j * 37) % kKeys) * static_cast<size_t>(d);
      values[static_cast<size_t>(j)] = pool.data() + static_cast<size_t>(kKeys + 7 + (j * 11) % kKeys) * static_cast<size_t>(d);
    }
    // Causal rows of a piece at positions 250..260, three heads each; a windowed query; one
    // query with a single key; one with none.
    struct Range {
      int first, last;
    };
    std::vector<Range> ranges;
    for (int p = 250; p < 261 && p < kKeys; ++p)
      for (int h = 0; h < 3; ++h) ranges.push_back({0, p});
    ranges.push_back({183, 279});
    ranges.push_back({17, 17});
    ranges.push_back({40, 39});
    const int m = static_cast<int>(ranges.size());
    std::vector<float> qs(static_cast<size_t>(m) * static_cast<size_t>(d));
    for (size_t i = 0; i < qs.size(); ++i) qs[i] = static_cast<float>(random_uniform(1000u + static_cast<uint64_t>(d), i));
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (CpuIsa isa : levels_here()) {
      SCOPED_TRACE(::testing::Message() << "d " << d << ", " << to_string(isa));
      std::vector<float> out(qs.size(), -1.0f);
      std::vector<AttentionQuery> queries;
      for (int i = 0; i < m; ++i) {
        const size_t at = static_cast<size_t>(i) * static_cast<size_t>(d);
        queries.push_back(
            {qs.data() + at, out.data() + at, ranges[static_cast<size_t>(i)].first, ranges[static_cast<size_t>(i)].last});
      }
      attend_queries(queries.data(), m, keys.data(), values.data(), d, scale, isa);
      // The same bits as the loop at this level, and (Avx512) as the AVX2 loop's.
      const CpuIsa order = isa == CpuIsa::Avx512 ? CpuIsa::Avx2 : isa;
      for (int i = 0; i < m; ++i) {
        const Range r = ranges[static_cast<size_t>(i)];
        const std::vector<float> want =
            query_attention_loop(qs.data() + static_cast<size_t>(i) * d, keys, values, r.first, r.last, d, scale, order);
        ASSERT_EQ(0, std::memcmp(want.data(), out.data() + static_cast<size_t>(i) * d, sizeof(float) * static_cast<size_t>(d)))
            << "query " << i << " over keys " << r.first << ".." << r.last;
      }
      // Alone in its call, a query's output is the same.
      std::vector<float> alone(static_cast<size_t>(d), -1.0f);
      const AttentionQuery one{qs.data() + 4 * static_cast<size_t>(d), alone.data(), ranges[4].first, ranges[4].last};
      attend_queries(&one, 1, keys.data(), values.data(), d, scale, isa);
      ASSERT_EQ(0, std::memcmp(alone.data(), out.data() + 4 * static_cast<size_t>(d), sizeof(float) * static_cast<size_t>(d)));
    }
  }
}

// exp_fixed within 1.5 ulp of e^x (double; 1.0 measured) over the range a softmax and SiLU meet, 0 below -87.3
// and inf above 88.37; its sixteen-wide form the same bits, specials included.
TEST(QueryAttention, ExpFixedIsWithinOneAndAHalfUlpAndTheSameBitsAtEveryWidth) {
  double worst = 0;
  std::vector<float> xs;
  for (int i = -873000; i <= 883700; i += 7) xs.push_back(static_cast<float>(i) * 1e-4f);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, -87.29f, 88.36f, -87.31f, 88.38f, -INFINITY, INFINITY, NAN, -1000.0f})
    xs.push_back(x);
  for (float x : xs) {
    const float y = exp_fixed(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(y));
      continue;
    }
    if (x < -87.3f) {
      EXPECT_EQ(y, 0.0f) << x;
      continue;
    }
    if (x > 88.37f) {
      EXPECT_EQ(y, INFINITY) << x;
      continue;
    }
    const double want = std::exp(static_cast<double>(x));
    const double ulp = std::nextafter(static_cast<float>(want), INFINITY) - static_cast<float>(want);
    worst = std::max(worst, std::abs(y - want) / ulp);
  }
  EXPECT_LE(worst, 1.5);
  if (best_cpu_isa() != CpuIsa::Avx512) return;
  std::vector<float> got(xs.size() + 16);
  exp_fixed_many(xs.data(), static_cast<int>(xs.size()), got.data());
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = exp_fixed(xs[i]);
    ASSERT_TRUE(std::memcmp(&want, &got[i], 4) == 0 || (std::isnan(want) && std::isnan(got[i]))) << xs[i];
  }
}

// The check above can fail: a score summed in another order (one chain) differs in its bits.
TEST(QueryAttention, AnotherSummationOrderIsCaught) {
  if (best_cpu_isa() == CpuIsa::Generic) GTEST_SKIP() << "the generic order is the one chain";
  const int d = 64;
  std::vector<float> q(d), k(d);
  int differ = 0;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    for (int e = 0; e < d; ++e) {
      q[static_cast<size_t>(e)] = static_cast<float>(random_uniform(seed, static_cast<uint64_t>(e)));
      k[static_cast<size_t>(e)] = static_cast<float>(random_uniform(seed + 100, static_cast<uint64_t>(e)));
    }
    const float a = attention_dot(q.data(), k.data(), d, CpuIsa::Avx2), b = attention_dot(q.data(), k.data(), d, CpuIsa::Generic);
    differ += std::memcmp(&a, &b, sizeof a) != 0;
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace ib
