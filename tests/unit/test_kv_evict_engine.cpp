// KV-cache eviction in the engine: its keep mask (everything kept changes nothing, an evicted
// position gets no weight, per head, rewritten positions kept again) and attention record, an
// engine without the study refused by name; both eviction kinds through the runner.
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
#include "model/config.h"
#include "model/engine_studies.h"
#include "model/model.h"
#include "model/model_choice.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ib::kvcache {
namespace {

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
