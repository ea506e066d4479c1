// Speculative decoding's whole generations on the CPU engine (a target and a drafter of random
// weights): greedy and sampled outputs exactly the target's, chains, static and dynamic trees,
// batches, lookahead decoding, and the bundled texts that repeat themselves.
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "model/model.h"
#include "model/model_choice.h"
#include "specdec/lookahead.h"
#include "specdec/specdec.h"
#include "specdec/texts.h"

namespace ib::specdec {
namespace {

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
