// Speculative decoding: the analytic model, prompt lookup, trees, greedy and rejection-sampling
// verification (exactness of the output distribution). Whole generations on the CPU engine:
// test_specdec_generate.cpp.
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "specdec/specdec.h"

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

}  // namespace
}  // namespace ib::specdec
