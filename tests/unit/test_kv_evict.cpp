// KV-cache eviction: each policy against a brute-force model of what it promises (budget, window,
// sinks, H2O's lowest-score eviction), the synthetic attention generator (seeded, the promised
// structure), the replay against full attention, the engine's keep mask and attention record,
// and both kinds through the runner.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../common/run_kind.h"

#include "core/point_access.h"
#include "kvcache/eviction.h"
#include "kvcache/synthetic_attention.h"
#include "model/config.h"
#include "model/engine_studies.h"
#include "model/model.h"
#include "model/model_choice.h"
#include "model/weights.h"
#include "numerics/random.h"
#include "tokenizer/tokenizer.h"

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

// ---- the engine's keep mask and attention record ----

struct EngineFixture {
  model::ModelConfig c = *model::preset("tiny");
  std::unique_ptr<model::Model> m = model::make_cpu_model(c, *model::random_weights(c, 11));
  std::vector<int32_t> tokens = model::random_prompt(c.vocab, 48, 3);

  // Decodes every token into a new sequence, calling before_step(seq, t) before token t; the last
  // logits, and the last step's attention record in `record`.
  std::vector<float> decode(const std::function<void(int seq, int t)>& before_step) {
    const int s = m->new_sequence(64);
    model::kv_eviction(*m).record_attention(s, true);
    std::vector<float> l(static_cast<size_t>(c.vocab));
    for (int t = 0; t < static_cast<int>(tokens.size()); ++t) {
      before_step(s, t);
      model::StepOutput out;
      out.logits = l.data();
      m->decode(&s, &tokens[static_cast<size_t>(t)], 1, out);
    }
    record = model::kv_eviction(*m).attention_record(s);
    m->release(s);
    return l;
  }
  model::AttentionRecord record;
};

TEST(KvEvictEngine, KeepMaskWithEverythingKeptChangesNothing) {
  EngineFixture f;
  const std::vector<float> plain = f.decode([](int, int) {});
  // Marking then unmarking allocates the mask, so its path runs with every position kept.
  const std::vector<float> masked = f.decode([&](int s, int t) {
    model::kv_eviction(*f.m).set_kept(s, t, false);
    model::kv_eviction(*f.m).set_kept(s, t, true);
  });
  EXPECT_EQ(plain, masked);
}

TEST(KvEvictEngine, EvictedPositionsGetNoWeightAndChangeTheLogits) {
  EngineFixture f;
  const std::vector<float> plain = f.decode([](int, int) {});
  const model::AttentionRecord full = f.record;
  ASSERT_EQ(full.weights.size(), f.tokens.size());
  ASSERT_EQ(full.output.size(), static_cast<size_t>(f.c.layers) * f.c.q_dim());
  const double heads = static_cast<double>(f.c.layers) * f.c.heads;
  EXPECT_NEAR(std::accumulate(full.weights.begin(), full.weights.end(), 0.0), heads, 1e-4);
  // A sliding window of 8 through the mask.
  const std::vector<float> windowed = f.decode([&](int s, int t) {
    if (t >= 8) model::kv_eviction(*f.m).set_kept(s, t - 8, false);
  });
  const size_t n = f.tokens.size();
  for (size_t p = 0; p + 8 < n; ++p) EXPECT_EQ(f.record.weights[p], 0.0f) << p;
  EXPECT_NEAR(std::accumulate(f.record.weights.begin(), f.record.weights.end(), 0.0), heads, 1e-4);
  double diff = 0;
  for (size_t i = 0; i < plain.size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(plain[i]) - windowed[i]));
  EXPECT_GT(diff, 1e-3);
  EXPECT_NE(f.record.output, full.output);
}

TEST(KvEvictEngine, PerHeadEvictionHidesAPositionFromThatHeadOnly) {
  EngineFixture f;
  f.decode([](int, int) {});
  const model::AttentionRecord full = f.record;
  const size_t n = f.tokens.size(), H = static_cast<size_t>(f.c.kv_heads), g = static_cast<size_t>(f.c.heads / f.c.kv_heads);
  ASSERT_EQ(full.kv_head_weights.size(), static_cast<size_t>(f.c.layers) * H * n);
  // Each kv head's row sums to its group's query heads (each a softmax over the positions), and
  // the rows sum to the model-wide weights.
  for (size_t lh = 0; lh < static_cast<size_t>(f.c.layers) * H; ++lh)
    EXPECT_NEAR(std::accumulate(full.kv_head_weights.begin() + static_cast<std::ptrdiff_t>(lh * n),
                                full.kv_head_weights.begin() + static_cast<std::ptrdiff_t>((lh + 1) * n), 0.0),
                static_cast<double>(g), 1e-4);
  for (size_t p = 0; p < n; ++p) {
    double sum = 0;
    for (size_t lh = 0; lh < static_cast<size_t>(f.c.layers) * H; ++lh) sum += full.kv_head_weights[lh * n + p];
    EXPECT_NEAR(sum, full.weights[p], 1e-5) << p;
  }
  // Hide positions 0..19 from layer 1's kv head 0 only.
  f.decode([&](int s, int t) {
    if (t == 20)
      for (int p = 0; p < 20; ++p) model::kv_eviction(*f.m).set_kept_head(s, 1, 0, p, false);
  });
  const auto& w = f.record.kv_head_weights;
  const size_t hidden = (1 * H + 0) * n;
  for (size_t p = 0; p < 20; ++p) EXPECT_EQ(w[hidden + p], 0.0f) << p;
  double other = 0;  // layer 0's head 0 still attends there
  for (size_t p = 0; p < 20; ++p) other += w[p];
  EXPECT_GT(other, 0.0);
  // Layer 0 comes before the hidden head: its weights are the unmasked decode's.
  for (size_t p = 0; p < n; ++p) EXPECT_EQ(w[p], full.kv_head_weights[p]) << p;
  EXPECT_THROW(model::kv_eviction(*f.m).set_kept_head(0, f.c.layers, 0, 0, false), std::invalid_argument);
}

TEST(KvEvictEngine, RewrittenPositionsAreKeptAgain) {
  EngineFixture f;
  const std::vector<float> plain = f.decode([](int, int) {});
  // Evict position 10 after it is written, roll back to 10 tokens and decode again: the new
  // token at 10 must be seen, so the result equals the plain decode.
  const int s = f.m->new_sequence(64);
  std::vector<float> l(static_cast<size_t>(f.c.vocab));
  f.m->prefill(s, f.tokens.data(), 12, 1, {});
  model::kv_eviction(*f.m).set_kept(s, 10, false);
  f.m->truncate(s, 10);
  model::StepOutput out;
  out.logits = l.data();
  f.m->prefill(s, f.tokens.data() + 10, static_cast<int>(f.tokens.size()) - 10, 1, out);
  f.m->release(s);
  auto max_diff = [&](const std::vector<float>& x) {
    double d = 0;
    for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(static_cast<double>(x[i]) - plain[i]));
    return d;
  };
  double ref = 0;
  for (float x : plain) ref = std::max(ref, std::abs(static_cast<double>(x)));
  EXPECT_LT(max_diff(l), 1e-4 * ref);  // prefill and decode sum in other orders: not bit for bit
  // ... while hiding position 10 for good moves the logits far more than that.
  const std::vector<float> hidden = f.decode([&](int seq, int t) {
    if (t == 11) model::kv_eviction(*f.m).set_kept(seq, 10, false);
  });
  EXPECT_GT(max_diff(hidden), 1e-2 * ref);
}

// An engine without a study capability is refused when asked for it, saying which.
class NoStudiesEngine : public model::Model {
 public:
  const model::ModelConfig& config() const override { return c_; }
  int new_sequence(int) override { return 0; }
  void release(int) override {}
  int fork(int) override { return 0; }
  void truncate(int, int) override {}
  int length(int) const override { return 0; }
  int capacity(int) const override { return 0; }
  void prefill(int, const int32_t*, int, int, const model::StepOutput&) override {}
  void decode(const int*, const int32_t*, int, const model::StepOutput&) override {}
  int64_t weight_bytes() const override { return 0; }
  int64_t kv_bytes() const override { return 0; }

 private:
  model::ModelConfig c_;
};

std::string refusal(const std::function<void()>& ask) {
  try {
    ask();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(KvEvictEngine, AnEngineWithoutTheStudyIsRefusedSayingWhich) {
  NoStudiesEngine e;
  EXPECT_NE(refusal([&] { model::kv_eviction(e); }).find("KV eviction"), std::string::npos);
  EXPECT_NE(refusal([&] { model::kv_format_study(e); }).find("KV format"), std::string::npos);
  EXPECT_NE(refusal([&] { model::lora_adapters(e); }).find("LoRA"), std::string::npos);
  EXPECT_FALSE(model::has_lora_adapters(e));
  // The CPU engine has all three.
  const auto cfg = model::preset("tiny");
  ASSERT_TRUE(cfg);
  auto w = model::random_weights(*cfg, 1);
  auto cpu = model::make_cpu_model(*cfg, *w);
  EXPECT_EQ(refusal([&] { model::kv_eviction(*cpu).record_attention(cpu->new_sequence(4), true); }), "");
  EXPECT_EQ(refusal([&] { model::kv_format_study(*cpu); }), "");
  EXPECT_TRUE(model::has_lora_adapters(*cpu));
}

// ---- the kinds through the runner ----

double evict_metric(const Row& r, const std::string& key) {
  for (const auto& m : r.metrics)
    if (m.key == key) return m.value;
  ADD_FAILURE() << "no metric " << key << " in " << r.variant;
  return 0;
}

const Row& row(const ExperimentResult& r, const std::string& variant, double budget) {
  for (const auto& x : r.rows)
    if (x.variant == variant && as_number(PointAccess::at(x.point, "budget")) == budget) return x;
  throw std::logic_error("no row " + variant);
}

ExperimentResult run_spec_text(const std::string& body) {
  return testing::run_spec_text("{warmup: 1, min_samples: 2, min_time: 0, max_noise: 1, timeout: 5s}", body);
}

TEST(KvEvictKinds, SyntheticStudyRunsThroughTheRunner) {
  auto r = run_spec_text(
      "  - {name: e, kind: kv-evict, variants: [full, sliding_window, streaming_llm, h2o], baseline: full,"
      " context: 1024, decode_steps: 64, head_dim: 64, budget: [0.1, 1.0]}\n");
  testing::expect_all_ok(r, 8);
  for (const char* v : {"full", "sliding_window", "streaming_llm", "h2o"}) {
    EXPECT_EQ(evict_metric(row(r, v, 1.0), "err mean"), 0) << v;
    EXPECT_EQ(evict_metric(row(r, v, 1.0), "held"), 1024) << v;
  }
  EXPECT_EQ(evict_metric(row(r, "full", 0.1), "held"), 1024);
  EXPECT_EQ(evict_metric(row(r, "h2o", 0.1), "held"), 102);
  EXPECT_NEAR(evict_metric(row(r, "h2o", 0.1), "KV held"), 102 * 0.5, 1e-9);  // llama2-7b: 0.5 MiB per token
  const double window = evict_metric(row(r, "sliding_window", 0.1), "err mean");
  EXPECT_LT(evict_metric(row(r, "streaming_llm", 0.1), "err mean"), window);
  EXPECT_LT(evict_metric(row(r, "h2o", 0.1), "err mean"), window);
  EXPECT_EQ(evict_metric(row(r, "sliding_window", 0.1), "needle recall"), 0);
  EXPECT_GT(evict_metric(row(r, "h2o", 0.1), "bookkeeping"), 0);
}

TEST(KvEvictKinds, StreamingLlmWithoutSinksIsThePlainWindow) {
  // No h2o listed: the points carry no `recent`.
  auto r = run_spec_text(
      "  - {name: e, kind: kv-evict, variants: [sliding_window, streaming_llm], context: 512, decode_steps: 32,"
      " head_dim: 32, budget: 16, sinks: [0, 4, 16]}\n");
  ASSERT_EQ(r.rows.size(), 6u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(r.rows[i].status, RowStatus::Ok) << r.rows[i].message;
  EXPECT_EQ(evict_metric(r.rows[1], "err mean"), evict_metric(r.rows[0], "err mean"));  // sinks: 0
  EXPECT_LT(evict_metric(r.rows[3], "err mean"), evict_metric(r.rows[2], "err mean"));  // sinks: 4
  EXPECT_EQ(r.rows[5].status, RowStatus::Unsupported);                                  // sinks: 16 = budget
}

TEST(KvEvictKinds, EngineStudyRunsThroughTheRunner) {
  auto r = run_spec_text(
      "  - {name: m, kind: kv-evict-model, variants: [cpu_full, cpu_sliding_window, cpu_streaming_llm, cpu_h2o],"
      " baseline: cpu_full, model: tiny, prompt: 96, new_tokens: 32, budget: [0.25, 1.0]}\n");
  testing::expect_all_ok(r, 8);
  for (const char* v : {"cpu_full", "cpu_sliding_window", "cpu_streaming_llm", "cpu_h2o"}) {
    EXPECT_EQ(evict_metric(row(r, v, 1.0), "KL mean"), 0) << v;
    EXPECT_EQ(evict_metric(row(r, v, 1.0), "top-1 agree"), 100) << v;
    EXPECT_EQ(evict_metric(row(r, v, 1.0), "attn err"), 0) << v;
  }
  EXPECT_EQ(evict_metric(row(r, "cpu_full", 0.25), "KL mean"), 0);
  EXPECT_EQ(evict_metric(row(r, "cpu_h2o", 0.25), "held"), 32);
  for (const char* v : {"cpu_sliding_window", "cpu_streaming_llm", "cpu_h2o"}) {
    EXPECT_GT(evict_metric(row(r, v, 0.25), "KL mean"), 0) << v;
    EXPECT_GT(evict_metric(row(r, v, 0.25), "attn err"), 0) << v;
  }
}

// StreamingLLM's oracle: validated against the full cache (a prefill over the whole context gives
// its logits), equal to it when the window holds everything, and losing what the window drops.
TEST(KvEvictKinds, WindowRecomputeIsTheFullCacheWhenTheWindowHoldsAll) {
  auto r = run_spec_text(
      "  - {name: m, kind: kv-evict-model, variants: [cpu_full, cpu_window_recompute, cpu_sliding_window],"
      " baseline: cpu_full, model: tiny, prompt: 96, new_tokens: 32, budget: [0.25, 1.0]}\n");
  testing::expect_all_ok(r, 6);
  EXPECT_LT(evict_metric(row(r, "cpu_window_recompute", 1.0), "KL mean"), 1e-6);
  EXPECT_EQ(evict_metric(row(r, "cpu_window_recompute", 1.0), "top-1 agree"), 100);
  EXPECT_LT(evict_metric(row(r, "cpu_window_recompute", 1.0), "attn err"), 1e-4);
  EXPECT_GT(evict_metric(row(r, "cpu_window_recompute", 0.25), "KL mean"), 1e-4);
  EXPECT_EQ(evict_metric(row(r, "cpu_window_recompute", 0.25), "held"), 32);
  // Not the window policy's result: its positions restart at 0 and nothing before it is cached.
  EXPECT_NE(evict_metric(row(r, "cpu_window_recompute", 0.25), "KL mean"),
            evict_metric(row(r, "cpu_sliding_window", 0.25), "KL mean"));
}

TEST(KvEvictKinds, PerHeadH2oKeepsItsBudgetInEveryHead) {
  auto r = run_spec_text(
      "  - {name: m, kind: kv-evict-model, variants: [cpu_full, cpu_h2o, cpu_h2o_head], baseline: cpu_full,"
      " model: tiny-gqa, prompt: 96, new_tokens: 32, budget: [0.25, 1.0]}\n");
  testing::expect_all_ok(r, 6);  // validation: no head attends to a position its own policy evicted
  EXPECT_EQ(evict_metric(row(r, "cpu_h2o_head", 1.0), "KL mean"), 0);
  EXPECT_EQ(evict_metric(row(r, "cpu_h2o_head", 0.25), "held"), 32);
  EXPECT_GT(evict_metric(row(r, "cpu_h2o_head", 0.25), "KL mean"), 0);
  // Each head chooses its own heavy hitters: not the shared set's result.
  EXPECT_NE(evict_metric(row(r, "cpu_h2o_head", 0.25), "attn err"), evict_metric(row(r, "cpu_h2o", 0.25), "attn err"));
}

// `text: FILE`: the decode is the text's own tokens, the measured ones scored. The full cache's
// perplexity must be the text's perplexity under one plain prefill of the same tokens (an
// independent path: all positions' logits at once), so the scoring is not off by a position.
TEST(KvEvictKinds, ATextIsScoredAsItsPerplexity) {
  const std::string dir = std::string(IB_SOURCE_DIR) + "/tests/data/hf/models/qwen2-tokenizer";
  const std::string text = std::string(IB_SOURCE_DIR) + "/data/texts/code.txt";
  const int prompt = 48, fresh = 64;
  auto r = run_spec_text(
      "  - {name: m, kind: kv-evict-model, variants: [cpu_full, cpu_sliding_window, cpu_streaming_llm], baseline: cpu_full,"
      " model: checkpoint, weights: " +
      dir + ", text: " + text + ", prompt: 48, new_tokens: 64, budget: 16, sinks: 2}\n");
  testing::expect_all_ok(r, 3);
  const double full = evict_metric(r.rows[0], "ppl");
  EXPECT_EQ(evict_metric(r.rows[0], "ppl ×full"), 1.0);
  EXPECT_NE(r.rows[0].message.find("first token, by layer"), std::string::npos) << r.rows[0].message;
  EXPECT_NE(evict_metric(r.rows[1], "ppl"), full);
  EXPECT_NEAR(evict_metric(r.rows[1], "ppl ×full"), evict_metric(r.rows[1], "ppl") / full, 1e-9);

  const model::ModelConfig c = model::config_from_hf(dir);
  auto weights = model::safetensors_weights(c, dir);
  auto m = model::make_cpu_model(c, *weights);
  std::ifstream in(text);
  const std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids = tokenizer::Tokenizer::load(dir)->encode(body, true);
  ASSERT_GE(ids.size(), static_cast<size_t>(prompt + fresh));
  ids.resize(static_cast<size_t>(prompt + fresh));
  const size_t V = static_cast<size_t>(c.vocab);
  std::vector<float> logits(ids.size() * V);
  const int seq = m->new_sequence(static_cast<int>(ids.size()));
  model::StepOutput o;
  o.logits = logits.data();
  m->prefill(seq, ids.data(), static_cast<int>(ids.size()), static_cast<int>(ids.size()), o);
  double nll = 0;
  for (int t = prompt - 1; t < prompt + fresh - 1; ++t) {
    const float* l = &logits[static_cast<size_t>(t) * V];
    const double top = *std::max_element(l, l + V);
    double z = 0;
    for (size_t v = 0; v < V; ++v) z += std::exp(l[v] - top);
    nll += std::log(z) + top - l[static_cast<size_t>(ids[static_cast<size_t>(t) + 1])];
  }
  EXPECT_NEAR(full, std::exp(nll / fresh), 1e-4 * full);
}

TEST(KvEvictKinds, ATextTooShortForTheDecodeIsAnInputError) {
  const std::string dir = std::string(IB_SOURCE_DIR) + "/tests/data/hf/models/qwen2-tokenizer";
  const std::string text = ::testing::TempDir() + "ib_short_text.txt";
  std::ofstream(text) << "def f(x):\n    return x\n";
  try {
    run_spec_text("  - {name: m, kind: kv-evict-model, variants: [cpu_full], model: checkpoint, weights: " + dir +
                  ", text: " + text + ", prompt: 100, new_tokens: 27}\n");
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("text:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("prompt + new_tokens = 127"), std::string::npos) << e.what();
  }
}

TEST(KvEvictEngine, ChannelRangesAgreeWithTheHeadRanges) {
  // kv_channel_amax's largest channel per (layer, K/V, head) is kv_amax's value for that head.
  const auto c = *model::preset("tiny-gqa");
  auto w = model::random_weights(c, 5);
  auto m = model::make_cpu_model(c, *w);
  const auto toks = model::random_prompt(c.vocab, 40, 9);
  const int seq = m->new_sequence(64);
  m->prefill(seq, toks.data(), 40, 1, model::StepOutput{});
  const auto head = model::kv_format_study(*m).kv_amax(seq), channel = model::kv_format_study(*m).kv_channel_amax(seq);
  const size_t D = static_cast<size_t>(c.head_dim);
  ASSERT_EQ(channel.size(), head.size() * D);
  for (size_t i = 0; i < head.size(); ++i) {
    EXPECT_EQ(*std::max_element(channel.begin() + static_cast<std::ptrdiff_t>(i * D),
                                channel.begin() + static_cast<std::ptrdiff_t>((i + 1) * D)),
              head[i]);
    EXPECT_GT(head[i], 0.0f);
  }
}

}  // namespace
}  // namespace ib::kvcache
