// KV-cache eviction: each policy against a brute-force model of what it promises (budget, window,
// sinks, H2O's lowest-score eviction), the synthetic attention generator (seeded, the promised
// structure), the replay against full attention. The engine's keep mask and attention record, and
// both kinds through the runner: test_kv_evict_engine.cpp.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kvcache/eviction.h"
#include "kvcache/synthetic_attention.h"
#include "numerics/random.h"

namespace ib::kvcache {
namespace {

std::vector<int> range(int lo, int hi) {  // [lo, hi)
  std::vector<int> v;
  for (int p = lo; p < hi; ++p) v.push_back(p);
  return v;
}

std::unique_ptr<KvPolicy> policy(const std::string& name, int budget, int sinks = 4, double recent = 0.5) {
  PolicyOptions o;
  o.budget = budget;
  o.sinks = sinks;
  o.recent = recent;
  return make_policy(name, o);
}

// ---- policies ----

TEST(KvEvictPolicy, EachHoldsExactlyMinOfBudgetAndTokens) {
  for (const auto& name : policy_names()) {
    auto p = policy(name, 16);
    std::vector<float> w;
    for (int t = 0; t < 200; ++t) {
      const KvPolicy::Append a = p->on_append(t);
      EXPECT_EQ(p->slots()[static_cast<size_t>(a.slot)], t) << name;
      const int want = name == "full" ? t + 1 : std::min(16, t + 1);
      ASSERT_EQ(p->size(), want) << name << " after " << t + 1 << " tokens";
      EXPECT_EQ(a.evicted >= 0, t >= want) << name << " " << t;
      ASSERT_EQ(p->check_invariants(), "") << name;
      w.assign(static_cast<size_t>(p->size()), 0.0f);
      for (size_t s = 0; s < w.size(); ++s)
        w[s] = static_cast<float>(random_uniform(1, static_cast<uint64_t>(t) * 1000 + s) + 1.0);
      p->on_attention(w.data());
    }
  }
}

TEST(KvEvictPolicy, FullKeepsEveryToken) {
  auto p = policy("full", 8);
  for (int t = 0; t < 100; ++t) EXPECT_EQ(p->on_append(t).evicted, -1);
  EXPECT_EQ(p->kept(), range(0, 100));
}

TEST(KvEvictPolicy, SlidingWindowKeepsExactlyTheLastW) {
  auto p = policy("sliding_window", 10);
  for (int t = 0; t < 57; ++t) {
    const KvPolicy::Append a = p->on_append(t);
    EXPECT_EQ(a.evicted, t >= 10 ? t - 10 : -1);
    EXPECT_EQ(p->kept(), range(std::max(0, t - 9), t + 1));
  }
}

TEST(KvEvictPolicy, StreamingLlmKeepsTheSinksAndTheLastW) {
  auto p = policy("streaming_llm", 12, 4);
  for (int t = 0; t < 80; ++t) {
    const KvPolicy::Append a = p->on_append(t);
    std::vector<int> want = range(0, std::min(4, t + 1));
    if (t >= 4) {
      const std::vector<int> recent = range(std::max(4, t - 7), t + 1);  // W = 12 − 4
      want.insert(want.end(), recent.begin(), recent.end());
    }
    EXPECT_EQ(p->kept(), want) << t;
    EXPECT_EQ(a.evicted, t >= 12 ? t - 8 : -1);
  }
}

// H2O against a brute-force model: scores by position, the newest R tokens protected, the lowest
// score among the others evicted (ties: the oldest).
TEST(KvEvictPolicy, H2oKeepsItsRecentWindowAndEvictsTheLowestScore) {
  const int budget = 12;
  auto p = policy("h2o", budget, 4, 0.25);  // R = 3
  std::map<int, double> score;
  std::vector<float> w;
  for (int t = 0; t < 300; ++t) {
    int expect = -1;
    if (static_cast<int>(score.size()) == budget) {
      for (const auto& [pos, s] : score)
        if (pos <= t - 3 && (expect < 0 || s < score[expect])) expect = pos;
    }
    const KvPolicy::Append a = p->on_append(t);
    ASSERT_EQ(a.evicted, expect) << t;
    if (expect >= 0) score.erase(expect);
    score[t] = 0;
    std::vector<int> kept;
    for (const auto& e : score) kept.push_back(e.first);
    ASSERT_EQ(p->kept(), kept);
    for (int r = std::max(0, t - 2); r <= t; ++r) EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), r));
    // Weights: a few positions are heavy (multiples of 7 get most), the rest small and varied.
    w.resize(p->slots().size());
    for (size_t s = 0; s < w.size(); ++s) {
      const int pos = p->slots()[s];
      w[s] = pos % 7 == 0 ? 1.0f : 0.01f * static_cast<float>(1.0 + random_uniform(2, static_cast<uint64_t>(t) * 64 + s));
      score[pos] += w[s];
    }
    p->on_attention(w.data());
  }
  // Heavy hitters survive far outside the window.
  const std::vector<int> k = p->kept();
  EXPECT_GE(std::count_if(k.begin(), k.end(), [](int x) { return x % 7 == 0 && x < 250; }), 5);
}

TEST(KvEvictPolicy, FactoryRejectsWhatItCannotHonour) {
  EXPECT_THROW(policy("lru", 8), std::invalid_argument);
  EXPECT_THROW(policy("sliding_window", 0), std::invalid_argument);
  EXPECT_THROW(policy("h2o", 0), std::invalid_argument);
  EXPECT_THROW(policy("streaming_llm", 4, 4), std::invalid_argument);
  EXPECT_NO_THROW(policy("streaming_llm", 5, 4));
  auto p = policy("sliding_window", 4);
  p->on_append(0);
  EXPECT_THROW(p->on_append(2), std::invalid_argument);  // positions arrive in order
  EXPECT_EQ(h2o_recent_tokens(10, 0.0), 1);
  EXPECT_EQ(h2o_recent_tokens(10, 1.0), 10);
  EXPECT_EQ(h2o_recent_tokens(10, 0.5), 5);
}

TEST(KvEvictPolicy, CloneIsIndependent) {
  auto p = policy("h2o", 6);
  for (int t = 0; t < 6; ++t) {
    p->on_append(t);
    std::vector<float> w(static_cast<size_t>(p->size()));
    for (size_t s = 0; s < w.size(); ++s) w[s] = static_cast<float>((p->slots()[s] * 5) % 7);
    p->on_attention(w.data());
  }
  auto c = p->clone();
  const int evicted = p->on_append(6).evicted;
  EXPECT_EQ(c->newest(), 5);
  EXPECT_EQ(c->kept(), range(0, 6));
  EXPECT_EQ(c->on_append(6).evicted, evicted);  // same state, same decision
  EXPECT_EQ(c->kept(), p->kept());
}

// ---- generator ----

SyntheticParams small_params(int context = 1024) {
  SyntheticParams p;
  p.context = context;
  p.head_dim = 64;
  return p;
}

TEST(KvEvictSynthetic, DeterministicForASeed) {
  const SyntheticParams p = small_params(256);
  SyntheticAttention a(p, 7), b(p, 7), c(p, 8);
  const size_t n = static_cast<size_t>(p.context) * p.head_dim;
  EXPECT_TRUE(std::equal(a.keys(), a.keys() + n, b.keys()));
  EXPECT_TRUE(std::equal(a.values(), a.values() + n, b.values()));
  EXPECT_TRUE(std::equal(a.query(0), a.query(0) + n, b.query(0)));
  EXPECT_FALSE(std::equal(a.keys(), a.keys() + n, c.keys()));
  EXPECT_EQ(a.needle(200), b.needle(200));
  int heavy = 0;
  for (int j = 0; j < p.context; ++j) heavy += a.is_heavy(j);
  EXPECT_EQ(heavy, p.heavy_tokens);
  for (int j = 0; j < p.sink_tokens; ++j) EXPECT_FALSE(a.is_heavy(j));
}

TEST(KvEvictSynthetic, AttentionHasSinksRecencyAndHeavyHitters) {
  const SyntheticParams p;  // the defaults: 4,096 tokens, head_dim 128
  SyntheticAttention g(p, 1);
  AttentionShares s;
  int n = 0;
  for (int t = p.context - 256; t < p.context; t += 8, ++n) {
    const AttentionShares x = attention_shares(g, t, p.context / 20);
    EXPECT_NEAR(x.sinks + x.recent + x.heavy + x.rest, 1.0, 1e-5);
    s.sinks += x.sinks / 32;
    s.recent += x.recent / 32;
    s.heavy += x.heavy / 32;
    s.rest += x.rest / 32;
  }
  ASSERT_EQ(n, 32);
  // 4 sinks of 4,096 tokens hold a large share; the last 5% and 16 heavy hitters far more than
  // their share of tokens; the diffuse rest (94% of the tokens) a minority.
  EXPECT_GT(s.sinks, 0.3);
  EXPECT_GT(s.recent, 0.1);
  EXPECT_GT(s.heavy, 0.1);
  EXPECT_LT(s.rest, 0.3);
  // A query early in the decode: sinks dominate (few diffuse tokens to compete).
  EXPECT_GT(attention_shares(g, 300, 20).sinks, 0.5);
}

TEST(KvEvictSynthetic, AttendMatchesADirectSoftmax) {
  SyntheticAttention g(small_params(64), 3);
  const int d = g.head_dim(), n = 40;
  std::vector<float> out(static_cast<size_t>(d)), w(static_cast<size_t>(n));
  attend(g.query(n - 1), g.keys(), g.values(), n, d, out.data(), w.data());
  std::vector<double> l(static_cast<size_t>(n)), ref(static_cast<size_t>(d), 0.0);
  double z = 0;
  for (int j = 0; j < n; ++j) {
    for (int e = 0; e < d; ++e) l[static_cast<size_t>(j)] += static_cast<double>(g.query(n - 1)[e]) * g.key(j)[e];
    z += std::exp(l[static_cast<size_t>(j)]);
  }
  for (int j = 0; j < n; ++j) {
    const double pj = std::exp(l[static_cast<size_t>(j)]) / z;
    EXPECT_NEAR(w[static_cast<size_t>(j)], pj, 1e-5);
    for (int e = 0; e < d; ++e) ref[static_cast<size_t>(e)] += pj * g.value(j)[e];
  }
  for (int e = 0; e < d; ++e) EXPECT_NEAR(out[static_cast<size_t>(e)], ref[static_cast<size_t>(e)], 1e-5);
}

// ---- replay against full attention ----

EvictionQuality quality(const SyntheticAttention& g, const std::string& name, int budget, int steps = 128) {
  EvictionReplay r(g, policy(name, budget), steps);
  return r.measure();
}

TEST(KvEvictSynthetic, FullBudgetMeansNoError) {
  SyntheticAttention g(small_params(), 5);
  for (const auto& name : policy_names()) {
    const EvictionQuality q = quality(g, name, g.context());
    EXPECT_EQ(q.err_mean, 0) << name;
    EXPECT_EQ(q.err_max, 0) << name;
    EXPECT_EQ(q.needle_recall, 1) << name;
    EXPECT_EQ(q.needle_err, 0) << name;
    EXPECT_NEAR(q.mass, 1.0, 1e-5) << name;
    EXPECT_EQ(q.held, g.context()) << name;
    EXPECT_EQ(q.invariant_error, "") << name;
  }
}

TEST(KvEvictSynthetic, AtASmallBudgetSinksAndHeavyHittersBeatAPlainWindow) {
  SyntheticAttention g(SyntheticParams{}, 1);  // the default generator
  const int budget = g.context() / 10;
  const EvictionQuality w = quality(g, "sliding_window", budget), s = quality(g, "streaming_llm", budget),
                        h = quality(g, "h2o", budget), f = quality(g, "full", budget);
  for (const auto* q : {&w, &s, &h}) {
    EXPECT_EQ(q->invariant_error, "");
    EXPECT_LT(q->kernel_err, 1e-4);
    EXPECT_EQ(q->held, budget);
    EXPECT_GT(q->probes, 0);
  }
  EXPECT_LT(s.err_mean, w.err_mean);
  EXPECT_LT(h.err_mean, w.err_mean);
  EXPECT_GT(s.mass, w.mass);
  EXPECT_GT(h.mass, w.mass);
  // Needles sit at least half the context back: a 10% window never holds one.
  EXPECT_EQ(w.needle_recall, 0);
  EXPECT_EQ(f.needle_recall, 1);
  EXPECT_EQ(f.err_max, 0);
  EXPECT_GT(f.needle_weight, 0.5);  // the probes do target their needle
}

TEST(KvEvictSynthetic, TimedRunRepeatsTheMeasuredDecode) {
  SyntheticAttention g(small_params(512), 2);
  EvictionReplay r(g, policy("h2o", 64), 100);
  EXPECT_EQ(r.first_step(), 412);
  EXPECT_THROW(r.bookkeeping_seconds_per_step(), std::logic_error);  // needs measure() first
  r.measure();
  const std::vector<int> after_measure = r.policy().kept();
  r.run();
  EXPECT_EQ(r.policy().kept(), after_measure);
  r.run();
  EXPECT_EQ(r.policy().kept(), after_measure);
  EXPECT_GT(r.bookkeeping_seconds_per_step(), 0);
}

}  // namespace
}  // namespace ib::kvcache
