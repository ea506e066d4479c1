// Prefix caching's engine side (a cache hit's logits = a full prefill's, holders released with
// their last entry), the mixed workload's traces, and the three prefix kinds through the runner.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../common/run_kind.h"

#include "core/runner.h"
#include "core/spec.h"
#include "model/model.h"
#include "model/model_choice.h"
#include "prefix/prefix_server.h"
#include "workload/prefix_traces.h"

namespace ib::prefix {
namespace {

using Tokens = std::vector<int32_t>;

// `prefix` and then `tail`.
Tokens followed_by(Tokens prefix, std::initializer_list<int32_t> tail) {
  prefix.insert(prefix.end(), tail.begin(), tail.end());
  return prefix;
}

model::ModelConfig P(const std::string& name) { return *model::preset(name); }

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    r += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(e / r);
}

std::vector<float> full_prefill(model::Model& m, const Tokens& t) {
  std::vector<float> l(static_cast<size_t>(m.config().vocab));
  const int s = m.new_sequence(static_cast<int>(t.size()));
  m.prefill(s, t.data(), static_cast<int>(t.size()), 1, {l.data()});
  m.release(s);
  return l;
}

TEST(PrefixServer, ACachedPrefixPlusTheSuffixGivesTheLogitsOfAFullPrefill) {
  for (const char* name : {"tiny", "tiny-gqa"}) {
    const auto c = P(name);
    auto m = model::make_cpu_model(c, *model::random_weights(c, 4));
    const Tokens sys = model::random_prompt(c.vocab, 70, 1);
    for (CacheKind kind : {CacheKind::BlockHash, CacheKind::Radix}) {
      PrefixServer server(*m, {kind, 16, 1000});
      const Tokens a = followed_by(sys, {1, 2, 3, 4, 5, 6, 7}), b = followed_by(sys, {9, 8, 7, 6, 5, 4, 3, 2});
      std::vector<float> la(static_cast<size_t>(c.vocab)), lb(la.size());
      Served ra = server.serve(a.data(), static_cast<int>(a.size()), 0, {la.data()});
      EXPECT_EQ(ra.hit, 0);
      server.finish(ra);
      EXPECT_LT(rel_l2(la, full_prefill(*m, a)), 1e-6) << name;
      Served rb = server.serve(b.data(), static_cast<int>(b.size()), 0, {lb.data()});
      EXPECT_EQ(rb.hit, kind == CacheKind::BlockHash ? 64 : 70) << name << " " << to_string(kind);
      server.finish(rb);
      EXPECT_LT(rel_l2(lb, full_prefill(*m, b)), 1e-5) << name << " " << to_string(kind);
      EXPECT_EQ(server.check(), "");
    }
    EXPECT_EQ(m->kv_bytes(), 0) << "the servers gave every sequence back";
  }
}

TEST(PrefixServer, AFullyCachedPromptStillPrefillsItsLastToken) {
  const auto c = P("tiny");
  auto m = model::make_cpu_model(c, *model::random_weights(c, 5));
  const Tokens a = model::random_prompt(c.vocab, 48, 2);  // three whole blocks
  for (CacheKind kind : {CacheKind::BlockHash, CacheKind::Radix}) {
    PrefixServer server(*m, {kind, 16, 1000});
    Served r = server.serve(a.data(), 48, 0, {});
    server.finish(r);
    std::vector<float> l(static_cast<size_t>(c.vocab));
    r = server.serve(a.data(), 48, 0, {l.data()});
    EXPECT_EQ(r.hit, kind == CacheKind::BlockHash ? 32 : 47);
    EXPECT_EQ(r.written, 0);
    server.finish(r);
    EXPECT_LT(rel_l2(l, full_prefill(*m, a)), 1e-5);
    EXPECT_EQ(server.check(), "");
  }
}

TEST(PrefixServer, HoldersLiveExactlyAsLongAsTheCachePointsIntoThem) {
  const auto c = P("tiny");
  auto m = model::make_cpu_model(c, *model::random_weights(c, 6));
  for (CacheKind kind : {CacheKind::BlockHash, CacheKind::Radix}) {
    PrefixServer server(*m, {kind, 8, 64});
    std::mt19937_64 rng(1);
    const Tokens sys = model::random_prompt(c.vocab, 24, 3);
    for (int i = 0; i < 60; ++i) {
      Tokens t = rng() % 2 ? sys : Tokens{};
      for (int k = 4 + static_cast<int>(rng() % 30); k > 0; --k) t.push_back(static_cast<int32_t>(rng() % c.vocab));
      Served r = server.serve(t.data(), static_cast<int>(t.size()), 0, {});
      server.finish(r);
      ASSERT_EQ(server.check(), "") << to_string(kind) << " request " << i;
      ASSERT_LE(server.cached_tokens(), 64);
      // Every live sequence is a holder (nothing is in flight).
      ASSERT_LE(server.holders(), 64);
    }
    EXPECT_GT(server.evicted_tokens(), 0);
    EXPECT_GT(m->kv_bytes(), 0);
    server.clear();
    EXPECT_EQ(server.holders(), 0);
    EXPECT_EQ(m->kv_bytes(), 0) << "every holder released with the cache";
  }
}

TEST(PrefixWorkload, MixedTracesShareTenantPrefixesAndChatsGrow) {
  workload::MixedOptions o;
  o.requests = 80;
  o.system_prompt = 50;
  o.fewshot_tokens = 30;
  o.user_tokens = 10;
  o.reply_tokens = 20;
  const auto trace = workload::mixed_workload(o, 500, 9);
  ASSERT_EQ(trace.size(), 80u);
  int chats = 0;
  for (size_t i = 1; i < trace.size(); ++i) {
    EXPECT_GT(trace[i].arrival, trace[i - 1].arrival);
    chats += trace[i].type == 'c';
  }
  EXPECT_GT(chats, 20);
  // The same trace from the same seed; a cache replay finds most tokens.
  EXPECT_EQ(workload::mixed_workload(o, 500, 9)[17].prompt, trace[17].prompt);
  CacheReplay replay({CacheKind::Radix, 16, 1 << 20});
  int64_t hit = 0, all = 0;
  for (const auto& r : trace) {
    auto s = replay.step(r.prompt.data(), static_cast<int>(r.prompt.size()), 0);
    hit += s.hit;
    all += s.prompt;
  }
  EXPECT_GT(static_cast<double>(hit) / static_cast<double>(all), 0.5);
}

// ---- the kinds through the runner ----

using testing::expect_all_ok;

ExperimentResult run_spec_text(const std::string& body) {
  return testing::run_spec_text("{warmup: 1, min_samples: 2, min_time: 0, max_noise: 1, timeout: 5s}", body);
}

using testing::metric;

TEST(PrefixKinds, SystemPromptRowsPassTheirGateAndHitThePrompt) {
  auto r = run_spec_text(
      "  - {name: s, kind: prefix-system-prompt, variants: [cpu_none, cpu_block_hash, cpu_radix], baseline: cpu_none,"
      " model: tiny, system_prompt: 200, reference_runs: 2}\n");
  expect_all_ok(r, 3);
  EXPECT_EQ(metric(r.rows[0], "hit rate"), 0);
  EXPECT_GT(metric(r.rows[1], "hit rate"), 90);
  EXPECT_GT(metric(r.rows[2], "hit rate"), 90);
  EXPECT_LT(metric(r.rows[2], "prefilled"), 11);
  metric(r.rows[1], "device-s/s saved at 100 QPS");
  metric(r.rows[1], "bookkeeping");
}

TEST(PrefixKinds, MixedRowsPassTheirGateOverACapacitySweep) {
  auto r = run_spec_text(
      "  - {name: m, kind: prefix-mixed, variants: [cpu_none, cpu_block_hash, cpu_radix], baseline: cpu_none,"
      " model: tiny, requests: 40, qps: 50, mean_system_prompt: 80, fewshot_tokens: 40, user_tokens: 10,"
      " reply_tokens: 20, capacity: [0, 128]}\n");
  expect_all_ok(r, 6);
  EXPECT_GT(metric(r.rows[1], "hit rate"), 30);
  EXPECT_GE(metric(r.rows[2], "hit rate"), metric(r.rows[1], "hit rate"));  // token-granular >= block-granular
  EXPECT_EQ(metric(r.rows[1], "evicted"), 0);                               // unbounded
  EXPECT_GT(metric(r.rows[4], "evicted"), 0);                               // 128 tokens
  EXPECT_LE(metric(r.rows[4], "hit rate"), metric(r.rows[1], "hit rate"));
}

TEST(PrefixKinds, CostPricesTheMeasuredHits) {
  auto r = run_spec_text(
      "  - {name: c, kind: prefix-cost, variants: [none, block_hash, radix], baseline: none,"
      " workload: system-prompt, system_prompt: 2000, requests: 100}\n");
  expect_all_ok(r, 3);
  EXPECT_EQ(metric(r.rows[0], "anthropic saved"), 0);
  EXPECT_EQ(metric(r.rows[0], "openai saved"), 0);
  EXPECT_NEAR(metric(r.rows[0], "uncached"), metric(r.rows[0], "anthropic"), 1e-12);
  // Anthropic: 99 of 100 requests read the 2,000 cached tokens at 0.1×; the first writes them
  // at 1.25×: cost = (100 × 8.5 + 2,000 × 1.25 + 99 × 2,000 × 0.1) / (100 × 2,008.5).
  const double a = (100 * 8.5 + 2000 * 1.25 + 99 * 2000 * 0.1) / (100 * 2008.5);
  EXPECT_NEAR(metric(r.rows[1], "anthropic saved"), 100 * (1 - a), 0.2);
  // OpenAI: reads at 0.5× of 1,024 + 7 × 128 = 1,920 tokens, no write premium.
  EXPECT_NEAR(metric(r.rows[1], "openai saved"), 100 * 0.5 * 1920.0 * 99 / (100 * 2008.5), 0.2);
  EXPECT_NEAR(metric(r.rows[1], "openai reads"), 100 * 1920.0 * 99 / (100 * 2008.5), 0.2);
  // Radix writes every request's query too (token-granular): a little more at 1.25×.
  EXPECT_GT(metric(r.rows[2], "anthropic writes"), metric(r.rows[1], "anthropic writes"));
}

TEST(PrefixKinds, TheSpecFileParsesForBothBackends) {
  for (Backend b : {Backend::Cpu, Backend::Cuda}) {
    SpecOptions o;
    o.backend = b;
    const Spec s = load_spec(std::string(IB_SOURCE_DIR) + "/experiments/prefix.yaml", o);
    ASSERT_EQ(s.experiments.size(), 3u);
    EXPECT_EQ(plan_sweep(s.experiments[0]).rows, 9u) << to_string(b);  // 5,000 tokens on Qwen2-7B only (GPU)
    EXPECT_EQ(plan_sweep(s.experiments[1]).rows, 9u) << to_string(b);
    EXPECT_EQ(plan_sweep(s.experiments[2]).rows, 6u) << to_string(b);
  }
}

}  // namespace
}  // namespace ib::prefix
