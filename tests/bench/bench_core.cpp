// Google Benchmark micro-benchmarks of CPU hot paths of the harness itself.
#include <random>

#include <benchmark/benchmark.h>

#include "core/spec.h"
#include "core/stats.h"
#include "numerics/sgemm.h"

namespace {

void BM_BootstrapSpeedup(benchmark::State& state) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> a(1.0, 0.02), b(0.5, 0.02);
  std::vector<double> x, y;
  for (int i = 0; i < state.range(0); ++i) {
    x.push_back(a(rng));
    y.push_back(b(rng));
  }
  for (auto _ : state) benchmark::DoNotOptimize(ib::bootstrap_speedup(x, y, 7));
}
BENCHMARK(BM_BootstrapSpeedup)->Arg(10)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_StoppingRuleAdd(benchmark::State& state) {
  std::mt19937_64 rng(2);
  std::normal_distribution<double> d(1e-3, 1e-5);
  for (auto _ : state) {
    ib::StoppingRule r({10, 0.0, 0.0, 1e9});
    double wall = 0;
    for (int i = 0; i < 1000; ++i) {
      double s = d(rng);
      wall += s;
      if (r.add(s, wall)) break;
    }
    benchmark::DoNotOptimize(r.samples());
  }
}
BENCHMARK(BM_StoppingRuleAdd);

void BM_ParseSpec(benchmark::State& state) {
  const std::string text =
      "experiments:\n  - {name: a, kind: ceiling, variants: [memcpy, sgemm], bytes: [1MiB, 2MiB, 4MiB], m: [1, 2, 3]}\n";
  ib::SpecOptions opt;
  for (auto _ : state) benchmark::DoNotOptimize(ib::parse_spec(text, "bench", opt));
}
BENCHMARK(BM_ParseSpec);

void BM_Sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  for (auto _ : state) ib::sgemm_blocked(n, n, n, a.data(), n, b.data(), n, c.data(), n);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sgemm)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
