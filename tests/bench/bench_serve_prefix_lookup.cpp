// Google Benchmark: what the serving scheduler's prefix caching costs per request besides the
// model, as the number of cached prompts grows. N prompts share a 256-token system prompt, each
// with its own 32-token tail, all kept (finished) on a paged tiny model (16-token blocks); the
// timed request repeats one of them, so it finds all but its last token cached, prefills one
// token, and on finishing is found covered by the kept one: the lookup and the finish's
// comparison against every kept prompt are the scheduler's part, one 1-token pass the model's.
// A scan of the kept prompts grows with N × the shared length; the block index should not.
#include <benchmark/benchmark.h>

#include "model/model.h"
#include "model/model_choice.h"
#include "serve/scheduler.h"

namespace {

using namespace ib;

serve::Request prompt_with_tail(int64_t id, int tail_seed) {
  serve::Request r;
  r.id = id;
  r.max_tokens = 1;
  for (int i = 0; i < 256; ++i) r.prompt.push_back(static_cast<int32_t>((i * 7 + 3) % 512));
  // The tail's first two tokens spell tail_seed in base 512 (the tiny model's vocabulary): unique.
  r.prompt.push_back(static_cast<int32_t>(tail_seed / 512));
  r.prompt.push_back(static_cast<int32_t>(tail_seed % 512));
  for (int i = 2; i < 32; ++i) r.prompt.push_back(static_cast<int32_t>((tail_seed * 131 + i * 17) % 512));
  return r;
}

void BM_ServePrefixLookup(benchmark::State& state) {
  const int cached = static_cast<int>(state.range(0));
  const model::ModelConfig c = *model::preset("tiny");
  const auto w = model::random_weights(c, 1);
  auto m = model::make_cpu_model(c, *w);
  m->enable_paged_kv(16 + 3 * (cached + 2), 16);
  serve::SchedulerOptions o;
  o.batching = serve::Batching::Continuous;
  o.chunked_prefill = true;
  o.token_budget = 512;
  o.prefix_caching = true;
  serve::Scheduler s(*m, o);
  int64_t id = 0;
  for (int k = 0; k < cached; ++k) {
    s.submit(prompt_with_tail(id++, k));
    while (s.has_work()) s.step();
  }
  for (auto _ : state) {
    s.submit(prompt_with_tail(id++, cached / 2));
    while (s.has_work()) s.step();
  }
  if (s.cached_prefixes() != cached) state.SkipWithError("the kept prompts changed");
  state.SetLabel("a 288-token prompt found cached among N kept ones; 1 token prefilled");
}
BENCHMARK(BM_ServePrefixLookup)->ArgName("cached")->Arg(10)->Arg(100)->Arg(1000)->Arg(4000)->Unit(benchmark::kMicrosecond);

}  // namespace
