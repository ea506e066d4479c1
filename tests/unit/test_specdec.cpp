// Speculative decoding: the analytic model, prompt lookup, greedy and rejection-sampling
// verification (exactness of the output distribution), and whole generations on the CPU engine.
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "model/decode_variants.h"
#include "model/model.h"
#include "specdec/specdec.h"
#include "specdec/texts.h"

namespace ib::specdec {
namespace {

TEST(SpecdecAnalytic, ExpectedTokensPerStep) {
  EXPECT_NEAR(expected_tokens(0.8, 5), (1 - std::pow(0.8, 6)) / 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(expected_tokens(1.0, 5), 6.0);
  EXPECT_DOUBLE_EQ(expected_tokens(0.0, 5), 1.0);
  EXPECT_NEAR(predicted_speedup(0.8, 5, 0.05, 1.1), expected_tokens(0.8, 5) / 1.35, 1e-12);
}

TEST(SpecdecNgram, ProposesTheContinuationOfTheMostRecentMatch) {
  EXPECT_EQ(ngram_propose({1, 2, 3, 4, 1, 2}, 3, 1, 3), (std::vector<int32_t>{3, 4, 1}));
  // The most recent occurrence wins; longer n-grams first.
  EXPECT_EQ(ngram_propose({5, 9, 7, 5, 8, 7, 5}, 2, 1, 2), (std::vector<int32_t>{8, 7}));
  EXPECT_EQ(ngram_propose({7, 5, 1, 9, 5, 2, 9, 5}, 1, 1, 2), (std::vector<int32_t>{2}));
  EXPECT_TRUE(ngram_propose({1, 2, 3}, 4, 1, 3).empty());
  EXPECT_TRUE(ngram_propose({4, 4}, 4, 2, 3).empty());  // no earlier bigram
}

TEST(SpecdecTree, AnalyticTokensPerStep) {
  EXPECT_NEAR(expected_tokens_tree(0.7, {1, 1, 1, 1, 1}), expected_tokens(0.7, 5), 1e-12);
  // Three candidates at depth 1: reached with 1 - 0.3^3.
  EXPECT_NEAR(expected_tokens_tree(0.7, {3, 1}), 1 + 0.973 + 0.973 * 0.7, 1e-12);
  EXPECT_DOUBLE_EQ(expected_tokens_tree(0.0, {4, 4}), 1.0);
}

TEST(SpecdecTree, ParsesShapes) {
  EXPECT_EQ(parse_tree_shape("3x2x1"), (std::vector<int>{3, 2, 1}));
  EXPECT_EQ(parse_tree_shape("16"), (std::vector<int>{16}));
  for (const char* bad : {"", "x", "3x", "3xx2", "0x1", "17", "3,2", "a"}) EXPECT_TRUE(parse_tree_shape(bad).empty()) << bad;
}

TEST(SpecdecTree, NgramTreeMergesTheContinuationsOfSeveralOccurrences) {
  // The bigram (1, 2) occurred three times, followed by 3 4, by 3 5 and by 6 7.
  const std::vector<int32_t> h = {1, 2, 6, 7, 0, 1, 2, 3, 5, 0, 1, 2, 3, 4, 0, 1, 2};
  DraftTree t = ngram_propose_tree(h, 2, 3, 2, 2);
  // Most recent first: 3 4, then 3 5 shares the 3, then 6 7.
  EXPECT_EQ(t.tokens, (std::vector<int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(t.parents, (std::vector<int32_t>{-1, 0, 0, -1, 3}));
  EXPECT_EQ(t.max_depth(), 2);
  // One branch is prompt lookup's chain.
  DraftTree chain = ngram_propose_tree(h, 2, 1, 2, 2);
  EXPECT_EQ(chain.tokens, ngram_propose(h, 2, 2, 2));
  // A repeated continuation does not count as a new branch.
  DraftTree rep = ngram_propose_tree({9, 1, 0, 9, 1, 0, 9}, 1, 2, 1, 1);
  EXPECT_EQ(rep.tokens, (std::vector<int32_t>{1}));
}

TEST(SpecdecTree, GreedyVerificationWalksTheBranchTheTargetChose) {
  DraftTree t;
  t.add_path({4, 5, 6});
  t.add_path({4, 7});
  t.add_path({8});  // nodes: 0:4 1:5 2:6 3:7 4:8
  ASSERT_EQ(t.parents, (std::vector<int32_t>{-1, 0, 1, 0, -1}));
  std::vector<int32_t> e;
  std::vector<int> path;
  // Target: after root 4, after 4 -> 7, after 4 7 -> 9.
  EXPECT_EQ(verify_tree_greedy(t, {4, 7, 0, 0, 9, 0}, e, path), 2);
  EXPECT_EQ(e, (std::vector<int32_t>{4, 7, 9}));
  EXPECT_EQ(path, (std::vector<int>{0, 3}));
  e.clear();
  path.clear();
  EXPECT_EQ(verify_tree_greedy(t, {8, 0, 0, 0, 0, 2}, e, path), 1);  // the other root branch, then its bonus
  EXPECT_EQ(e, (std::vector<int32_t>{8, 2}));
  e.clear();
  path.clear();
  EXPECT_EQ(verify_tree_greedy(t, {3, 0, 0, 0, 0, 0}, e, path), 0);
  EXPECT_EQ(e, std::vector<int32_t>{3});
}

TEST(SpecdecVerify, GreedyKeepsTheAgreeingPrefixAndOneTargetToken) {
  std::vector<int32_t> e;
  EXPECT_EQ(verify_greedy({4, 5, 6}, {4, 5, 9, 1}, e), 2);
  EXPECT_EQ(e, (std::vector<int32_t>{4, 5, 9}));
  e.clear();
  EXPECT_EQ(verify_greedy({4, 5}, {4, 5, 7}, e), 2);  // all accepted: the bonus token
  EXPECT_EQ(e, (std::vector<int32_t>{4, 5, 7}));
  e.clear();
  EXPECT_EQ(verify_greedy({}, {3}, e), 0);
  EXPECT_EQ(e, std::vector<int32_t>{3});
}

TEST(SpecdecVerify, RejectionSamplingReproducesTheTargetDistribution) {
  const int V = 5, K = 2;
  const std::vector<float> p = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f,  0.25f, 0.25f, 0.0f, 0.5f, 0.0f,  0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  const std::vector<float> q = {0.5f, 0.1f, 0.1f, 0.1f, 0.2f,  0.0f, 0.6f, 0.2f, 0.2f, 0.0f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<double> first(V), second(V);
  const int trials = 200000;
  int seconds = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<int32_t> drafts = {draw(&q[0], V, u(rng)), draw(&q[V], V, u(rng))};
    std::vector<int32_t> e;
    verify_sampled(drafts, p, q, V, {u(rng), u(rng)}, {u(rng), u(rng), u(rng)}, e);
    ++first[static_cast<size_t>(e[0])];
    if (e.size() > 1) {
      ++second[static_cast<size_t>(e[1])];
      ++seconds;
    }
  }
  for (int t = 0; t < V; ++t) {
    EXPECT_NEAR(first[static_cast<size_t>(t)] / trials, p[static_cast<size_t>(t)], 0.005) << "first token " << t;
    EXPECT_NEAR(second[static_cast<size_t>(t)] / seconds, p[static_cast<size_t>(V + t)], 0.006) << "second token " << t;
  }
  (void)K;
}

struct Pair {
  model::ModelConfig c = *model::preset("tiny");
  std::unique_ptr<model::Model> target = model::make_cpu_model(c, *model::random_weights(c, 1));
  std::unique_ptr<model::Model> draft = model::make_cpu_model(c, *model::random_weights(c, 2));
  std::vector<int32_t> prompt = model::random_prompt(c.vocab, 24, 3);
  int ts = -1, ds = -1;
  void reset() {
    if (ts >= 0) target->release(ts);
    if (ds >= 0) draft->release(ds);
    ts = target->new_sequence(200);
    ds = draft->new_sequence(200);
    target->prefill(ts, prompt.data(), 23, 1, {});
    draft->prefill(ds, prompt.data(), 23, 1, {});
  }
};

TEST(SpecdecGenerate, GreedyOutputIsExactlyTheTargetsWhateverTheDrafter) {
  Pair m;
  m.reset();
  const auto reference = autoregressive_generate(*m.target, m.ts, m.prompt.back(), 60, {}, {}, false);
  auto truth = [&](int64_t i) { return reference[static_cast<size_t>(i)]; };
  for (DraftSource src : {DraftSource::Model, DraftSource::Controlled, DraftSource::Ngram})
    for (int k : {1, 3, 6}) {
      m.reset();
      SpecConfig cfg;
      cfg.k = k;
      cfg.source = src;
      cfg.alpha = 0.7;
      std::vector<int32_t> history = m.prompt;
      SpecStats st;
      const auto out = speculative_generate(*m.target, m.ts, src == DraftSource::Ngram ? nullptr : m.draft.get(), m.ds, m.prompt.back(), 60,
                                            cfg, truth, false, history, st);
      EXPECT_EQ(out, reference) << "source " << static_cast<int>(src) << " k " << k;
      EXPECT_EQ(m.target->length(m.ts), 23 + 60);
      EXPECT_EQ(st.emitted, 60);
    }
}

TEST(SpecdecGenerate, ControlledAcceptanceGivesTheTokensPerStepTheModelPredicts) {
  Pair m;
  m.reset();
  const auto reference = autoregressive_generate(*m.target, m.ts, m.prompt.back(), 150, {}, {}, false);
  auto truth = [&](int64_t i) { return reference[static_cast<size_t>(i)]; };
  for (double alpha : {0.0, 0.6, 1.0}) {
    m.reset();
    SpecConfig cfg;
    cfg.k = 4;
    cfg.source = DraftSource::Controlled;
    cfg.alpha = alpha;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    EXPECT_EQ(speculative_generate(*m.target, m.ts, m.draft.get(), m.ds, m.prompt.back(), 150, cfg, truth, false, history, st), reference);
    if (alpha == 0.0) {
      EXPECT_DOUBLE_EQ(st.tokens_per_step(), 1.0);
    }
    if (alpha == 1.0) {
      EXPECT_GT(st.tokens_per_step(), 4.8);  // K + 1 = 5 but for the short last step
    }
    if (alpha == 0.6) {
      EXPECT_NEAR(st.acceptance(), 0.6, 0.12);
      EXPECT_NEAR(st.tokens_per_step(), expected_tokens(0.6, 4), 0.4);
    }
  }
}

TEST(SpecdecGenerate, TreeVerificationOutputIsExactlyTheTargets) {
  Pair m;
  m.reset();
  const auto reference = autoregressive_generate(*m.target, m.ts, m.prompt.back(), 60, {}, {}, false);
  auto truth = [&](int64_t i) { return reference[static_cast<size_t>(i)]; };
  struct Case {
    DraftSource src;
    std::vector<int> shape;
    int branches;
  };
  for (const Case& cs : {Case{DraftSource::Controlled, {3, 2, 1}, 0}, Case{DraftSource::Controlled, {1, 1, 1, 1}, 0},
                         Case{DraftSource::Controlled, {2}, 0}, Case{DraftSource::Model, {2, 2}, 0}, Case{DraftSource::Ngram, {}, 3}}) {
    m.reset();
    SpecConfig cfg;
    cfg.k = 4;
    cfg.source = cs.src;
    cfg.alpha = 0.6;
    cfg.tree = cs.shape;
    cfg.branches = cs.branches;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    const auto out = speculative_generate_tree(*m.target, m.ts, cs.src == DraftSource::Ngram ? nullptr : m.draft.get(), m.ds,
                                               m.prompt.back(), 60, cfg, truth, false, history, st);
    EXPECT_EQ(out, reference) << "source " << static_cast<int>(cs.src) << " tree " << cs.shape.size();
    EXPECT_EQ(m.target->length(m.ts), 23 + 60);
    EXPECT_EQ(st.emitted, 60);
    if (cs.src != DraftSource::Ngram) {
      // The draft model's cache holds the prompt and every accepted token but the last.
      EXPECT_GE(m.draft->length(m.ds), 23 + 60 - 2);
      EXPECT_LE(m.draft->length(m.ds), 23 + 60);
    }
  }
}

TEST(SpecdecGenerate, ATreeAcceptsMoreTokensPerStepThanAChainOfTheSameDepth) {
  Pair m;
  m.reset();
  const auto reference = autoregressive_generate(*m.target, m.ts, m.prompt.back(), 150, {}, {}, false);
  auto truth = [&](int64_t i) { return reference[static_cast<size_t>(i)]; };
  auto run = [&](std::vector<int> shape) {
    m.reset();
    SpecConfig cfg;
    cfg.source = DraftSource::Controlled;
    cfg.alpha = 0.6;
    cfg.tree = shape;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    EXPECT_EQ(speculative_generate_tree(*m.target, m.ts, m.draft.get(), m.ds, m.prompt.back(), 150, cfg, truth, false, history, st), reference);
    return st;
  };
  const SpecStats chain = run({1, 1, 1, 1}), tree = run({3, 2, 1, 1});
  EXPECT_NEAR(chain.tokens_per_step(), expected_tokens_tree(0.6, {1, 1, 1, 1}), 0.4);
  EXPECT_NEAR(tree.tokens_per_step(), expected_tokens_tree(0.6, {3, 2, 1, 1}), 0.4);
  EXPECT_GT(tree.tokens_per_step(), chain.tokens_per_step() + 0.5);
  // Every step verifies the whole tree (fewer nodes only where the last steps cap the depth).
  EXPECT_LE(chain.tree_nodes, 4 * chain.steps);
  EXPECT_GE(chain.tree_nodes, 4 * chain.steps - 10);
  EXPECT_LE(tree.tree_nodes, (3 + 6 + 6 + 6) * tree.steps);
}

TEST(SpecdecGenerate, SampledVerificationMatchesTheTargetsSamplingDistribution) {
  Pair m;
  model::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 6;
  // The target's distribution of the first generated token.
  m.reset();
  std::vector<float> l(static_cast<size_t>(m.c.vocab)), p(l.size());
  {
    const int s = m.target->fork(m.ts);
    m.target->decode(&s, &m.prompt.back(), 1, {l.data()});
    model::sampling_distribution(l.data(), m.c.vocab, sp, p.data());
    m.target->release(s);
  }
  std::map<int32_t, int> seen;
  const int runs = 1500;
  for (int r = 0; r < runs; ++r) {
    m.target->truncate(m.ts, 23);
    m.draft->truncate(m.ds, 23);
    SpecConfig cfg;
    cfg.k = 2;
    cfg.source = DraftSource::Model;
    cfg.sampling = sp;
    cfg.seed = 1000 + static_cast<uint64_t>(r);
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    ++seen[speculative_generate(*m.target, m.ts, m.draft.get(), m.ds, m.prompt.back(), 2, cfg, {}, false, history, st)[0]];
  }
  double tv = 0;
  for (int t = 0; t < m.c.vocab; ++t) tv += std::fabs(seen[t] / static_cast<double>(runs) - p[static_cast<size_t>(t)]);
  EXPECT_LT(tv / 2, 0.06);  // 6 tokens, 1500 draws: sampling noise is ~0.03
}

TEST(SpecdecTexts, BundledTextsTokenizeAndRepeatThemselves) {
  for (const auto& name : text_names()) {
    TokenizedText t = load_text(name);
    EXPECT_GT(t.prompt.size(), 100u) << name;
    EXPECT_GT(t.output.size(), 100u) << name;
    // Prompt lookup finds most of the output in the prompt: that is what the drafter feeds on.
    std::vector<int32_t> h = t.prompt;
    int hits = 0;
    for (int32_t tok : t.output) {
      auto d = ngram_propose(h, 1, 1, 3);
      hits += !d.empty() && d[0] == tok;
      h.push_back(tok);
    }
    EXPECT_GT(hits, static_cast<int>(t.output.size()) / 2) << name;
  }
}

}  // namespace
}  // namespace ib::specdec
