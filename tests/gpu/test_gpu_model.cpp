// The CUDA engine against the CPU reference engine (each test skips itself without a device):
// prefill logits, greedy decoding, the KV cache (decode after prefill, batches of different
// lengths, fork, truncate, chunked prefill, the sliding window), tree and lookahead verification.
// CUDA graphs, gemv, the sampler, OutOfMemory and bad calls: test_gpu_model_paths.cpp.
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

#include "gpu_model_cases.h"
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
using namespace gpu_model_cases;

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

}  // namespace
}  // namespace ib::model
