// The CUDA engine against the CPU reference engine (each test skips itself without a device):
// prefill logits, greedy and sampled decoding, the KV cache (decode after prefill, batches of
// different lengths, fork, truncate, chunked prefill, the sliding window), CUDA graphs, the
// token sampler on identical logits, OutOfMemory for a cache past the memory limit, and the
// engine with matmul = gemv (kernels/gemv.h) against the cuBLAS one.
// Presets tiny and tiny-gqa (head_dim 16: split-K attention everywhere; tiny-gqa adds GQA, q/k/v
// biases, tied embeddings and a 48-token window) and two small shapes with head_dim 64 and 128,
// whose prefills of >= 16 tokens go through FlashAttention-2 reading the cache in place.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "require_gpu.h"
#include "test_stream.h"

#include "core/backend.h"
#include "core/cuda_memory.h"
#include "core/errors.h"
#include "core/memory.h"
#include "model/model.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"
#include "numerics/random.h"

namespace ib::model {
namespace {

using ib::testing::TestStream;

ModelConfig P(const std::string& name) {
  auto c = preset(name);
  EXPECT_TRUE(c.has_value()) << name;
  return *c;
}

// A tiny-like shape with FlashAttention-2's head_dim (64 or 128) and GQA; `qwen` adds tiny-gqa's
// q/k/v biases, tied embeddings, rope theta and 48-token window (prefill chunks of 16 rows or
// more use flash2 with its sliding window, shorter ones the split-K kernel).
ModelConfig with_head_dim(int d, bool qwen = false) {
  ModelConfig c = qwen ? P("tiny-gqa") : P("tiny");
  c.name = "tiny-hd" + std::to_string(d) + (qwen ? "-window" : "");
  c.hidden = 256;
  c.head_dim = d;
  c.heads = 256 / d;
  c.kv_heads = c.heads / 2;
  c.mlp = 512;
  c.vocab = 512;
  return c;
}

// What Hugging Face checkpoints add (lib/model/config.cpp reads them from config.json): Llama's
// attention_bias (q/k/v and o_proj) and mlp_bias, llama3 RoPE scaling and a window on one layer
// of two (Qwen2 layer_types); and Qwen3's per-head q/k RMSNorm with YaRN scaling at head_dim 64.
ModelConfig hf_features() {
  ModelConfig c = P("tiny");
  c.name = "tiny-bias-llama3-layer-window";
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_positions = 32;
  c.layer_windows = {0, 6};
  c.sliding_window = 6;
  return c;
}
ModelConfig qwen3_yarn() {
  ModelConfig c = with_head_dim(64);
  c.name = "tiny-qwen3-yarn";
  c.qk_norm = true;
  c.rope_theta = 1000000.0f;
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_positions = 16;
  c.rope_scaling.attention_factor = 0.1 * std::log(4.0) + 1.0;
  return c;
}

std::vector<ModelConfig> all_configs() {
  return {P("tiny"), P("tiny-gqa"), with_head_dim(64), with_head_dim(128), with_head_dim(64, true), hf_features(), qwen3_yarn()};
}

std::vector<int32_t> prompt(int vocab, int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  return t;
}

double rel_l2(const float* a, const float* b, size_t n) {
  double e = 0, r = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    e += d * d;
    r += static_cast<double>(b[i]) * b[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return rel_l2(a.data(), b.data(), std::min(a.size(), b.size()));
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Largest minus second largest logit.
float top2_gap(const float* l, int vocab) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    if (l[i] > a) {
      b = a;
      a = l[i];
    } else if (l[i] > b) {
      b = l[i];
    }
  }
  return a - b;
}

EngineOptions small_options(bool graph = true) {
  EngineOptions o;
  o.cuda_graph = graph;
  o.max_batch = 8;
  o.max_prefill = 256;
  return o;
}

struct Engines {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
  TestStream stream;
  std::unique_ptr<Model> cpu, gpu;
  Engines(const ModelConfig& c, uint64_t seed, const EngineOptions& o = small_options())
      : config(c), weights(random_weights(c, seed)) {
    cpu = make_cpu_model(c, *weights);
    gpu = make_cuda_model(c, *weights, o, stream.get());
  }
  size_t vocab() const { return static_cast<size_t>(config.vocab); }
};

// Logits of the last n_logits positions after prefilling `tokens` into sequence `seq`.
std::vector<float> prefill_logits(Model& m, int seq, const std::vector<int32_t>& tokens, int n_logits) {
  std::vector<float> l(static_cast<size_t>(n_logits) * static_cast<size_t>(m.config().vocab));
  StepOutput out;
  out.logits = l.data();
  m.prefill(seq, tokens.data(), static_cast<int>(tokens.size()), n_logits, out);
  return l;
}

std::vector<float> decode_logits(Model& m, const std::vector<int>& seqs, const std::vector<int32_t>& tokens,
                                 int32_t* next = nullptr, const SamplingParams& sp = {}, uint64_t step = 0) {
  std::vector<float> l(seqs.size() * static_cast<size_t>(m.config().vocab));
  StepOutput out;
  out.logits = l.data();
  out.next = next;
  out.sampling = sp;
  out.step = step;
  m.decode(seqs.data(), tokens.data(), static_cast<int>(seqs.size()), out);
  return l;
}

TEST(GpuModel, PrefillLogitsMatchTheCpu) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 11);
    // 100 tokens: past tiny-gqa's 48-token window, and a flash2 query tile of 100 rows.
    const auto tokens = prompt(c.vocab, 100, 5);
    const int sc = e.cpu->new_sequence(128), sg = e.gpu->new_sequence(128);
    const auto want = prefill_logits(*e.cpu, sc, tokens, 100);
    const auto got = prefill_logits(*e.gpu, sg, tokens, 100);
    ASSERT_TRUE(all_finite(got)) << c.name;
    EXPECT_LT(rel_l2(got, want), 2e-2) << c.name;
    // The first row sees one key, the last 100 (tiny-gqa: 48): check both ends on their own.
    EXPECT_LT(rel_l2(got.data(), want.data(), e.vocab()), 2e-2) << c.name << " row 0";
    EXPECT_LT(rel_l2(got.data() + 99 * e.vocab(), want.data() + 99 * e.vocab(), e.vocab()), 2e-2) << c.name << " row 99";
    EXPECT_EQ(e.gpu->length(sg), 100);
    EXPECT_GT(e.gpu->weight_bytes(), 0);
  }
}

TEST(GpuModel, ChunkedAndRepeatedPrefillsMatchTheCpu) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    EngineOptions o = small_options();
    o.max_prefill = 32;  // 70 tokens = chunks of 32, 32, 6: later chunks attend to the cached ones
    Engines e(c, 12, o);
    const auto a = prompt(c.vocab, 70, 6), b = prompt(c.vocab, 40, 7);
    const int sc = e.cpu->new_sequence(256), sg = e.gpu->new_sequence(256);
    const auto want_a = prefill_logits(*e.cpu, sc, a, 40);  // logits rows span two chunks
    const auto got_a = prefill_logits(*e.gpu, sg, a, 40);
    EXPECT_LT(rel_l2(got_a, want_a), 2e-2) << c.name;
    const auto want_b = prefill_logits(*e.cpu, sc, b, 3);  // a second prefill continues the sequence
    const auto got_b = prefill_logits(*e.gpu, sg, b, 3);
    EXPECT_LT(rel_l2(got_b, want_b), 2e-2) << c.name;
    EXPECT_EQ(e.gpu->length(sg), 110);
    // A third prefill of 100 tokens from position 110 (chunks of 32 from 110, 142, 174, 206):
    // with the 48-token window its flash2 blocks start past the first key tile of the cache
    // (first_tile > 0 through the engine's strided K/V).
    const auto d = prompt(c.vocab, 100, 8);
    const auto want_d = prefill_logits(*e.cpu, sc, d, 100);
    const auto got_d = prefill_logits(*e.gpu, sg, d, 100);
    EXPECT_LT(rel_l2(got_d, want_d), 2e-2) << c.name;
    EXPECT_EQ(e.gpu->length(sg), 210);
  }
}

// Batched verification: several sequences' rows in one pass, as the CPU computes them.
TEST(GpuModel, PrefillBatchMatchesTheCpu) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 14);
    const auto a = prompt(c.vocab, 60, 21), b = prompt(c.vocab, 17, 22), more = prompt(c.vocab, 9, 23);
    std::vector<int> cs, gs;
    for (const auto* p : {&a, &b}) {
      cs.push_back(e.cpu->new_sequence(128));
      gs.push_back(e.gpu->new_sequence(128));
      prefill_logits(*e.cpu, cs.back(), *p, 1);
      prefill_logits(*e.gpu, gs.back(), *p, 1);
    }
    const int counts[2] = {6, 3};
    std::vector<float> want(9 * e.vocab()), got(9 * e.vocab());
    StepOutput ow, og;
    ow.logits = want.data();
    og.logits = got.data();
    e.cpu->prefill_batch(cs.data(), counts, 2, more.data(), ow);
    e.gpu->prefill_batch(gs.data(), counts, 2, more.data(), og);
    ASSERT_TRUE(all_finite(got)) << c.name;
    EXPECT_LT(rel_l2(got, want), 2e-2) << c.name;
    EXPECT_EQ(e.gpu->length(gs[0]), 66);
    EXPECT_EQ(e.gpu->length(gs[1]), 20);
    // last_only (a serving step): each sequence's last row alone, gathered before the LM head.
    std::vector<float> last_want(2 * e.vocab()), last_got(2 * e.vocab());
    ow.logits = last_want.data();
    og.logits = last_got.data();
    for (size_t i = 0; i < 2; ++i) {
      e.cpu->truncate(cs[i], i == 0 ? 60 : 17);
      e.gpu->truncate(gs[i], i == 0 ? 60 : 17);
    }
    e.cpu->prefill_batch(cs.data(), counts, 2, more.data(), ow, true);
    e.gpu->prefill_batch(gs.data(), counts, 2, more.data(), og, true);
    ASSERT_TRUE(all_finite(last_got)) << c.name;
    EXPECT_LT(rel_l2(last_got, last_want), 2e-2) << c.name;
    EXPECT_EQ(e.gpu->length(gs[0]), 66);
    // Per-sequence logit rows (a serving step with a speculating request): the first sequence's
    // last row, the second's three, gathered in order before the LM head.
    const int logit_rows[2] = {1, 3};
    std::vector<float> mixed_want(4 * e.vocab()), mixed_got(4 * e.vocab());
    ow.logits = mixed_want.data();
    og.logits = mixed_got.data();
    for (size_t i = 0; i < 2; ++i) {
      e.cpu->truncate(cs[i], i == 0 ? 60 : 17);
      e.gpu->truncate(gs[i], i == 0 ? 60 : 17);
    }
    e.cpu->prefill_batch_rows(cs.data(), counts, 2, more.data(), ow, logit_rows);
    e.gpu->prefill_batch_rows(gs.data(), counts, 2, more.data(), og, logit_rows);
    ASSERT_TRUE(all_finite(mixed_got)) << c.name;
    EXPECT_LT(rel_l2(mixed_got, mixed_want), 2e-2) << c.name;
    // The same rows as the whole pass's: row 5 (the first's last), rows 6-8 (the second's three).
    for (size_t r = 0; r < 4; ++r)
      EXPECT_LT(rel_l2(std::vector<float>(mixed_want.begin() + r * e.vocab(), mixed_want.begin() + (r + 1) * e.vocab()),
                       std::vector<float>(want.begin() + (r + 5) * e.vocab(), want.begin() + (r + 6) * e.vocab())),
                1e-4)
          << c.name << " row " << r;
  }
}

TEST(GpuModel, GreedyDecodingGivesTheCpuTokens) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 13);
    const auto tokens = prompt(c.vocab, 40, 8);  // + 16 steps: tiny-gqa decodes across its window
    const int sc = e.cpu->new_sequence(64), sg = e.gpu->new_sequence(64);
    int32_t nc = -1, ng = -1;
    std::vector<float> lc(e.vocab()), lg(e.vocab());
    StepOutput oc, og;
    oc.logits = lc.data();
    oc.next = &nc;
    og.logits = lg.data();
    og.next = &ng;
    e.cpu->prefill(sc, tokens.data(), 40, 1, oc);
    e.gpu->prefill(sg, tokens.data(), 40, 1, og);
    for (int step = 0; step <= 16; ++step) {
      // Both free-running. bf16 activations move logits by ~1%: a flip is only acceptable on a
      // near tie of the CPU's two best logits, and the runs diverge from there.
      if (nc != ng) {
        EXPECT_LT(top2_gap(lc.data(), c.vocab), 0.05f) << c.name << " step " << step << ": GPU " << ng << ", CPU " << nc;
        break;
      }
      EXPECT_LT(rel_l2(lg, lc), 2e-2) << c.name << " step " << step;
      if (step == 16) break;
      const int32_t t = nc;
      oc.step = og.step = static_cast<uint64_t>(step + 1);
      e.cpu->decode(&sc, &t, 1, oc);
      e.gpu->decode(&sg, &t, 1, og);
    }
    EXPECT_EQ(e.gpu->length(sg), e.cpu->length(sc)) << c.name;
  }
}

TEST(GpuModel, DecodeAfterPrefillEqualsAPrefillOfTheWholeSequence) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 14);
    const auto tokens = prompt(c.vocab, 61, 9);
    const int a = e.gpu->new_sequence(64), b = e.gpu->new_sequence(64);
    const std::vector<int32_t> head(tokens.begin(), tokens.end() - 1);
    prefill_logits(*e.gpu, a, head, 1);
    const auto stepped = decode_logits(*e.gpu, {a}, {tokens.back()});
    const auto whole = prefill_logits(*e.gpu, b, tokens, 1);
    EXPECT_LT(rel_l2(stepped, whole), 1e-2) << c.name;
  }
}

TEST(GpuModel, ABatchOfDifferentLengthsDecodesLikeEachAlone) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 15);
    const std::vector<int> lens = {5, 33, 70};
    std::vector<int> sg, sc;
    for (size_t i = 0; i < lens.size(); ++i) {
      const auto p = prompt(c.vocab, lens[i], 20 + i);
      sg.push_back(e.gpu->new_sequence(80));
      sc.push_back(e.cpu->new_sequence(80));
      prefill_logits(*e.gpu, sg.back(), p, 1);
      prefill_logits(*e.cpu, sc.back(), p, 1);
    }
    const std::vector<int32_t> next = {3, 4, 5};
    const auto batched = decode_logits(*e.gpu, sg, next);
    const auto want = decode_logits(*e.cpu, sc, next);
    EXPECT_LT(rel_l2(batched, want), 2e-2) << c.name;
    for (size_t i = 0; i < lens.size(); ++i) {
      e.gpu->truncate(sg[i], lens[i]);
      const auto alone = decode_logits(*e.gpu, {sg[i]}, {next[i]});
      // Other GEMM shapes and split counts: not bitwise, but far below the bf16 noise.
      EXPECT_LT(rel_l2(batched.data() + i * e.vocab(), alone.data(), e.vocab()), 5e-3) << c.name << " row " << i;
      EXPECT_EQ(e.gpu->length(sg[i]), lens[i] + 1);
    }
  }
}

TEST(GpuModel, ForkThenDiverge) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 16);
    const auto p = prompt(c.vocab, 30, 10);
    const int sg = e.gpu->new_sequence(48), sc = e.cpu->new_sequence(48);
    prefill_logits(*e.gpu, sg, p, 1);
    prefill_logits(*e.cpu, sc, p, 1);
    const int fg = e.gpu->fork(sg), fc = e.cpu->fork(sc);
    EXPECT_EQ(e.gpu->length(fg), 30);
    EXPECT_EQ(e.gpu->capacity(fg), 48);
    // Different tokens into the two branches, as one batch, then each branch on its own again.
    const auto got = decode_logits(*e.gpu, {sg, fg}, {7, 9});
    const auto want = decode_logits(*e.cpu, {sc, fc}, {7, 9});
    EXPECT_LT(rel_l2(got, want), 2e-2) << c.name;
    EXPECT_GT(rel_l2(got.data(), got.data() + e.vocab(), e.vocab()), 1e-2) << c.name << ": the branches did not diverge";
    const auto got_f = decode_logits(*e.gpu, {fg}, {11});
    const auto want_f = decode_logits(*e.cpu, {fc}, {11});
    EXPECT_LT(rel_l2(got_f, want_f), 2e-2) << c.name << " fork";
    e.gpu->release(sg);  // the fork owns its copy
    e.cpu->release(sc);
    const auto got_f2 = decode_logits(*e.gpu, {fg}, {12});
    const auto want_f2 = decode_logits(*e.cpu, {fc}, {12});
    EXPECT_LT(rel_l2(got_f2, want_f2), 2e-2) << c.name << " fork after release";
  }
}

TEST(GpuModel, TruncateThenRedecodeGivesTheSameLogits) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    Engines e(c, 17);
    const auto p = prompt(c.vocab, 20, 11);
    const int s = e.gpu->new_sequence(32);
    prefill_logits(*e.gpu, s, p, 1);
    const auto first = decode_logits(*e.gpu, {s}, {42});
    decode_logits(*e.gpu, {s}, {43});
    decode_logits(*e.gpu, {s}, {44});
    e.gpu->truncate(s, 20);
    EXPECT_EQ(e.gpu->length(s), 20);
    const auto again = decode_logits(*e.gpu, {s}, {42});
    // Same kernels on the same cache contents (the first step ran directly, the later ones
    // replay its graph): identical.
    EXPECT_LT(rel_l2(again, first), 1e-6) << c.name;
    EXPECT_THROW(e.gpu->truncate(s, 22), std::invalid_argument);
  }
}

// Tree verification: the same token tree (two calls, the second extending the first) on both
// engines gives the same logits per node; keeping one path leaves the cache a chain would have,
// so the next decode step agrees too. The windowed config puts the tree past its 48-token window;
// a 300-token prompt makes the kernel's online softmax span two tiles of 256 keys.
TEST(GpuModel, TreeVerificationMatchesTheCpu) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    for (int n_prompt : {60, 300}) {
      Engines e(c, 19);
      const auto p = prompt(c.vocab, n_prompt, 13);
      const std::vector<int32_t> tok = {5, 9, 11, 20, 21, 9, 33};
      const std::vector<int32_t> parent = {-1, 0, 0, 1, 1, 2, 3};
      const int sc = e.cpu->new_sequence(n_prompt + 20), sg = e.gpu->new_sequence(n_prompt + 20);
      prefill_logits(*e.cpu, sc, p, 1);
      prefill_logits(*e.gpu, sg, p, 1);
      std::vector<float> want(7 * e.vocab()), got(7 * e.vocab());
      for (auto [m, seq, l] : {std::tuple{e.cpu.get(), sc, want.data()}, std::tuple{e.gpu.get(), sg, got.data()}}) {
        m->prefill_tree(seq, tok.data(), parent.data(), 5, {l});
        m->prefill_tree(seq, tok.data() + 5, parent.data() + 5, 2, {l + 5 * e.vocab()});
      }
      ASSERT_TRUE(all_finite(got)) << c.name;
      EXPECT_EQ(e.gpu->length(sg), n_prompt + 7);
      for (int node = 0; node < 7; ++node)
        EXPECT_LT(rel_l2(got.data() + node * e.vocab(), want.data() + node * e.vocab(), e.vocab()), 2e-2)
            << c.name << " prompt " << n_prompt << " node " << node;
      EXPECT_THROW(e.gpu->keep_tree_path(sg, {0, 2, 3}), std::invalid_argument);
      e.cpu->keep_tree_path(sc, {0, 1, 3, 6});
      e.gpu->keep_tree_path(sg, {0, 1, 3, 6});
      EXPECT_EQ(e.gpu->length(sg), n_prompt + 4);
      const auto next_c = decode_logits(*e.cpu, {sc}, {3});
      const auto next_g = decode_logits(*e.gpu, {sg}, {3});
      EXPECT_LT(rel_l2(next_g, next_c), 2e-2) << c.name << " prompt " << n_prompt;
    }
  }
}

// The tree of a lookahead decoding step (specdec/lookahead.h): the root, two pool n-grams under
// it, and a Jacobi window of W = 8 columns × 3 levels — level 0 a chain after the root, each
// column a chain down the levels — so rows sit up to 11 deep. Every row's logits match the CPU,
// and keeping a path through the window (root, level 0 columns 1–2, then column 2 down the levels)
// leaves a cache that decodes like the CPU's.
TEST(GpuModel, LookaheadTreeMatchesTheCpu) {
  REQUIRE_GPU();
  constexpr int W = 8, levels = 3;
  std::vector<int32_t> tok = {7, 3, 4, 5, 3, 6}, parent = {-1, 0, 1, 2, 0, 4};
  std::vector<std::vector<int>> node(levels, std::vector<int>(W, 0));
  for (int j = 0; j < levels; ++j)
    for (int c = 0; c < W; ++c) {
      if (j == 0 && c == 0) continue;  // the root
      node[j][c] = static_cast<int>(tok.size());
      tok.push_back(10 + 3 * j + 5 * c);
      parent.push_back(j == 0 ? node[0][c - 1] : node[j - 1][c]);
    }
  const int n = static_cast<int>(tok.size());
  const std::vector<int> keep = {0, node[0][1], node[0][2], node[1][2], node[2][2]};
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    Engines e(c, 23);
    const auto p = prompt(c.vocab, 90, 17);
    const int sc = e.cpu->new_sequence(90 + n + 4), sg = e.gpu->new_sequence(90 + n + 4);
    prefill_logits(*e.cpu, sc, p, 1);
    prefill_logits(*e.gpu, sg, p, 1);
    std::vector<float> want(static_cast<size_t>(n) * e.vocab()), got(static_cast<size_t>(n) * e.vocab());
    e.cpu->prefill_tree(sc, tok.data(), parent.data(), n, {want.data()});
    e.gpu->prefill_tree(sg, tok.data(), parent.data(), n, {got.data()});
    ASSERT_TRUE(all_finite(got)) << c.name;
    for (int i = 0; i < n; ++i)
      EXPECT_LT(
          rel_l2(got.data() + static_cast<size_t>(i) * e.vocab(), want.data() + static_cast<size_t>(i) * e.vocab(), e.vocab()),
          2e-2)
          << c.name << " node " << i;
    e.cpu->keep_tree_path(sc, keep);
    e.gpu->keep_tree_path(sg, keep);
    EXPECT_EQ(e.gpu->length(sg), 90 + 5);
    EXPECT_LT(rel_l2(decode_logits(*e.gpu, {sg}, {9}), decode_logits(*e.cpu, {sc}, {9})), 2e-2) << c.name;
  }
}

// Two engines given the same two prompts (prompt b: len + step·b tokens, seed + b), each in a
// sequence of capacity 64: the sequences and the first tokens each engine chose.
struct TwoStarts {
  std::vector<int> s_on, s_off;
  std::vector<int32_t> t_on, t_off;
};
TwoStarts prefill_two(Model& on, Model& off, int vocab, int len, int step, uint64_t seed) {
  TwoStarts r;
  r.t_on.resize(2);
  r.t_off.resize(2);
  for (int b = 0; b < 2; ++b) {
    const auto p = prompt(vocab, len + step * b, seed + static_cast<uint64_t>(b));
    r.s_on.push_back(on.new_sequence(64));
    r.s_off.push_back(off.new_sequence(64));
    StepOutput o1, o2;
    o1.next = &r.t_on[static_cast<size_t>(b)];
    o2.next = &r.t_off[static_cast<size_t>(b)];
    on.prefill(r.s_on.back(), p.data(), static_cast<int>(p.size()), 1, o1);
    off.prefill(r.s_off.back(), p.data(), static_cast<int>(p.size()), 1, o2);
  }
  return r;
}

TEST(GpuModel, CudaGraphsOnAndOffGiveTheSameTokens) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    auto w = random_weights(c, 18);
    TestStream stream;
    auto on = make_cuda_model(c, *w, small_options(true), nullptr);  // graphs captured privately, launched on the legacy stream
    auto off = make_cuda_model(c, *w, small_options(false), stream.get());
    auto [s_on, s_off, t_on, t_off] = prefill_two(*on, *off, c.vocab, 10, 25, 30);
    std::vector<float> l_on, l_off;
    for (int step = 0; step < 16; ++step) {
      ASSERT_EQ(t_on, t_off) << c.name << " step " << step;
      const std::vector<int32_t> in_on = t_on, in_off = t_off;
      l_on = decode_logits(*on, s_on, in_on, t_on.data());
      l_off = decode_logits(*off, s_off, in_off, t_off.data());
      EXPECT_LT(rel_l2(l_on, l_off), 1e-6) << c.name << " step " << step;
      if (step == 7) {  // a batch size of its own in between: another graph, then back to 2
        int32_t one = 0;
        decode_logits(*on, {s_on[0]}, {in_on[0]}, &one);
        on->truncate(s_on[0], on->length(s_on[0]) - 1);
      }
    }
    EXPECT_EQ(t_on, t_off) << c.name;
  }
}

EngineOptions gemv_options(bool graph = true) {
  EngineOptions o = small_options(graph);
  o.matmul = Matmul::Gemv;
  return o;
}

int argmax(const float* l, int vocab) { return static_cast<int>(std::max_element(l, l + vocab) - l); }

// matmul = gemv: our GEMV takes every product of <= 8 rows whose `in` is a multiple of 8 (tiny's
// down_proj, in = 172, stays on cuBLAS), cuBLAS the longer prefills. Same logits as the cuBLAS
// engine to rounding, the CPU's greedy tokens (teacher-forced, so a near tie cannot derail the rest).
TEST(GpuModel, GemvMatmulsGiveTheCublasLogitsAndTheCpuTokens) {
  REQUIRE_GPU();
  for (const ModelConfig& c : all_configs()) {
    auto w = random_weights(c, 19);
    TestStream stream;
    auto cpu = make_cpu_model(c, *w);
    auto cub = make_cuda_model(c, *w, small_options(), stream.get());
    auto gem = make_cuda_model(c, *w, gemv_options(), stream.get());
    const size_t V = static_cast<size_t>(c.vocab);
    // Sequence 0: a 5-token prompt, a prefill of GEMVs only; sequence 1: 40 tokens, cuBLAS GEMMs
    // and a GEMV LM head.
    std::vector<int> sc, sb, sg;
    std::vector<int32_t> next(2);
    for (int b = 0; b < 2; ++b) {
      const auto p = prompt(c.vocab, b == 0 ? 5 : 40, 40 + static_cast<uint64_t>(b));
      sc.push_back(cpu->new_sequence(64));
      sb.push_back(cub->new_sequence(64));
      sg.push_back(gem->new_sequence(64));
      const auto lc = prefill_logits(*cpu, sc.back(), p, 1);
      const auto lb = prefill_logits(*cub, sb.back(), p, 1);
      const auto lg = prefill_logits(*gem, sg.back(), p, 1);
      ASSERT_TRUE(all_finite(lg)) << c.name;
      EXPECT_LT(rel_l2(lg, lb), 1e-2) << c.name << " prefill " << p.size();
      EXPECT_LT(rel_l2(lg, lc), 2e-2) << c.name << " prefill " << p.size();
      next[static_cast<size_t>(b)] = argmax(lc.data(), c.vocab);
    }
    for (int step = 0; step < 12; ++step) {
      std::vector<int32_t> tg(2, -1);
      const auto lc = decode_logits(*cpu, sc, next);
      const auto lb = decode_logits(*cub, sb, next);
      const auto lg = decode_logits(*gem, sg, next, tg.data());
      ASSERT_TRUE(all_finite(lg)) << c.name;
      EXPECT_LT(rel_l2(lg, lb), 1e-2) << c.name << " step " << step;
      EXPECT_LT(rel_l2(lg, lc), 2e-2) << c.name << " step " << step;
      for (size_t b = 0; b < 2; ++b) {
        const int want = argmax(lc.data() + b * V, c.vocab);
        if (tg[b] != want) {
          EXPECT_LT(top2_gap(lc.data() + b * V, c.vocab), 0.05f) << c.name << " step " << step << " row " << b;
        }
        next[b] = want;
      }
    }
  }
}

// With every matmul of a short prefill and of the decode steps on our GEMV (and attention on the
// split-K kernel), nothing in a step is left to a library's choice: graph replays and eager
// launches give the same bits.
TEST(GpuModel, GemvDecodeStepsReplayFromCudaGraphsBitwise) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    auto w = random_weights(c, 20);
    TestStream stream;
    auto on = make_cuda_model(c, *w, gemv_options(true), stream.get());
    auto off = make_cuda_model(c, *w, gemv_options(false), stream.get());
    auto [s_on, s_off, t_on, t_off] = prefill_two(*on, *off, c.vocab, 5, 3, 50);  // <= 8 rows: GEMV prefills
    for (int step = 0; step < 10; ++step) {
      ASSERT_EQ(t_on, t_off) << c.name << " step " << step;
      const std::vector<int32_t> in_on = t_on, in_off = t_off;
      const auto l_on = decode_logits(*on, s_on, in_on, t_on.data());
      const auto l_off = decode_logits(*off, s_off, in_off, t_off.data());
      EXPECT_EQ(l_on, l_off) << c.name << " step " << step;  // step 0 runs eager on both, the rest replay on `on`
    }
  }
}

TEST(GpuModel, SampledTokensMostlyMatchTheCpu) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny"), P("tiny-gqa")}) {
    Engines e(c, 19);
    SamplingParams sp;
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.9f;
    sp.seed = 1234;
    const auto p = prompt(c.vocab, 16, 12);
    const int sc = e.cpu->new_sequence(80), sg = e.gpu->new_sequence(80);
    prefill_logits(*e.cpu, sc, p, 1);
    prefill_logits(*e.gpu, sg, p, 1);
    // Teacher-forced: both decode the CPU's draw, so one disagreement does not derail the rest.
    // The GPU's logits differ from the CPU's by ~1% (bf16 activations), which moves the
    // cumulative distribution a little: a uniform that falls right next to a boundary can pick
    // the neighbouring token. With identical logits the two samplers agree exactly (see
    // SamplerMatchesTheCpuReferenceOnIdenticalLogits).
    const int steps = 60;
    int agree = 0;
    int32_t tok = p.back();
    for (int step = 0; step < steps; ++step) {
      int32_t nc = -1, ng = -1;
      decode_logits(*e.cpu, {sc}, {tok}, &nc, sp, static_cast<uint64_t>(step));
      decode_logits(*e.gpu, {sg}, {tok}, &ng, sp, static_cast<uint64_t>(step));
      ASSERT_GE(ng, 0);
      ASSERT_LT(ng, c.vocab);
      agree += nc == ng;
      tok = nc;
    }
    EXPECT_GE(agree, steps * 9 / 10) << c.name << ": " << agree << "/" << steps;
  }
}

// The GPU sampler alone, on logits both sides share exactly.
TEST(GpuModel, SamplerMatchesTheCpuReferenceOnIdenticalLogits) {
  REQUIRE_GPU();
  TestStream stream;
  struct Case {
    float t;
    int k;
    float p;
  };
  const std::vector<Case> cases = {{0.0f, 0, 1.0f},    {1.0f, 0, 1.0f},    {0.8f, 40, 0.9f}, {0.7f, 0, 0.95f},
                                   {1.3f, 5000, 1.0f}, {1.0f, 3000, 0.5f}, {2.0f, 1, 1.0f},  {0.5f, 2, 0.3f}};
  for (int vocab : {600, 152064}) {
    const int rows = 6;
    std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(vocab));
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < vocab; ++i) {
        float x = 3.0f * random_uniform(99 + static_cast<uint64_t>(r), static_cast<uint64_t>(i)) * 2.0f;
        if (r % 2 == 1) x = std::round(x * 2.0f) / 2.0f;  // many exact ties: broken by index
        if (r == 2 && i % 97 == 0) x = -INFINITY;
        logits[static_cast<size_t>(r) * static_cast<size_t>(vocab) + static_cast<size_t>(i)] = x;
      }
    DeviceBuffer<float> dl(logits.size(), "test logits");
    DeviceBuffer<int32_t> dn(static_cast<size_t>(rows), "test tokens");
    IB_CUDA_CHECK(cudaMemcpy(dl.data(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
    int total = 0, agree = 0;
    for (const Case& cs : cases)
      for (uint64_t step = 0; step < 4; ++step) {
        SamplingParams sp;
        sp.temperature = cs.t;
        sp.top_k = cs.k;
        sp.top_p = cs.p;
        sp.seed = 77;
        launch_sample(dl.data(), rows, vocab, cs.t, cs.k, cs.p, sp.seed, step, 0, dn.data(), stream.get());
        std::vector<int32_t> got(static_cast<size_t>(rows));
        IB_CUDA_CHECK(cudaMemcpyAsync(got.data(), dn.data(), got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream.get()));
        IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        for (int r = 0; r < rows; ++r) {
          const int32_t want = sample_token(&logits[static_cast<size_t>(r) * static_cast<size_t>(vocab)], vocab, sp,
                                            sample_uniform(sp.seed, step, r));
          ++total;
          agree += got[static_cast<size_t>(r)] == want;
          EXPECT_EQ(got[static_cast<size_t>(r)], want)
              << "vocab " << vocab << " T " << cs.t << " k " << cs.k << " p " << cs.p << " step " << step << " row " << r;
        }
      }
    RecordProperty("agree_" + std::to_string(vocab), std::to_string(agree) + "/" + std::to_string(total));
  }
}

// The same weights read on the host and uploaded (the checkpoint path) instead of filled on the
// device: the same bf16 values, so the same logits.
class HostReadWeights : public WeightSource {
 public:
  explicit HostReadWeights(const WeightSource& w) : w_(w) {}
  void read(const TensorSpec& spec, float* dst) const override { w_.read(spec, dst); }
  std::string describe() const override { return "host copy of " + w_.describe(); }

 private:
  const WeightSource& w_;
};

TEST(GpuModel, UploadedWeightsGiveTheSameLogitsAsDeviceFilledOnes) {
  REQUIRE_GPU();
  for (const ModelConfig& c : {P("tiny-gqa"), with_head_dim(128)}) {
    auto w = random_weights(c, 22);
    HostReadWeights hw(*w);
    auto filled = make_cuda_model(c, *w, small_options(), nullptr);
    auto uploaded = make_cuda_model(c, hw, small_options(), nullptr);
    EXPECT_EQ(filled->weight_bytes(), uploaded->weight_bytes());
    const auto p = prompt(c.vocab, 30, 14);
    const int a = filled->new_sequence(32), b = uploaded->new_sequence(32);
    EXPECT_EQ(rel_l2(prefill_logits(*uploaded, b, p, 2), prefill_logits(*filled, a, p, 2)), 0.0) << c.name;
  }
}

TEST(GpuModel, ACachePastTheMemoryLimitIsOutOfMemory) {
  REQUIRE_GPU();
  const ModelConfig c = P("tiny");
  auto w = random_weights(c, 20);
  TestStream stream;
  auto m = make_cuda_model(c, *w, small_options(), stream.get());
  struct LimitGuard {
    int64_t old = device_memory().limit();
    ~LimitGuard() { device_memory().set_limit(old); }
  } guard;
  const int64_t per_token = c.kv_elems_per_token() * 2;  // bf16
  device_memory().set_limit(device_memory().current() + (int64_t{1} << 20));
  EXPECT_THROW(m->new_sequence(static_cast<int>((int64_t{4} << 20) / per_token)), OutOfMemory);
  EXPECT_EQ(m->kv_bytes(), 0);
  const int s = m->new_sequence(256);  // 128 KiB: fits
  EXPECT_EQ(m->kv_bytes(), 256 * per_token);
  const auto p = prompt(c.vocab, 10, 13);
  const auto l = prefill_logits(*m, s, p, 1);
  EXPECT_TRUE(all_finite(l));
  m->release(s);
  EXPECT_EQ(m->kv_bytes(), 0);
}

TEST(GpuModel, BadCallsAreRejected) {
  REQUIRE_GPU();
  const ModelConfig c = P("tiny");
  auto w = random_weights(c, 21);
  auto m = make_cuda_model(c, *w, small_options(), nullptr);
  const int s = m->new_sequence(4);
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_THROW(m->prefill(s, five.data(), 5, 1, {}), std::invalid_argument);  // past the capacity
  const int32_t bad = c.vocab;
  EXPECT_THROW(m->prefill(s, &bad, 1, 1, {}), std::invalid_argument);
  const std::vector<int> twice = {s, s};
  EXPECT_THROW(m->decode(twice.data(), five.data(), 2, {}), std::invalid_argument);
  EXPECT_THROW(m->decode(&s, five.data(), 0, {}), std::invalid_argument);
  m->release(s);
  EXPECT_THROW(m->decode(&s, five.data(), 1, {}), std::invalid_argument);
  EXPECT_EQ(m->new_sequence(4), s);  // ids are reused
}

}  // namespace
}  // namespace ib::model
