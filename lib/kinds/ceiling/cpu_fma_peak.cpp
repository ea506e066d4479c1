// The CPU's FMA peak, the `ceiling` kind's fma_peak variant: fused multiply-adds on registers only,
// on every CPU thread, at the widest vector width this CPU runs. It is the cores' arithmetic limit
// as measured rather than as a data sheet would state it (a VM does not show the clock or the FMA
// units reliably), shown beside the GEMM ceiling so that "% of peak" can be read both ways.
#include <cmath>
#include <cstring>
#include <vector>

#include <immintrin.h>

#include <fmt/format.h>

#include "core/registry.h"
#include "kinds/ceiling/ceiling_keys.h"
#include "numerics/packed_gemv.h"  // best_cpu_isa
#include "numerics/parallel.h"

namespace ib {
namespace {

// Independent chains per thread, one register each: more than the FMA latency (4 cycles) times
// the FMA ports (2) keeps every port busy; 16 leave the AVX2 version its 16 registers.
constexpr int kChains = 16;
constexpr int kIters = 1 << 18;
// x ← x·a + b converges to b / (1 - a) = 1, so the values stay normal through any count.
constexpr float kA = 0.999f, kB = 0.001f;

float chain_start(int c) { return 0.5f + 0.03125f * static_cast<float>(c); }

__attribute__((target("avx512f"))) void chains_avx512(float* out) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(chain_start(c));
  const __m512 a = _mm512_set1_ps(kA), b = _mm512_set1_ps(kB);
  for (int i = 0; i < kIters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  for (int c = 0; c < kChains; ++c) {
    alignas(64) float v[16];
    _mm512_store_ps(v, acc[c]);
    out[c] = v[0];
    for (int l = 1; l < 16; ++l)
      if (std::memcmp(&v[l], &v[0], 4) != 0) out[c] = std::nanf("");  // lanes must agree
  }
}

__attribute__((target("avx2,fma"))) void chains_avx2(float* out) {
  // 12 chains: 12 accumulators, a and b fill 14 of the 16 registers.
  constexpr int n = 12;
  __m256 acc[n];
  for (int c = 0; c < n; ++c) acc[c] = _mm256_set1_ps(chain_start(c));
  const __m256 a = _mm256_set1_ps(kA), b = _mm256_set1_ps(kB);
  for (int i = 0; i < kIters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < n; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  for (int c = 0; c < n; ++c) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[c]);
    out[c] = v[0];
    for (int l = 1; l < 8; ++l)
      if (std::memcmp(&v[l], &v[0], 4) != 0) out[c] = std::nanf("");  // lanes must agree
  }
  for (int c = n; c < kChains; ++c) out[c] = 0;
}

class CpuFmaPeak : public Variant {
 public:
  std::string unsupported(const Point&) const override {
    if (best_cpu_isa() == CpuIsa::Generic) return "the FMA peak needs AVX2/FMA or AVX-512";
    return {};
  }
  void prepare(const Point&, BackendRuntime&, uint64_t) override {
    isa_ = best_cpu_isa();
    threads_ = cpu_threads();
    out_.assign(static_cast<size_t>(threads_) * kChains, -1.0f);
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    // Every thread's every chain against a scalar replay of the same fused multiply-adds.
    const int chains = isa_ == CpuIsa::Avx512 ? kChains : 12;
    size_t wrong = 0;
    for (int c = 0; c < chains; ++c) {
      float x = chain_start(c);
      for (int i = 0; i < kIters; ++i) x = std::fma(x, kA, kB);
      for (unsigned t = 0; t < threads_; ++t) wrong += std::memcmp(&out_[t * kChains + static_cast<size_t>(c)], &x, 4) != 0;
    }
    return {wrong == 0, "mismatches", static_cast<double>(wrong), 0,
            fmt::format("{} chains × {} threads vs a scalar replay of {} FMAs each", chains, threads_, kIters)};
  }
  void run(BackendRuntime&) override {
    parallel_for(threads_, [&](size_t lo, size_t hi) {
      for (size_t t = lo; t < hi; ++t) {
        if (isa_ == CpuIsa::Avx512)
          chains_avx512(&out_[t * kChains]);
        else
          chains_avx2(&out_[t * kChains]);
      }
    });
  }
  std::string note() const override {
    return fmt::format("{} FMAs on registers, {} thread{}", to_string(isa_), threads_, threads_ == 1 ? "" : "s");
  }
  Work work() const override {
    const double lanes_chains = isa_ == CpuIsa::Avx512 ? 16.0 * kChains : 8.0 * 12;
    return {2.0 * lanes_chains * kIters * threads_, 0};
  }

 private:
  CpuIsa isa_ = CpuIsa::Generic;
  unsigned threads_ = 1;
  std::vector<float> out_;
};

const VariantRegistration reg_ceiling_fma_peak(
    "ceiling",
    {"fma_peak",
     Backend::Cpu,
     "fused multiply-adds on registers only, independent chains on every CPU thread at the widest vector width: the cores' "
     "arithmetic limit as measured, beside the GEMM ceiling",
     {}},
    make_variant<CpuFmaPeak>());

}  // namespace
}  // namespace ib
