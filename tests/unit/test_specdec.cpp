// Speculative decoding: the analytic model, prompt lookup, greedy and rejection-sampling
// verification (exactness of the output distribution), and whole generations on the CPU engine.
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "model/model.h"
#include "model/model_choice.h"
#include "specdec/lookahead.h"
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
  const std::vector<float> p = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f, 0.25f, 0.25f, 0.0f, 0.5f, 0.0f, 0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  const std::vector<float> q = {0.5f, 0.1f, 0.1f, 0.1f, 0.2f, 0.0f, 0.6f, 0.2f, 0.2f, 0.0f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<double> first(V), second(V);
  const int trials = 200000;
  int seconds = 0;
  const UniformSource uniform = [&] { return u(rng); };
  for (int t = 0; t < trials; ++t) {
    std::vector<int32_t> drafts = {draw(&q[0], V, u(rng)), draw(&q[V], V, u(rng))};
    std::vector<int32_t> e;
    verify_sampled(drafts, p, q, V, uniform, e);
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

// A toy language model over V tokens: the distribution after a prefix, a function of the prefix.
std::vector<float> toy_distribution(const std::vector<int32_t>& prefix, int V, uint64_t salt, double sharp) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  std::vector<float> d(static_cast<size_t>(V));
  double sum = 0;
  for (int i = 0; i < V; ++i) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    const double w = std::exp(sharp * static_cast<double>(h >> 11) / 9007199254740992.0);
    sum += d[static_cast<size_t>(i)] = static_cast<float>(w);
  }
  d[static_cast<size_t>((prefix.size() + salt) % static_cast<size_t>(V))] = 0.0f;  // a zero: the supports differ
  sum = 0;
  for (float x : d) sum += x;
  for (float& x : d) x = static_cast<float>(x / sum);
  return d;
}

// Tree rejection sampling: draws a 3x2 tree per trial (children without replacement from the
// draft, or fixed deterministic candidates), verifies it, and continues with the target alone
// when fewer than two tokens came out. The joint law of the first two tokens must be the
// target's: P(x1) · P(x2 | x1).
void check_tree_sampling(bool deterministic) {
  const int V = 6, trials = 300000;
  std::mt19937 rng(deterministic ? 11 : 7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const UniformSource uniform = [&] { return u(rng); };
  auto p_after = [&](const std::vector<int32_t>& prefix) { return toy_distribution(prefix, V, 1, 2.5); };
  auto q_after = [&](const std::vector<int32_t>& prefix) { return toy_distribution(prefix, V, 2, 2.5); };
  std::vector<double> seen(V * V, 0.0);
  int64_t depth2 = 0;
  for (int t = 0; t < trials; ++t) {
    DraftTree tree;
    std::vector<std::vector<int32_t>> prefix = {{}};  // per row: the node's tokens
    std::vector<std::vector<float>> q = {q_after({})};
    std::vector<int32_t> first = deterministic ? std::vector<int32_t>{4, 1, 2} : draw_distinct(q[0].data(), V, 3, uniform);
    for (int32_t a : first) {
      tree.tokens.push_back(a);
      tree.parents.push_back(-1);
      prefix.push_back({a});
      q.push_back(q_after({a}));
    }
    for (int i = 0, n = tree.size(); i < n; ++i) {
      const std::vector<int32_t> second =
          deterministic ? std::vector<int32_t>{static_cast<int32_t>((i + 3) % V), static_cast<int32_t>((i + 1) % V)}
                        : draw_distinct(q[static_cast<size_t>(i) + 1].data(), V, 2, uniform);
      for (int32_t b : second) {
        tree.tokens.push_back(b);
        tree.parents.push_back(i);
        prefix.push_back({tree.tokens[static_cast<size_t>(i)], b});
        q.push_back({});
      }
    }
    std::vector<std::vector<float>> p(prefix.size());
    const DistributionRow target = [&](int row) {
      auto& r = p[static_cast<size_t>(row)];
      if (r.empty()) r = p_after(prefix[static_cast<size_t>(row)]);
      return r.data();
    };
    DistributionRow draft;
    if (!deterministic) draft = [&](int row) { return q[static_cast<size_t>(row)].data(); };
    std::vector<int32_t> e;
    std::vector<int> path;
    verify_tree_sampled(tree, V, target, draft, uniform, e, path);
    ASSERT_EQ(e.size(), path.size() + 1);
    if (e.size() >= 2)
      ++depth2;
    else
      e.push_back(draw(p_after({e[0]}).data(), V, u(rng)));  // the next step's token
    ++seen[static_cast<size_t>(e[0] * V + e[1])];
  }
  double tv = 0;
  const std::vector<float> p0 = p_after({});
  for (int a = 0; a < V; ++a) {
    const std::vector<float> p1 = p_after({a});
    for (int b = 0; b < V; ++b)
      tv += std::fabs(seen[static_cast<size_t>(a * V + b)] / trials -
                      static_cast<double>(p0[static_cast<size_t>(a)]) * p1[static_cast<size_t>(b)]);
  }
  // 36 cells, 300k draws: sampling noise ~0.004. Skipping the residual (accept-or-draw-from-p)
  // or keeping the draft row after a rejection moves it by several times that.
  EXPECT_LT(tv / 2, 0.012) << (deterministic ? "deterministic candidates" : "draft samples");
  EXPECT_GT(depth2, trials / 10) << "the trees should often accept two tokens";
}

TEST(SpecdecVerify, TreeRejectionSamplingReproducesTheTargetDistribution) { check_tree_sampling(false); }
TEST(SpecdecVerify, TreeRejectionSamplingOfDeterministicCandidatesIsExact) { check_tree_sampling(true); }

TEST(SpecdecVerify, DrawDistinctSamplesWithoutReplacement) {
  const std::vector<float> q = {0.5f, 0.0f, 0.3f, 0.2f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const UniformSource uniform = [&] { return u(rng); };
  std::map<std::pair<int32_t, int32_t>, int> pairs;
  const int trials = 100000;
  for (int t = 0; t < trials; ++t) {
    const auto d = draw_distinct(q.data(), 4, 8, uniform);
    ASSERT_EQ(d.size(), 3u);  // only three tokens have mass
    EXPECT_NE(d[0], d[1]);
    EXPECT_NE(d[1], d[2]);
    EXPECT_NE(d[0], d[2]);
    ++pairs[{d[0], d[1]}];
  }
  // P(first a, second b) = q_a · q_b / (1 − q_a).
  EXPECT_NEAR((pairs[{0, 2}] / static_cast<double>(trials)), 0.5 * 0.3 / 0.5, 0.006);
  EXPECT_NEAR((pairs[{3, 0}] / static_cast<double>(trials)), 0.2 * 0.5 / 0.8, 0.006);
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
      const auto out = speculative_generate(*m.target, m.ts, src == DraftSource::Ngram ? nullptr : m.draft.get(), m.ds,
                                            m.prompt.back(), 60, cfg, truth, false, history, st);
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
    EXPECT_EQ(speculative_generate(*m.target, m.ts, m.draft.get(), m.ds, m.prompt.back(), 150, cfg, truth, false, history, st),
              reference);
    if (alpha == 0.0) {
      EXPECT_DOUBLE_EQ(st.tokens_per_step(), 1.0);
    }
    if (alpha == 1.0) {
      EXPECT_GT(st.tokens_per_step(), 4.8);  // K + 1 = 5 but for the short last step
    }
    if (alpha == 0.6) {
      EXPECT_NEAR(st.acceptance(), 0.6, 0.12);
      EXPECT_NEAR(st.tokens_per_step(), expected_tokens(0.6, 4), 0.4);
      // Acceptance per position (vLLM's): position i is accepted with its i − 1 predecessors, α^i.
      ASSERT_EQ(st.drafted_at.size(), 4u);
      EXPECT_NEAR(st.acceptance_at(0), 0.6, 0.15);
      EXPECT_NEAR(st.acceptance_at(1), 0.36, 0.15);
      EXPECT_GT(st.acceptance_at(0), st.acceptance_at(1));
      EXPECT_GE(st.acceptance_at(1), st.acceptance_at(2));
      EXPECT_GE(st.acceptance_at(2), st.acceptance_at(3));
    }
    if (alpha == 0.0) {
      EXPECT_EQ(st.acceptance_at(0), 0.0);
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
    int dynamic = 0;
  };
  for (const Case& cs :
       {Case{DraftSource::Controlled, {3, 2, 1}, 0}, Case{DraftSource::Controlled, {1, 1, 1, 1}, 0},
        Case{DraftSource::Controlled, {2}, 0}, Case{DraftSource::Model, {2, 2}, 0}, Case{DraftSource::Ngram, {}, 3},
        Case{DraftSource::Model, {3, 1, 1, 1}, 0, 7}, Case{DraftSource::Model, {2, 1}, 0, 1}}) {
    m.reset();
    SpecConfig cfg;
    cfg.k = 4;
    cfg.source = cs.src;
    cfg.alpha = 0.6;
    cfg.tree = cs.shape;
    cfg.branches = cs.branches;
    cfg.dynamic_nodes = cs.dynamic;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    const auto out = speculative_generate_tree(*m.target, m.ts, cs.src == DraftSource::Ngram ? nullptr : m.draft.get(), m.ds,
                                               m.prompt.back(), 60, cfg, truth, false, history, st);
    EXPECT_EQ(out, reference) << "source " << static_cast<int>(cs.src) << " tree " << cs.shape.size();
    EXPECT_EQ(m.target->length(m.ts), 23 + 60);
    EXPECT_EQ(st.emitted, 60);
    if (cs.dynamic > 0) {
      EXPECT_LE(st.tree_nodes, static_cast<int64_t>(cs.dynamic) * st.steps);  // the node budget
      EXPECT_GE(st.tree_nodes, static_cast<int64_t>(cs.dynamic) * (st.steps - 3));
    }
    if (cs.src != DraftSource::Ngram) {
      // The draft model's cache holds the prompt and every accepted token but the last.
      EXPECT_GE(m.draft->length(m.ds), 23 + 60 - 2);
      EXPECT_LE(m.draft->length(m.ds), 23 + 60);
    }
  }
}

// A draft that is the target itself agrees on every greedy token: the walk goes deep into the
// tree every step, which exercises keeping the accepted path in both caches (static and dynamic
// trees, including nodes the dynamic tree never expanded).
TEST(SpecdecGenerate, ADraftEqualToTheTargetIsAcceptedDeepInStaticAndDynamicTrees) {
  Pair m;
  m.draft = model::make_cpu_model(m.c, *model::random_weights(m.c, 1));  // the target's weights
  m.reset();
  const auto reference = autoregressive_generate(*m.target, m.ts, m.prompt.back(), 40, {}, {}, false);
  for (int dynamic : {0, 6, 12}) {
    m.reset();
    SpecConfig cfg;
    cfg.source = DraftSource::Model;
    cfg.tree = {3, 2, 1, 1};
    cfg.k = 4;
    cfg.dynamic_nodes = dynamic;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    const auto out =
        speculative_generate_tree(*m.target, m.ts, m.draft.get(), m.ds, m.prompt.back(), 40, cfg, {}, false, history, st);
    EXPECT_EQ(out, reference) << "dynamic " << dynamic;
    // A static tree holds the draft's greedy chain: depth 4 + the bonus token every step (the
    // last steps are capped). A dynamic one keeps the most confident nodes, which need not
    // reach that deep.
    EXPECT_GT(st.tokens_per_step(), dynamic == 0 ? 4.5 : 2.5) << "dynamic " << dynamic;
    EXPECT_EQ(m.target->length(m.ts), 23 + 40);
    // The draft has seen every emitted token but the last, and nothing else.
    EXPECT_GE(m.draft->length(m.ds), 23 + 40 - 2) << "dynamic " << dynamic;
    EXPECT_LE(m.draft->length(m.ds), 23 + 40) << "dynamic " << dynamic;
    if (dynamic > 0) {
      EXPECT_LE(st.tree_nodes, static_cast<int64_t>(dynamic) * st.steps);
    }
  }
}

// A batch of sequences stepping together (one verify pass per step for all of them): each
// sequence's output is its own greedy trajectory, whatever the drafter, and every cache ends at
// prompt + output.
TEST(SpecdecGenerate, BatchedSpeculationGivesEachSequenceItsOwnTokens) {
  const model::ModelConfig c = *model::preset("tiny");
  auto target = model::make_cpu_model(c, *model::random_weights(c, 1));
  auto draft = model::make_cpu_model(c, *model::random_weights(c, 2));
  const int B = 3, n = 30;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> ts, ds;
  std::vector<int32_t> lasts;
  auto reset = [&] {
    for (int b = 0; b < B; ++b) {
      target->truncate(ts[static_cast<size_t>(b)], 0);
      draft->truncate(ds[static_cast<size_t>(b)], 0);
      const auto& p = prompts[static_cast<size_t>(b)];
      target->prefill(ts[static_cast<size_t>(b)], p.data(), static_cast<int>(p.size()) - 1, 1, {});
      draft->prefill(ds[static_cast<size_t>(b)], p.data(), static_cast<int>(p.size()) - 1, 1, {});
    }
  };
  for (int b = 0; b < B; ++b) {
    prompts.push_back(model::random_prompt(c.vocab, 12 + 5 * b, 40 + static_cast<uint64_t>(b)));  // different lengths
    ts.push_back(target->new_sequence(128));
    ds.push_back(draft->new_sequence(128));
    lasts.push_back(prompts.back().back());
  }
  reset();
  const auto reference = autoregressive_generate_batch(*target, ts, lasts, n);
  for (int b = 0; b < B; ++b) {  // the batch decodes each sequence as it would alone
    const int solo = target->new_sequence(128);
    const auto& p = prompts[static_cast<size_t>(b)];
    target->prefill(solo, p.data(), static_cast<int>(p.size()) - 1, 1, {});
    EXPECT_EQ(autoregressive_generate(*target, solo, p.back(), n, {}, {}, false), reference[static_cast<size_t>(b)]) << b;
    target->release(solo);
  }
  std::vector<std::function<int32_t(int64_t)>> truths;
  for (int b = 0; b < B; ++b)
    truths.push_back(
        [&, b](int64_t i) { return reference[static_cast<size_t>(b)][static_cast<size_t>(std::min<int64_t>(i, n - 1))]; });
  for (DraftSource src : {DraftSource::Controlled, DraftSource::Model}) {
    reset();
    SpecConfig cfg;
    cfg.k = 4;
    cfg.source = src;
    cfg.alpha = 0.8;
    SpecStats st;
    const auto out = speculative_generate_batch(*target, ts, *draft, ds, lasts, n, cfg, truths, st);
    EXPECT_EQ(out, reference) << static_cast<int>(src);
    for (int b = 0; b < B; ++b) {
      const int plen = static_cast<int>(prompts[static_cast<size_t>(b)].size());
      EXPECT_EQ(target->length(ts[static_cast<size_t>(b)]), plen - 1 + n);
      EXPECT_GE(draft->length(ds[static_cast<size_t>(b)]), plen - 1 + n - 2);
      EXPECT_LE(draft->length(ds[static_cast<size_t>(b)]), plen - 1 + n);
    }
    EXPECT_EQ(st.emitted, static_cast<int64_t>(B) * n);
    EXPECT_LT(st.passes, st.steps);  // one verify pass served several sequences
    if (src == DraftSource::Controlled) {
      EXPECT_GT(st.tokens_per_step(), 2.5);  // E(0.8, 4) = 3.36; the last steps are capped
    }
  }
}

// Batched sampled speculation: each sequence's chain is verified by rejection sampling against
// its own rows of the batched pass, with its own stream of uniforms. The distributions the
// verification used are the target's own at every position (a fresh prefill), and each
// sequence's first token follows the target's sampling distribution over many seeds (counted in
// six bins: the target's five most likely tokens and the rest). The draft (other weights) is
// accepted part of the time, so a wrong q or p row moves the first token's distribution.
TEST(SpecdecGenerate, BatchedSampledVerificationFollowsEachSequencesTarget) {
  const model::ModelConfig c = *model::preset("tiny");
  auto target = model::make_cpu_model(c, *model::random_weights(c, 1));
  auto draft = model::make_cpu_model(c, *model::random_weights(c, 2));
  const int B = 2, vocab = c.vocab;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> ts, ds;
  std::vector<int32_t> lasts;
  for (int b = 0; b < B; ++b) {
    prompts.push_back(model::random_prompt(vocab, 10 + 5 * b, 60 + static_cast<uint64_t>(b)));
    ts.push_back(target->new_sequence(128));
    ds.push_back(draft->new_sequence(128));
    lasts.push_back(prompts.back().back());
    const auto& p = prompts.back();
    target->prefill(ts.back(), p.data(), static_cast<int>(p.size()) - 1, 1, {});
    draft->prefill(ds.back(), p.data(), static_cast<int>(p.size()) - 1, 1, {});
  }
  auto reset = [&] {
    for (int b = 0; b < B; ++b) {
      const int keep = static_cast<int>(prompts[static_cast<size_t>(b)].size()) - 1;
      target->truncate(ts[static_cast<size_t>(b)], keep);
      draft->truncate(ds[static_cast<size_t>(b)], keep);
    }
  };
  SpecConfig cfg;
  cfg.k = 3;
  cfg.source = DraftSource::Model;
  cfg.sampling.temperature = 1.5f;
  // The target's distribution after position i of a sequence, from one prefill.
  auto fresh_rows = [&](const std::vector<int32_t>& prompt, const std::vector<int32_t>& out, int n) {
    std::vector<int32_t> full = prompt;
    full.insert(full.end(), out.begin(), out.begin() + (n - 1));
    std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(vocab)), rows(logits.size());
    const int s = target->new_sequence(static_cast<int>(full.size()) + 1);
    model::StepOutput o;
    o.logits = logits.data();
    target->prefill(s, full.data(), static_cast<int>(full.size()), n, o);
    target->release(s);
    for (int i = 0; i < n; ++i)
      model::sampling_distribution(&logits[static_cast<size_t>(i) * static_cast<size_t>(vocab)], vocab, cfg.sampling,
                                   &rows[static_cast<size_t>(i) * static_cast<size_t>(vocab)]);
    return rows;
  };
  {
    const int n = 20;
    std::vector<std::vector<std::vector<float>>> used;
    cfg.record_batch = &used;
    SpecStats st;
    const auto out = speculative_generate_batch(*target, ts, *draft, ds, lasts, n, cfg, {}, st);
    cfg.record_batch = nullptr;
    ASSERT_EQ(used.size(), static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) {
      const auto& prompt = prompts[static_cast<size_t>(b)];
      EXPECT_EQ(target->length(ts[static_cast<size_t>(b)]), static_cast<int>(prompt.size()) - 1 + n);
      ASSERT_EQ(used[static_cast<size_t>(b)].size(), static_cast<size_t>(n));
      const auto rows = fresh_rows(prompt, out[static_cast<size_t>(b)], n);
      for (int i = 0; i < n; ++i) {
        const float* want = &rows[static_cast<size_t>(i) * static_cast<size_t>(vocab)];
        double tv = 0;
        for (int x = 0; x < vocab; ++x)
          tv += std::fabs(static_cast<double>(want[x]) -
                          used[static_cast<size_t>(b)][static_cast<size_t>(i)][static_cast<size_t>(x)]);
        EXPECT_LT(tv / 2, 1e-4) << b << " " << i;
      }
    }
    EXPECT_GT(st.accepted, 0);
    EXPECT_LT(st.accepted, st.drafted);  // both branches of the rejection sampling ran
  }
  // The first token of each sequence over many seeds, K = 3 drafts each.
  const int runs = 4000;
  std::vector<std::vector<float>> p0;
  std::vector<std::vector<int32_t>> top(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) {
    p0.push_back(fresh_rows(prompts[static_cast<size_t>(b)], {}, 1));
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int x = 0; x < vocab; ++x) idx[static_cast<size_t>(x)] = x;
    const auto& p = p0.back();
    std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                      [&](int32_t u, int32_t v) { return p[static_cast<size_t>(u)] > p[static_cast<size_t>(v)]; });
    top[static_cast<size_t>(b)].assign(idx.begin(), idx.begin() + 5);
  }
  auto bin = [&](int b, int32_t t) {
    const auto& tb = top[static_cast<size_t>(b)];
    return static_cast<int>(std::find(tb.begin(), tb.end(), t) - tb.begin());  // 5: the rest
  };
  std::vector<std::vector<double>> freq(static_cast<size_t>(B), std::vector<double>(6, 0.0));
  for (int r = 0; r < runs; ++r) {
    reset();
    cfg.seed = cfg.sampling.seed = 1000 + static_cast<uint64_t>(r);
    SpecStats st;
    const auto out = speculative_generate_batch(*target, ts, *draft, ds, lasts, 4, cfg, {}, st);
    for (int b = 0; b < B; ++b)
      freq[static_cast<size_t>(b)][static_cast<size_t>(bin(b, out[static_cast<size_t>(b)][0]))] += 1.0 / runs;
  }
  reset();
  for (int b = 0; b < B; ++b) {
    std::vector<double> want(6, 0.0);
    for (int x = 0; x < vocab; ++x) want[static_cast<size_t>(bin(b, x))] += p0[static_cast<size_t>(b)][static_cast<size_t>(x)];
    double tv = 0;
    for (int i = 0; i < 6; ++i)
      tv += std::fabs(freq[static_cast<size_t>(b)][static_cast<size_t>(i)] - want[static_cast<size_t>(i)]);
    EXPECT_LT(tv / 2, 0.03) << "sequence " << b;
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
    EXPECT_EQ(
        speculative_generate_tree(*m.target, m.ts, m.draft.get(), m.ds, m.prompt.back(), 150, cfg, truth, false, history, st),
        reference);
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

// Whole generations with sampled verification (chain and tree, draft model and n-gram): the
// first generated token follows the target's sampling distribution, and the distributions the
// verification used (record_target) are the target's own at every emitted position.
TEST(SpecdecGenerate, SampledVerificationMatchesTheTargetsSamplingDistribution) {
  Pair m;
  // A prompt that repeats itself, so that prompt lookup proposes something.
  m.prompt.resize(8);
  for (int r = 0; r < 2; ++r) m.prompt.insert(m.prompt.end(), m.prompt.begin(), m.prompt.begin() + 8);
  model::SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 6;
  // The target's distribution of the first generated token.
  m.reset();
  const int V = m.c.vocab;
  std::vector<float> l(static_cast<size_t>(V)), p(l.size());
  {
    const int s = m.target->fork(m.ts);
    m.target->decode(&s, &m.prompt.back(), 1, {l.data()});
    model::sampling_distribution(l.data(), V, sp, p.data());
    m.target->release(s);
  }
  struct Case {
    const char* name;
    DraftSource src;
    std::vector<int> tree;
  };
  for (const Case& cs :
       {Case{"chain, draft model", DraftSource::Model, {}}, Case{"tree 3x2, draft model", DraftSource::Model, {3, 2}},
        Case{"chain, n-gram", DraftSource::Ngram, {}}, Case{"tree, n-gram", DraftSource::Ngram, {1}}}) {
    std::map<int32_t, int> seen;
    const int runs = 1500;
    SpecStats st;
    std::vector<std::vector<float>> used;
    std::vector<int32_t> last_out;
    for (int r = 0; r < runs; ++r) {
      m.target->truncate(m.ts, 23);
      m.draft->truncate(m.ds, 23);
      SpecConfig cfg;
      cfg.k = 2;
      cfg.source = cs.src;
      cfg.sampling = sp;
      cfg.tree = cs.tree;
      cfg.branches = 3;
      cfg.seed = 1000 + static_cast<uint64_t>(r);
      if (r == runs - 1) cfg.record_target = &used;
      std::vector<int32_t> history = m.prompt;
      model::Model* draft = cs.src == DraftSource::Ngram ? nullptr : m.draft.get();
      const bool tree = !cs.tree.empty();
      last_out = tree ? speculative_generate_tree(*m.target, m.ts, draft, m.ds, m.prompt.back(), 3, cfg, {}, false, history, st)
                      : speculative_generate(*m.target, m.ts, draft, m.ds, m.prompt.back(), 3, cfg, {}, false, history, st);
      ++seen[last_out[0]];
      ASSERT_EQ(m.target->length(m.ts), 23 + 3) << cs.name;
    }
    double tv = 0;
    for (int t = 0; t < V; ++t) tv += std::fabs(seen[t] / static_cast<double>(runs) - p[static_cast<size_t>(t)]);
    EXPECT_LT(tv / 2, 0.06) << cs.name;  // 6 tokens, 1500 draws: sampling noise is ~0.03
    EXPECT_GT(st.tested, 0) << cs.name << ": verification never tested a candidate";
    // The last run's recorded rows against a fresh prefill of prompt + output.
    ASSERT_GE(used.size(), 3u) << cs.name;
    const int fs = m.target->new_sequence(64);
    std::vector<int32_t> seq = m.prompt;
    seq.insert(seq.end(), last_out.begin(), last_out.end() - 1);
    std::vector<float> fresh(3 * static_cast<size_t>(V)), pf(static_cast<size_t>(V));
    m.target->prefill(fs, seq.data(), static_cast<int>(seq.size()), 3, {fresh.data()});
    m.target->release(fs);
    for (int i = 0; i < 3; ++i) {
      model::sampling_distribution(&fresh[static_cast<size_t>(i) * V], V, sp, pf.data());
      double d = 0;
      for (int t = 0; t < V; ++t)
        d += std::fabs(pf[static_cast<size_t>(t)] - used[static_cast<size_t>(i)][static_cast<size_t>(t)]);
      EXPECT_LT(d / 2, 1e-4) << cs.name << " position " << i;
      EXPECT_GT(pf[static_cast<size_t>(last_out[static_cast<size_t>(i)])], 0.0f) << cs.name << " position " << i;
    }
  }
}

TEST(SpecdecLookahead, PoolKeepsTheMostRecentDistinctNgramsPerFirstToken) {
  NgramPool pool(3, 2);
  const int32_t a[] = {1, 2}, b[] = {3, 4}, c[] = {5, 6};
  pool.add(7, a);
  pool.add(7, b);
  pool.add(7, a);  // already there: moves to the front, not added twice
  EXPECT_EQ(pool.size(), 2);
  ASSERT_EQ(pool.candidates(7).size(), 2u);
  EXPECT_EQ(pool.candidates(7)[0], (std::vector<int32_t>{1, 2}));
  pool.add(7, c);  // past capacity the oldest ({3, 4}) goes
  EXPECT_EQ(pool.size(), 2);
  EXPECT_EQ(pool.candidates(7)[0], (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(pool.candidates(7)[1], (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(pool.candidates(8).empty());
  // From a history: every 3-gram, then only those ending in the fresh tokens.
  NgramPool h(3, 4);
  std::vector<int32_t> hist = {10, 11, 12, 13};
  h.add_history(hist, 4);
  EXPECT_EQ(h.size(), 2);  // 10 11 12, 11 12 13
  hist.push_back(14);
  h.add_history(hist, 1);
  EXPECT_EQ(h.size(), 3);
  EXPECT_EQ(h.candidates(12)[0], (std::vector<int32_t>{13, 14}));
}

TEST(SpecdecLookahead, LongestVerificationTakesTheDeepestPathOfTheTargetsChoices) {
  // Root's children: node 0 (5) and node 2 (5) both match; node 0's path stops at node 1, node 2's
  // goes on through 3 and 4. A first-match walk would stop after two tokens.
  DraftTree t;
  t.tokens = {5, 9, 5, 6, 7, 6};
  t.parents = {-1, 0, -1, 2, 3, 0};
  // choice[0] after the root, choice[1 + i] after node i.
  const std::vector<int32_t> choice = {5, 6, 0, 6, 7, 8, 0};
  std::vector<int32_t> emitted;
  std::vector<int> path;
  EXPECT_EQ(verify_tree_longest(t, choice, emitted, path, 10), 3);
  EXPECT_EQ(path, (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(emitted, (std::vector<int32_t>{5, 6, 7, 8}));
  // Capped at depth 2 the tie between nodes 5 and 3 goes to the lower index.
  emitted.clear();
  path.clear();
  EXPECT_EQ(verify_tree_longest(t, choice, emitted, path, 2), 2);
  EXPECT_EQ(path, (std::vector<int>{2, 3}));
  EXPECT_EQ(emitted, (std::vector<int32_t>{5, 6, 7}));
  // Nothing matches: the target's own token alone.
  emitted.clear();
  path.clear();
  EXPECT_EQ(verify_tree_longest(t, {1, 0, 0, 0, 0, 0, 0}, emitted, path, 10), 0);
  EXPECT_EQ(emitted, (std::vector<int32_t>{1}));
}

// Lookahead decoding on the tiny model: whatever the window, n-gram size and pool, the output is
// the target's greedy decoding and the cache ends at prompt + output.
TEST(SpecdecLookahead, OutputIsExactlyTheTargets) {
  Pair m;
  m.reset();
  const auto reference = autoregressive_generate(*m.target, m.ts, m.prompt.back(), 80, {}, {}, false);
  struct Case {
    int w, n, g;
    bool prompt_pool;
  };
  for (const Case& cs :
       {Case{5, 4, 5, false}, Case{1, 2, 0, false}, Case{4, 2, 3, false}, Case{7, 5, 7, true}, Case{3, 3, 0, true}}) {
    m.reset();
    LookaheadConfig cfg;
    cfg.window = cs.w;
    cfg.ngram = cs.n;
    cfg.candidates = cs.g;
    cfg.prompt_pool = cs.prompt_pool;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    const auto out = lookahead_generate(*m.target, m.ts, m.prompt.back(), 80, cfg, {}, false, history, st);
    EXPECT_EQ(out, reference) << "W " << cs.w << " N " << cs.n << " G " << cs.g;
    EXPECT_EQ(m.target->length(m.ts), 23 + 80);
    EXPECT_EQ(history.size(), m.prompt.size() + 80);
    EXPECT_EQ(st.emitted, 80);
    EXPECT_EQ(st.accepted + st.steps, 80);  // every step: its accepted tokens and the target's own
    EXPECT_LE(st.tree_nodes, static_cast<int64_t>(lookahead_max_nodes(cfg)) * st.steps);
    EXPECT_GT(st.pool_ngrams, 0);
  }
}

// A forced text that repeats its prompt: with the prompt's n-grams in the pool the verification
// branch accepts several tokens a step (prompt lookup inside lookahead decoding); without them
// the window's model n-grams cannot predict a text the model does not write.
TEST(SpecdecLookahead, PromptPoolAcceptsARepeatedText) {
  Pair m;
  std::vector<int32_t> text = m.prompt;
  for (int r = 0; r < 3; ++r) text.insert(text.end(), m.prompt.begin(), m.prompt.end());
  auto truth = [&](int64_t i) { return text[static_cast<size_t>(i)]; };
  for (bool prompt_pool : {false, true}) {
    m.reset();
    LookaheadConfig cfg;
    cfg.prompt_pool = prompt_pool;
    std::vector<int32_t> history = m.prompt;
    SpecStats st;
    const auto out = lookahead_generate(*m.target, m.ts, m.prompt.back(), 60, cfg, truth, true, history, st);
    EXPECT_EQ(out, std::vector<int32_t>(text.begin(), text.begin() + 60));
    EXPECT_EQ(m.target->length(m.ts), 23 + 60);
    if (prompt_pool) {
      EXPECT_GT(st.tokens_per_step(), 3.0);
      EXPECT_GT(st.pool_accepted, 30);
    } else {
      EXPECT_LT(st.tokens_per_step(), 1.5);
    }
  }
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
