// Google Benchmark: the CPU hot paths of constrained decoding (compile, index, per-step mask).
#include <cstring>
#include <random>

#include <benchmark/benchmark.h>

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/token_index.h"

namespace {

using namespace ib::constrain;

const char* kSchemas[] = {"tool_call", "tool_union", "person", "order", "calendar_event", "extraction", "tree"};

void BM_CompileDfa(benchmark::State& state) {
  const std::string name = kSchemas[state.range(0)];
  const std::string src = constraint_source(name);
  for (auto _ : state) benchmark::DoNotOptimize(compile_constraint(name, src, SchemaOptions{}));
  state.SetLabel(name);
}
BENCHMARK(BM_CompileDfa)->DenseRange(0, 6)->Unit(benchmark::kMillisecond);

void BM_PrecomputedIndex(benchmark::State& state) {
  const std::string name = kSchemas[state.range(0)];
  auto c = compile_constraint(name, constraint_source(name), SchemaOptions{});
  auto vocab = load_vocabulary("gpt2");
  auto trie = vocab_trie(vocab);  // held, as the experiment holds it: the index finds it cached
  for (auto _ : state) benchmark::DoNotOptimize(TokenMaskIndex(c.dfa, vocab));
  state.SetLabel(name + " gpt2");
}
BENCHMARK(BM_PrecomputedIndex)->DenseRange(0, 6)->Unit(benchmark::kMillisecond);

// The token classes alone (what the lazy masker builds up front), and the Moore classes over all
// byte strings up to the longest token that they replaced.
void BM_TokenClasses(benchmark::State& state) {
  const std::string name = kSchemas[state.range(0)];
  auto c = compile_constraint(name, constraint_source(name), SchemaOptions{});
  auto vocab = load_vocabulary("gpt2");
  auto trie = vocab_trie(vocab);
  const TextProfile text = text_profile(*c.dfa);
  for (auto _ : state) benchmark::DoNotOptimize(token_classes(*c.dfa, *trie, text));
  state.SetLabel(name + " gpt2");
}
BENCHMARK(BM_TokenClasses)->DenseRange(0, 6)->Unit(benchmark::kMillisecond);

void BM_MooreClasses(benchmark::State& state) {
  const std::string name = kSchemas[state.range(0)];
  auto c = compile_constraint(name, constraint_source(name), SchemaOptions{});
  auto vocab = load_vocabulary("gpt2");
  for (auto _ : state) benchmark::DoNotOptimize(mask_classes(*c.dfa, vocab->max_token_bytes));
  state.SetLabel(name + " gpt2");
}
BENCHMARK(BM_MooreClasses)->DenseRange(0, 6)->Unit(benchmark::kMillisecond);

// One decode step with the precomputed index: mask lookup + copy to the staging bitmask + advance.
void BM_MaskStepPrecomputed(benchmark::State& state) {
  auto c = compile_constraint("order", constraint_source("order"), SchemaOptions{});
  auto vocab = load_vocabulary("gpt2");
  TokenMaskIndex index(c.dfa, vocab);
  std::mt19937_64 rng(1);
  auto doc = tokenize_greedy(random_document(*c.dfa, distance_to_accept(*c.dfa), c.dfa->start, rng), *c.dfa, c.dfa->start,
                             *vocab_trie(vocab));
  std::vector<uint32_t> staging(index.words());
  size_t i = 0;
  int32_t s = c.dfa->start;
  for (auto _ : state) {
    std::memcpy(staging.data(), index.mask(s), staging.size() * 4);
    s = advance(*c.dfa, *vocab, s, doc[i]);
    if (++i == doc.size()) {
      i = 0;
      s = c.dfa->start;
    }
    benchmark::DoNotOptimize(staging.data());
  }
}
BENCHMARK(BM_MaskStepPrecomputed);

}  // namespace
