// Google Benchmark: what a prefix-cache hit costs the engine as the cached prefix grows (the
// serving issue's bar: a hit's TTFT grows with the cached length only by attention's own reads).
// One request's suffix of 32 tokens after a cached prefix of L tokens, three ways, on the CPU
// engine (deep-narrow: 32 layers, 32 KiB of K/V per token; random weights):
//   resident  the suffix prefilled onto the sequence that holds the prefix, then truncated back:
//             the floor, attention reading L cached positions and nothing else;
//   shared    a paged engine's hit: share_prefix (the prefix's blocks by reference count, the
//             partial block copied on the first write) + the suffix, then release;
//   copied    a contiguous engine's hit: a new sequence, copy_cache of the L positions, the suffix.
// shared should track resident at every L; copied adds a copy that grows with L.
#include <benchmark/benchmark.h>

#include "model/model.h"
#include "model/model_choice.h"

namespace {

using namespace ib::model;
constexpr int kSuffix = 32;

void BM_PrefixHitSuffix(benchmark::State& state) {
  const int how = static_cast<int>(state.range(0));  // 0 resident, 1 shared, 2 copied
  const int cached = static_cast<int>(state.range(1));
  const ModelConfig c = *preset("deep-narrow");
  const auto w = random_weights(c, 1);
  auto m = make_cpu_model(c, *w);
  if (how == 1) m->enable_paged_kv((cached + kSuffix) / 16 + 8, 16);
  const std::vector<int32_t> prefix = random_prompt(c.vocab, cached, 2), suffix = random_prompt(c.vocab, kSuffix, 3);
  const int holder = m->new_sequence(cached + kSuffix);
  m->prefill(holder, prefix.data(), cached, 1, {});
  std::vector<int32_t> next(1);
  StepOutput out;
  out.next = next.data();
  for (auto _ : state) {
    int seq = holder;
    if (how == 1) {
      seq = m->share_prefix(holder, cached, cached + kSuffix);
    } else if (how == 2) {
      seq = m->new_sequence(cached + kSuffix);
      m->copy_cache(holder, seq, 0, cached);
    }
    m->prefill(seq, suffix.data(), kSuffix, 1, out);
    benchmark::DoNotOptimize(next[0]);
    if (seq == holder)
      m->truncate(holder, cached);
    else
      m->release(seq);
  }
  static const char* names[] = {"resident", "shared", "copied"};
  state.SetLabel(std::string(names[how]) + ", 32-token suffix after the cached prefix");
}
BENCHMARK(BM_PrefixHitSuffix)
    ->ArgsProduct({{0, 1, 2}, {256, 1024, 3072}})
    ->ArgNames({"how", "cached"})
    ->Unit(benchmark::kMillisecond);

}  // namespace
