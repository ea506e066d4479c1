// The CPU transformer engine: published shapes, the KV cache against recomputation, batching,
// fork/truncate, the sliding window, sampling, weight scales over 32 layers, safetensors; the
// engine's matmul option and its `matmul` key (decode and the other kinds that run the engine).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/registry.h"
#include "core/spec.h"
#include "model/model.h"
#include "model/model_choice.h"

namespace ib::model {
namespace {

ModelConfig P(const std::string& name) {
  auto c = preset(name);
  EXPECT_TRUE(c.has_value()) << name;
  return *c;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    r += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(e / r);
}

// Logits of the last position after prefilling `tokens` into a fresh sequence.
std::vector<float> last_logits(Model& m, const std::vector<int32_t>& tokens) {
  std::vector<float> l(static_cast<size_t>(m.config().vocab));
  const int s = m.new_sequence(static_cast<int>(tokens.size()) + 1);
  StepOutput out;
  out.logits = l.data();
  m.prefill(s, tokens.data(), static_cast<int>(tokens.size()), 1, out);
  m.release(s);
  return l;
}

TEST(EngineOptions, MatmulIsCublasUnlessGemvIsAsked) {
  EXPECT_EQ(EngineOptions{}.matmul, Matmul::Cublas);
  EXPECT_EQ(parse_matmul("cublas"), Matmul::Cublas);
  EXPECT_EQ(parse_matmul("gemv"), Matmul::Gemv);
  EXPECT_EQ(matmul_names(), (std::vector<std::string>{"cublas", "gemv"}));
  for (Matmul m : {Matmul::Cublas, Matmul::Gemv}) EXPECT_EQ(parse_matmul(to_string(m)), m);
  for (const char* bad : {"GEMV", "", "cutlass", "gemv "}) {
    try {
      parse_matmul(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("cublas, gemv"), std::string::npos) << e.what();
    }
  }
}

// `matmul` is a key of every kind that runs the engine (decode, specdec, prefix-system-prompt,
// prefix-mixed, constrain-generate): the CUDA variants read it and the CPU ones leave it out (the
// CPU engine has one matmul: a sweep would repeat its rows); a bad value is a spec error at its
// file:line naming the key. `cuda` lists CUDA variants of the kind, `cpu` one CPU variant.
void expect_matmul_on_cuda_variants_only(const std::string& kind, const std::string& cuda, const std::string& cpu) {
  SCOPED_TRACE(kind);
  const KindInfo* k = Registry::instance().kind(kind);
  ASSERT_NE(k, nullptr);
  const auto key = std::find_if(k->keys.begin(), k->keys.end(), [](const KeySpec& ks) { return ks.name == "matmul"; });
  ASSERT_NE(key, k->keys.end());
  EXPECT_EQ(key->type, ParamType::Enum);
  EXPECT_EQ(key->choices, matmul_names());
  ASSERT_TRUE(key->default_value.has_value());
  EXPECT_EQ(std::get<std::string>(*key->default_value), "cublas");
  for (const VariantDecl& v : k->variants) {
    const bool reads = std::find(v.uses.begin(), v.uses.end(), "matmul") != v.uses.end();
    EXPECT_FALSE(v.uses.empty()) << v.name;  // listed explicitly, so that CPU variants can leave matmul out
    EXPECT_EQ(reads, v.backend == Backend::Cuda) << v.name;
  }

  auto spec = [&](const std::string& variant, const std::string& matmul, Backend b) {
    SpecOptions o;
    o.backend = b;
    return parse_spec("version: 1\nexperiments:\n  - name: mm\n    kind: " + kind + "\n    variants: [" + variant +
                          "]\n    matmul: " + matmul + "\n",
                      "t.yaml", o);
  };
  auto matmul_axis = [](const Spec& s) -> const Axis* {
    for (const Axis& a : s.experiments.at(0).axes)
      if (a.key == "matmul") return &a;
    return nullptr;
  };
  const Spec on_cuda = spec(cuda, "[cublas, gemv]", Backend::Cuda);
  const Axis* a = matmul_axis(on_cuda);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->values.size(), 2u);
  EXPECT_EQ(std::get<std::string>(a->values[1]), "gemv");
  EXPECT_EQ(matmul_axis(spec(cpu, "[cublas, gemv]", Backend::Cpu)), nullptr);
  for (Backend b : {Backend::Cuda, Backend::Cpu}) {  // validated on either backend
    try {
      spec(b == Backend::Cuda ? cuda : cpu, "cutlass", b);
      ADD_FAILURE() << "matmul: cutlass was accepted";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("t.yaml:6:"), std::string::npos) << m;  // file:line:col of the value
      EXPECT_NE(m.find("matmul"), std::string::npos) << m;
      EXPECT_NE(m.find("cublas, gemv"), std::string::npos) << m;
    }
  }
}

TEST(DecodeKind, MatmulIsAnAxisOfTheCudaVariantsOnly) {
  expect_matmul_on_cuda_variants_only("decode", "decode_step, decode_step_eager", "cpu_decode_step");
}

// The other kinds that build the CUDA engine: specdec's target and draft (its verify passes of
// k + 1 <= 8 rows are the GEMV's shapes), the prefix caches' engine, constrain-generate's writer.
TEST(EngineKinds, MatmulIsAnAxisOfTheirCudaVariantsOnly) {
  expect_matmul_on_cuda_variants_only("specdec", "autoregressive, draft_model, ngram, draft_tree, ngram_tree, lookahead",
                                      "cpu_draft_model");
  expect_matmul_on_cuda_variants_only("prefix-system-prompt", "none, block_hash, radix", "cpu_block_hash");
  expect_matmul_on_cuda_variants_only("prefix-mixed", "none, block_hash, radix", "cpu_radix");
  expect_matmul_on_cuda_variants_only("constrain-generate", "constrained, unconstrained_retry", "cpu_unconstrained_retry");
}

TEST(ModelConfig, PresetsHaveThePublishedParameterCounts) {
  EXPECT_EQ(P("llama2-7b").parameters(), 6738415616);
  EXPECT_EQ(P("qwen2-0.5b").parameters(), 494032768);
  EXPECT_EQ(P("qwen2-7b").parameters(), 7615616512);
  EXPECT_EQ(P("mistral-7b").parameters(), 7241732096);
  EXPECT_EQ(P("llama2-7b").kv_elems_per_token() * 2, 524288);  // 0.5 MiB per token in bf16
  EXPECT_EQ(P("llama3-8b").parameters(), 8030261248);          // Meta-Llama-3-8B
  EXPECT_EQ(P("llama3-8b").rope_scaling.type, "llama3");
}

TEST(CpuModel, DecodeStepsMatchARecomputationWithoutTheCache) {
  for (const char* name : {"tiny", "tiny-gqa"}) {
    const ModelConfig c = P(name);
    auto m = make_cpu_model(c, *random_weights(c, 3));
    std::vector<int32_t> tokens = random_prompt(c.vocab, 20, 9);
    const int s = m->new_sequence(40);
    std::vector<float> l(static_cast<size_t>(c.vocab));
    int32_t next = 0;
    StepOutput out;
    out.logits = l.data();
    out.next = &next;
    m->prefill(s, tokens.data(), 20, 1, out);
    for (int step = 0; step < 10; ++step) {
      tokens.push_back(next);
      m->decode(&s, &tokens.back(), 1, out);
      EXPECT_LT(rel_l2(l, last_logits(*m, tokens)), 1e-4) << name << " step " << step;
    }
    EXPECT_EQ(m->length(s), 30);
  }
}

TEST(CpuModel, ABatchOfDifferentLengthsDecodesLikeEachAlone) {
  const ModelConfig c = P("tiny-gqa");
  auto m = make_cpu_model(c, *random_weights(c, 4));
  std::vector<std::vector<int32_t>> prompts = {random_prompt(c.vocab, 5, 1), random_prompt(c.vocab, 33, 2),
                                               random_prompt(c.vocab, 70, 3)};
  std::vector<int> seqs;
  for (auto& p : prompts) {
    seqs.push_back(m->new_sequence(80));
    m->prefill(seqs.back(), p.data(), static_cast<int>(p.size()), 1, {});
  }
  const std::vector<int32_t> in = {7, 8, 9};
  std::vector<float> batched(3 * static_cast<size_t>(c.vocab));
  StepOutput out;
  out.logits = batched.data();
  m->decode(seqs.data(), in.data(), 3, out);
  for (int b = 0; b < 3; ++b) {
    auto full = prompts[static_cast<size_t>(b)];
    full.push_back(in[static_cast<size_t>(b)]);
    std::vector<float> row(batched.begin() + b * c.vocab, batched.begin() + (b + 1) * c.vocab);
    EXPECT_LT(rel_l2(row, last_logits(*m, full)), 1e-4) << "row " << b;
  }
}

// Several sequences' tokens in one pass (batched verification): the same logits and caches as
// one prefill per sequence, here and through the base class's per-sequence loop.
TEST(CpuModel, PrefillBatchEqualsOnePrefillPerSequence) {
  const ModelConfig c = P("tiny-gqa");
  auto m = make_cpu_model(c, *random_weights(c, 4));
  const auto a = random_prompt(c.vocab, 20, 1), b = random_prompt(c.vocab, 9, 2);
  const auto more_a = random_prompt(c.vocab, 3, 3), more_b = random_prompt(c.vocab, 6, 4);
  const size_t V = static_cast<size_t>(c.vocab);
  // Reference: sequences 0 and 1 separately.
  const int ra = m->new_sequence(64), rb = m->new_sequence(64);
  m->prefill(ra, a.data(), 20, 1, {});
  m->prefill(rb, b.data(), 9, 1, {});
  std::vector<float> want(9 * V);
  m->prefill(ra, more_a.data(), 3, 3, {want.data()});
  m->prefill(rb, more_b.data(), 6, 6, {want.data() + 3 * V});
  // One pass.
  const int sa = m->new_sequence(64), sb = m->new_sequence(64);
  m->prefill(sa, a.data(), 20, 1, {});
  m->prefill(sb, b.data(), 9, 1, {});
  const int seqs[2] = {sa, sb}, counts[2] = {3, 6};
  std::vector<int32_t> tokens(more_a);
  tokens.insert(tokens.end(), more_b.begin(), more_b.end());
  std::vector<float> got(9 * V);
  m->prefill_batch(seqs, counts, 2, tokens.data(), {got.data()});
  EXPECT_LT(rel_l2(got, want), 1e-5);
  EXPECT_EQ(m->length(sa), 23);
  EXPECT_EQ(m->length(sb), 15);
  // The caches continue alike.
  const int32_t next[2] = {5, 7};
  std::vector<float> d1(2 * V), d2(2 * V);
  const int rs[2] = {ra, rb};
  m->decode(rs, next, 2, {d1.data()});
  m->decode(seqs, next, 2, {d2.data()});
  EXPECT_LT(rel_l2(d2, d1), 1e-5);
  // The base class's loop gives the same rows.
  std::vector<float> loop(9 * V);
  m->truncate(sa, 20);
  m->truncate(sb, 9);
  m->Model::prefill_batch_rows(seqs, counts, 2, tokens.data(), {loop.data()}, counts);
  EXPECT_LT(rel_l2(loop, want), 1e-5);
  // last_only: each sequence's last row alone, [2] rows, from the engine's pass and the base loop.
  std::vector<float> last_want(want.begin() + 2 * V, want.begin() + 3 * V);
  last_want.insert(last_want.end(), want.begin() + 8 * V, want.end());
  for (bool base : {false, true}) {
    m->truncate(sa, 20);
    m->truncate(sb, 9);
    std::vector<float> last(2 * V, -1.0f);
    std::vector<int32_t> picked(2, -1);
    StepOutput o{last.data(), picked.data()};
    const int ones[2] = {1, 1};
    if (base)
      m->Model::prefill_batch_rows(seqs, counts, 2, tokens.data(), o, ones);
    else
      m->prefill_batch(seqs, counts, 2, tokens.data(), o, true);
    EXPECT_LT(rel_l2(last, last_want), 1e-5) << base;
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(picked[i],
                std::max_element(last_want.begin() + i * V, last_want.begin() + (i + 1) * V) - (last_want.begin() + i * V));
    EXPECT_EQ(m->length(sb), 15);
  }
  // Per-sequence logit rows (a speculating request beside a prompt chunk): the first's last row,
  // the second's last four, in order, from the engine's pass and the base loop.
  std::vector<float> mixed_want(want.begin() + 2 * V, want.begin() + 3 * V);
  mixed_want.insert(mixed_want.end(), want.begin() + 5 * V, want.end());
  const int mixed_rows[2] = {1, 4};
  for (bool base : {false, true}) {
    m->truncate(sa, 20);
    m->truncate(sb, 9);
    std::vector<float> mixed(5 * V, -1.0f);
    if (base)
      m->Model::prefill_batch_rows(seqs, counts, 2, tokens.data(), {mixed.data()}, mixed_rows);
    else
      m->prefill_batch_rows(seqs, counts, 2, tokens.data(), {mixed.data()}, mixed_rows);
    EXPECT_LT(rel_l2(mixed, mixed_want), 1e-5) << base;
  }
  const int too_many[2] = {1, 7};
  EXPECT_THROW(m->prefill_batch_rows(seqs, counts, 2, tokens.data(), {}, too_many), std::invalid_argument);
  EXPECT_THROW(m->prefill_batch(seqs, std::vector<int>{3, 0}.data(), 2, tokens.data(), {}), std::invalid_argument);
  const int twice[2] = {sa, sa};
  EXPECT_THROW(m->prefill_batch(twice, counts, 2, tokens.data(), {}), std::invalid_argument);
}

TEST(CpuModel, ForkAndTruncate) {
  const ModelConfig c = P("tiny");
  auto m = make_cpu_model(c, *random_weights(c, 5));
  const auto prompt = random_prompt(c.vocab, 12, 5);
  const int a = m->new_sequence(32);
  m->prefill(a, prompt.data(), 12, 1, {});
  const int b = m->fork(a);
  EXPECT_NE(a, b);
  EXPECT_EQ(m->length(b), 12);
  std::vector<float> la(static_cast<size_t>(c.vocab)), lb(la.size());
  const int32_t x = 3, y = 4;
  m->decode(&a, &x, 1, {la.data()});
  m->decode(&b, &y, 1, {lb.data()});  // the fork diverges
  auto pa = prompt, pb = prompt;
  pa.push_back(x);
  pb.push_back(y);
  EXPECT_LT(rel_l2(la, last_logits(*m, pa)), 1e-4);
  EXPECT_LT(rel_l2(lb, last_logits(*m, pb)), 1e-4);
  // Roll a back (a rejected draft) and decode y instead: the same as b.
  m->truncate(a, 12);
  m->decode(&a, &y, 1, {la.data()});
  EXPECT_LT(rel_l2(la, lb), 1e-6);
  EXPECT_THROW(m->truncate(a, 14), std::invalid_argument);
  m->release(b);
  EXPECT_THROW(m->length(b), std::invalid_argument);
  EXPECT_EQ(m->fork(a), b);  // ids are reused
}

// A token tree scores every branch as the chain along it would: the logits of each node equal
// those of prefilling its root-to-node path, and keeping one path leaves the cache that path's
// prefill would have left.
TEST(CpuModel, TreeVerificationScoresEachBranchLikeItsChain) {
  const ModelConfig c = P("tiny");
  auto m = make_cpu_model(c, *random_weights(c, 8));
  const auto prompt = random_prompt(c.vocab, 10, 8);
  const size_t V = static_cast<size_t>(c.vocab);
  // Nodes 0..6 with parents -1, 0, 0, 1, 1, 2, 3: root 0; 1 and 2 under it; 3 and 4 under 1; 5
  // under 2; 6 under 3. One call adds nodes 0-4, a second extends the tree with 5 and 6.
  const std::vector<int32_t> tok = {5, 9, 11, 20, 21, 9, 33};
  const std::vector<int32_t> parent = {-1, 0, 0, 1, 1, 2, 3};
  const int t = m->new_sequence(40);
  m->prefill(t, prompt.data(), 10, 1, {});
  std::vector<float> logits(7 * V);
  m->prefill_tree(t, tok.data(), parent.data(), 5, {logits.data()});
  m->prefill_tree(t, tok.data() + 5, parent.data() + 5, 2, {logits.data() + 5 * V});
  EXPECT_EQ(m->length(t), 17);
  for (int node = 0; node < 7; ++node) {
    std::vector<int32_t> path;
    for (int x = node; x >= 0; x = parent[static_cast<size_t>(x)]) path.insert(path.begin(), tok[static_cast<size_t>(x)]);
    auto chain = prompt;
    chain.insert(chain.end(), path.begin(), path.end());
    const std::vector<float> want = last_logits(*m, chain);
    const std::vector<float> got(logits.begin() + static_cast<std::ptrdiff_t>(node * V),
                                 logits.begin() + static_cast<std::ptrdiff_t>((node + 1) * V));
    EXPECT_LT(rel_l2(got, want), 1e-5) << "node " << node;
  }
  // While the tree is open the sequence refuses ordinary passes.
  const int32_t x = 3;
  EXPECT_THROW(m->decode(&t, &x, 1, {}), std::logic_error);
  EXPECT_THROW(m->fork(t), std::logic_error);
  EXPECT_THROW(m->keep_tree_path(t, {0, 2, 3}), std::invalid_argument);  // 3 is not a child of 2
  EXPECT_THROW(m->keep_tree_path(t, {1}), std::invalid_argument);        // 1 is not at depth 1
  // Keep 0 -> 1 -> 3 -> 6: the cache is the chain's, so the next decode step matches it.
  m->keep_tree_path(t, {0, 1, 3, 6});
  EXPECT_EQ(m->length(t), 14);
  std::vector<float> next(V);
  m->decode(&t, &x, 1, {next.data()});
  auto chain = prompt;
  for (int32_t y : {5, 9, 20, 33, 3}) chain.push_back(y);
  EXPECT_LT(rel_l2(next, last_logits(*m, chain)), 1e-5);
  // Truncating closes a tree; truncating into it is refused.
  const int32_t one[] = {7}, root[] = {-1};
  m->prefill_tree(t, one, root, 1, {});
  EXPECT_THROW(m->truncate(t, 16), std::invalid_argument);
  m->truncate(t, 15);
  m->decode(&t, &x, 1, {});
  EXPECT_EQ(m->length(t), 16);
}

TEST(CpuModel, CopyCacheReusesAPrefixComputedByAnotherSequence) {
  const ModelConfig c = P("tiny-gqa");
  auto m = make_cpu_model(c, *random_weights(c, 9));
  const auto shared = random_prompt(c.vocab, 32, 1);
  const int a = m->new_sequence(64);
  m->prefill(a, shared.data(), 32, 1, {});
  auto full = shared;
  for (int32_t t : {5, 6, 7}) full.push_back(t);
  const int b = m->new_sequence(64);
  m->copy_cache(a, b, 0, 16);   // two blocks of 8 ...
  m->copy_cache(a, b, 16, 16);  // ... from the same holder, in order
  EXPECT_EQ(m->length(b), 32);
  std::vector<float> l(static_cast<size_t>(c.vocab));
  m->prefill(b, full.data() + 32, 3, 1, {l.data()});  // only the suffix is computed
  EXPECT_LT(rel_l2(l, last_logits(*m, full)), 1e-4);
  EXPECT_THROW(m->copy_cache(a, b, 40, 4), std::invalid_argument);  // past a's length
}

TEST(CpuModel, SlidingWindowBoundsHowFarBackATokenIsSeen) {
  const ModelConfig c = P("tiny-gqa");  // window 48, 2 layers: a token reaches 2 × 47 positions ahead
  ASSERT_EQ(c.sliding_window, 48);
  auto m = make_cpu_model(c, *random_weights(c, 6));
  auto t = random_prompt(c.vocab, 120, 6);
  auto u = t;
  u[0] = (u[0] + 1) % c.vocab;
  auto prefix = [](const std::vector<int32_t>& v, size_t n) {
    return std::vector<int32_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  };
  EXPECT_GT(rel_l2(last_logits(*m, prefix(t, 30)), last_logits(*m, prefix(u, 30))), 1e-3);  // within reach
  EXPECT_EQ(last_logits(*m, prefix(t, 110)), last_logits(*m, prefix(u, 110)));              // out of reach: bit-identical
}

TEST(CpuModel, ThirtyTwoLayersOfRandomWeightsGivePeakedButNotOneHotDistributions) {
  const ModelConfig c = P("deep-narrow");
  auto m = make_cpu_model(c, *random_weights(c, 7));
  for (uint64_t seed : {1, 2, 3}) {
    const auto l = last_logits(*m, random_prompt(c.vocab, 48, seed));
    const float mx = *std::max_element(l.begin(), l.end());
    double z = 0, ent = 0;
    for (float x : l) {
      ASSERT_TRUE(std::isfinite(x));
      z += std::exp(static_cast<double>(x - mx));
    }
    double pmax = 0;
    for (float x : l) {
      const double p = std::exp(static_cast<double>(x - mx)) / z;
      pmax = std::max(pmax, p);
      if (p > 0) ent -= p * std::log(p);
    }
    EXPECT_GT(ent, 1.0) << "near one-hot";  // ln 32000 = 10.4
    EXPECT_LT(ent, 0.9 * std::log(static_cast<double>(c.vocab))) << "flat";
    EXPECT_LT(pmax, 0.9);
  }
}

TEST(Sampling, GreedyTopKTopPAndTheDistribution) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  SamplingParams g;
  EXPECT_EQ(sample_token(logits.data(), 5, g, 0.7f), 1);  // ties: the smaller index
  SamplingParams t;
  t.temperature = 1.0f;
  t.top_k = 1;
  EXPECT_EQ(sample_token(logits.data(), 5, t, 0.99f), 1);
  std::vector<float> p(5);
  t.top_k = 0;
  sampling_distribution(logits.data(), 5, t, p.data());
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0), 1.0, 1e-6);
  EXPECT_FLOAT_EQ(p[1], p[3]);
  EXPECT_NEAR(p[2] / p[1], std::exp(-1.0), 1e-6);
  t.top_p = 0.5f;  // tokens 1 and 3 hold 2·e³/Σ ≈ 0.67 ≥ 0.5; token 1 alone holds 0.33
  sampling_distribution(logits.data(), 5, t, p.data());
  EXPECT_FLOAT_EQ(p[1], 0.5f);
  EXPECT_FLOAT_EQ(p[3], 0.5f);
  EXPECT_EQ(p[0] + p[2] + p[4], 0.0f);
  // Draws follow the distribution.
  t.top_p = 1.0f;
  t.temperature = 2.0f;
  sampling_distribution(logits.data(), 5, t, p.data());
  std::vector<int> count(5);
  for (int i = 0; i < 20000; ++i)
    ++count[static_cast<size_t>(sample_token(logits.data(), 5, t, sample_uniform(11, static_cast<uint64_t>(i), 0)))];
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(count[static_cast<size_t>(k)] / 20000.0, p[static_cast<size_t>(k)], 0.015) << k;
}

// Without a top-k cut the sampler sorts only the prefix the draw reaches: the same token as the
// definition (sort everything, cut at top_p, walk the cumulative distribution).
TEST(Sampling, UncutSamplingPicksTheTokenAFullSortPicks) {
  const int V = 3000;
  std::vector<float> logits(static_cast<size_t>(V));
  for (int i = 0; i < V; ++i) {
    float x = 6.0f * random_uniform(5, static_cast<uint64_t>(i));
    if (i % 3 == 0) x = std::round(x);  // ties, broken by index
    logits[static_cast<size_t>(i)] = x;
  }
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  });
  int deep = 0;
  for (float t : {0.3f, 1.0f, 3.0f})
    for (float top_p : {1.0f, 0.9f, 0.5f}) {
      SamplingParams sp;
      sp.temperature = t;
      sp.top_p = top_p;
      std::vector<double> pr(static_cast<size_t>(V));
      double sum = 0;
      for (int i = 0; i < V; ++i)
        sum += pr[static_cast<size_t>(i)] =
            std::exp((logits[static_cast<size_t>(order[static_cast<size_t>(i)])] - logits[static_cast<size_t>(order[0])]) / t);
      size_t n = 0;
      double kept = 0;
      while (n < pr.size() && (kept < top_p * sum || top_p >= 1.0f)) kept += pr[n++];
      for (int k = 0; k < 500; ++k) {
        const float u = sample_uniform(3, static_cast<uint64_t>(k), 0);
        double cum = 0;
        size_t i = 0;
        while (i + 1 < n && u * kept >= cum + pr[i]) cum += pr[i++];
        deep += i >= 64;
        EXPECT_EQ(sample_token(logits.data(), V, sp, u), order[i]) << "T " << t << " top_p " << top_p << " u " << u;
      }
    }
  EXPECT_GT(deep, 100);  // draws beyond the first sorted prefix were exercised
}

// A self-speculative draft: the first layers of a model read through its own weight source.
TEST(FirstLayers, TheDraftIsTheTargetsFirstLayersWithItsHead) {
  const ModelConfig c = P("tiny-gqa");
  auto rw = random_weights(c, 8);
  const ModelConfig dc = first_layers_config(c, 1);
  EXPECT_EQ(dc.layers, 1);
  EXPECT_EQ(dc.name, "tiny-gqa:1");
  EXPECT_THROW(first_layers_config(c, 2), InputError);
  EXPECT_THROW(first_layers_config(c, 0), InputError);
  auto fl = first_layers(*rw, 1);
  // Every tensor the draft reads is the full model's tensor of that name, including the
  // residual-branch scales the full depth chose (a fresh 1-layer random model differs).
  auto fresh = random_weights(dc, 8);
  bool differs = false;
  for (const auto& s : tensor_specs(dc)) {
    std::vector<float> a(static_cast<size_t>(s.elems())), b(a.size()), f(a.size());
    fl->read(s, a.data());
    rw->read(s, b.data());
    fresh->read(s, f.data());
    EXPECT_EQ(a, b) << s.name;
    differs = differs || a != f;
    EXPECT_EQ(fl->tensor_seed(s), rw->tensor_seed(s)) << s.name;
    EXPECT_EQ(fl->tensor_scale(s), rw->tensor_scale(s)) << s.name;
  }
  EXPECT_TRUE(differs);
  // The draft runs: its logits are finite, and not the full model's.
  auto draft = make_cpu_model(dc, *fl);
  auto full = make_cpu_model(c, *rw);
  const auto prompt = random_prompt(c.vocab, 9, 1);
  const auto dl = last_logits(*draft, prompt), tl = last_logits(*full, prompt);
  for (float x : dl) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NE(dl, tl);
}

TEST(Safetensors, ACheckpointOfTheRandomWeightsGivesTheSameModel) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ib_ckpt_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const ModelConfig c = P("tiny-gqa");
  auto rw = random_weights(c, 8);
  std::vector<std::pair<TensorSpec, std::vector<float>>> tensors;
  for (const auto& s : tensor_specs(c)) {
    std::vector<float> v(static_cast<size_t>(s.elems()));
    rw->read(s, v.data());
    tensors.emplace_back(s, std::move(v));
  }
  write_safetensors((dir / "model.safetensors").string(), tensors);
  std::ofstream(dir / "config.json") << R"({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 160, "vocab_size": 600,
    "tie_word_embeddings": true, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "use_sliding_window": true,
    "sliding_window": 48, "max_window_layers": 0, "max_position_embeddings": 2048, "hidden_act": "silu"})";
  ModelConfig hc = config_from_hf(dir.string());
  EXPECT_EQ(hc.parameters(), c.parameters());
  EXPECT_TRUE(hc.qkv_bias);
  EXPECT_EQ(hc.sliding_window, 48);
  auto a = make_cpu_model(c, *rw);
  auto b = make_cpu_model(hc, *safetensors_weights(hc, dir.string()));
  const auto prompt = random_prompt(c.vocab, 9, 1);
  EXPECT_EQ(last_logits(*a, prompt), last_logits(*b, prompt));

  // A config whose shapes the file does not have: the error names the tensor and both shapes.
  ModelConfig wrong = hc;
  wrong.mlp = 128;
  try {
    safetensors_weights(wrong, dir.string());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[160, 64]"), std::string::npos) << e.what();
  }
  ModelConfig untied = hc;
  untied.tied_embeddings = false;
  try {
    safetensors_weights(untied, dir.string());
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'lm_head.weight' is missing"), std::string::npos) << e.what();
  }
  // A NaN in a weight: refused at load naming the file, the tensor and the element.
  tensors[3].second[5] = std::numeric_limits<float>::quiet_NaN();
  write_safetensors((dir / "model.safetensors").string(), tensors);
  try {
    make_cpu_model(hc, *safetensors_weights(hc, dir.string()));
    ADD_FAILURE() << "a NaN weight was loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + tensors[3].first.name + "' holds a non-finite value (nan) at element 5"),
              std::string::npos)
        << e.what();
  }
  fs::remove(dir / "config.json");
  EXPECT_THROW(config_from_hf(dir.string()), InputError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ib::model
