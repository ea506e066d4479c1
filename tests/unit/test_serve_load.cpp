// A serving load: the workload's arrivals (rate, burstiness) and lengths (long tails, a shared
// system prompt, seeds), the load's metrics on known times as vLLM defines them, and the
// `serve-load` kind through the runner.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "../common/run_kind.h"
#include "serve/load_metrics.h"
#include "serve/scheduler.h"
#include "workload/serving_load.h"

namespace ib::serve {
namespace {

TEST(ServeWorkload, ArrivalsHaveTheirRateAndBurstiness) {
  auto gaps_of = [](const std::vector<workload::Request>& t) {
    std::vector<double> g;
    for (size_t i = 1; i < t.size(); ++i) g.push_back(t[i].arrival - t[i - 1].arrival);
    return g;
  };
  auto mean_cv2 = [](const std::vector<double>& g) {
    const double m = std::accumulate(g.begin(), g.end(), 0.0) / static_cast<double>(g.size());
    double v = 0;
    for (double x : g) v += (x - m) * (x - m);
    v /= static_cast<double>(g.size() - 1);
    return std::pair{m, v / (m * m)};
  };
  workload::WorkloadOptions o;
  o.requests = 4000;
  o.qps = 8;
  const auto [pm, pcv2] = mean_cv2(gaps_of(workload::make_workload(o, 512, 1)));
  EXPECT_NEAR(pm, 1.0 / 8, 0.1 / 8);
  EXPECT_NEAR(pcv2, 1.0, 0.15);  // exponential gaps
  o.arrival = workload::Arrival::Gamma;
  o.burstiness = 0.25;
  const auto [gm, gcv2] = mean_cv2(gaps_of(workload::make_workload(o, 512, 1)));
  EXPECT_NEAR(gm, 1.0 / 8, 0.15 / 8);
  EXPECT_NEAR(gcv2, 4.0, 0.8);  // Gamma(k): CV² = 1/k
  o.arrival = workload::Arrival::Constant;
  const auto constant = workload::make_workload(o, 512, 1);
  for (size_t i = 0; i < constant.size(); ++i) EXPECT_DOUBLE_EQ(constant[i].arrival, static_cast<double>(i) / 8);
  o.qps = 0;
  for (const workload::Request& r : workload::make_workload(o, 512, 1)) EXPECT_EQ(r.arrival, 0);
}

TEST(ServeWorkload, LengthsLongShareSystemPromptAndSeed) {
  workload::WorkloadOptions o;
  o.requests = 1000;
  o.prompt_len = 10;
  o.prompt_len_max = 20;
  o.output_len = 3;
  o.output_len_max = 5;
  o.long_share = 0.25;
  o.long_prompt = 300;
  o.system_prompt = 7;
  const auto t = workload::make_workload(o, 512, 3);
  size_t longs = 0;
  for (const workload::Request& r : t) {
    if (r.type == 'l') {
      ++longs;
      EXPECT_EQ(r.prompt.size(), 307u);
    } else {
      EXPECT_GE(r.prompt.size(), 17u);
      EXPECT_LE(r.prompt.size(), 27u);
    }
    EXPECT_GE(r.max_tokens, 3);
    EXPECT_LE(r.max_tokens, 5);
    EXPECT_TRUE(std::equal(t[0].prompt.begin(), t[0].prompt.begin() + 7, r.prompt.begin()));  // the shared system prompt
    for (int32_t tok : r.prompt) EXPECT_LT(tok, 512);
  }
  EXPECT_NEAR(static_cast<double>(longs) / 1000, 0.25, 0.05);
  EXPECT_EQ(workload::make_workload(o, 512, 3)[5].prompt, t[5].prompt);
  EXPECT_NE(workload::make_workload(o, 512, 4)[5].prompt, t[5].prompt);
  // Text prompts replace the drawn ones, cycled.
  const auto texts = workload::make_workload(o, 512, 3, {{1, 2, 3}, {4}});
  EXPECT_EQ(texts[1].prompt.size(), 8u);
  EXPECT_EQ(texts[3].prompt.back(), 4);
}

TEST(ServeLoadMetrics, LatenciesAsVllmDefinesThem) {
  LoadResult r;
  RequestRecord a;  // arrives at 0, scheduled at 0.5, tokens at 1, 2, 4
  a.arrival = 0;
  a.scheduled = 0.5;
  a.token_times = {1, 2, 4};
  a.tokens = {1, 2, 3};
  RequestRecord b;  // arrives at 1, one token at 3
  b.id = 1;
  b.arrival = 1;
  b.scheduled = 1;
  b.token_times = {3};
  b.tokens = {9};
  RequestRecord c;
  c.id = 2;
  c.refused = "too long";
  r.requests = {a, b, c};
  r.duration = 4;
  r.steps = {{0, 1, 0, 5}, {1, 2, 1, 0}, {2, 4, 2, 0}};
  const LoadSummary s = summarize_load(r, Slo{1.5, 0});
  EXPECT_EQ(s.completed, 2u);
  EXPECT_EQ(s.refused, 1u);
  EXPECT_DOUBLE_EQ(s.ttft.mean, 1.5);  // 1 and 2
  EXPECT_DOUBLE_EQ(s.tpot.mean, 1.5);  // a: (4 − 1)/2; b has one token, no TPOT
  EXPECT_EQ(s.tpot.n, 1u);
  EXPECT_DOUBLE_EQ(s.itl.max, 2);  // a's gaps 1 and 2
  EXPECT_DOUBLE_EQ(s.e2e.max, 4);
  EXPECT_DOUBLE_EQ(s.queue.mean, 0.25);
  EXPECT_DOUBLE_EQ(s.output_rate, 1.0);  // 4 tokens / 4 s
  EXPECT_DOUBLE_EQ(s.goodput, 0.25);     // only a meets TTFT ≤ 1.5 s
  EXPECT_DOUBLE_EQ(s.mean_batch, 1.5);   // decode rows 1 and 2
}

TEST(ServeLoadKind, EveryPolicyPassesItsCheckAndCountsRefusals) {
  const auto r = testing::run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 20s}", R"(
  - name: t
    kind: serve-load
    variants: [cpu_static, cpu_continuous, cpu_chunked, cpu_prefix]
    baseline: cpu_static
    model: tiny
    requests: 12
    system_prompt: 20
    qps: 200
    prompt_len: 6
    prompt_len_max: 30
    output_len: 3
    output_len_max: 8
    long_share: 0.2
    long_prompt: 90
    max_seqs: 4
    token_budget: 128
    long_prefill: 16
    slo_ttft: 10s
)");
  testing::expect_all_ok(r, 4);
  // Every variant served the same load (its note describes it: arrival span, lengths).
  auto load_of = [](const std::string& note) { return note.substr(0, note.find("tokens mean")); };
  for (const auto& row : r.rows) EXPECT_EQ(load_of(row.message), load_of(r.rows[0].message)) << row.message;
  for (const auto& row : r.rows) {
    EXPECT_EQ(testing::metric(row, "refused"), 0) << row.variant;
    EXPECT_GT(testing::metric(row, "tok/s"), 0) << row.variant;
    EXPECT_GE(testing::metric(row, "ttft p99"), testing::metric(row, "ttft p50")) << row.variant;
    EXPECT_GT(testing::metric(row, "goodput"), 0) << row.variant;
    const bool paged = row.variant == "cpu_prefix";
    EXPECT_NE(row.validation->detail.find(paged ? "every KV block returned" : "every KV reservation returned"),
              std::string::npos);
    if (paged) {
      EXPECT_GT(testing::metric(row, "prefix hit"), 0) << "12 requests share a 20-token system prompt";
    }
  }
}

}  // namespace
}  // namespace ib::serve
