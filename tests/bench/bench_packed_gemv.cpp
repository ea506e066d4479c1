// The packed decode GEMV on one thread per storage type, at a SmolLM2-135M layer's shapes (hidden
// 576, MLP 1536): bytes/s is the weights streamed, so the figure compares with `info`'s copy
// bandwidth; a matrix larger than the caches (every layer's, cycled) keeps it honest.
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "numerics/half.h"
#include "numerics/packed_gemv.h"
#include "numerics/random.h"

namespace {

// Enough copies of the [in][out] matrix to exceed the last-level cache: 1 GB cycled (this VM's L3
// is 480 MB, shared; 64 copies of a Q4_1 matrix, 35 MB, stayed in it and read at twice DRAM's rate).
constexpr double kCycledBytes = 1e9;

// Copies of one random matrix (the same bytes: the stream, not the values, is measured).
std::vector<ib::PackedWeights> matrices(int type, int in, int out) {
  std::vector<float> w;
  std::vector<uint8_t> rows;
  const auto t = type % 2 == 0 ? ib::BlockType::Q8_0 : ib::BlockType::Q4_1;
  if (type < 2) {  // 0: f32, 1: bf16-exact
    w.resize(static_cast<size_t>(in) * out);
    for (size_t i = 0; i < w.size(); ++i) {
      const float f = static_cast<float>(ib::random_uniform(1, i));
      w[i] = type == 1 ? ib::bf16_bits_to_float(ib::float_to_bf16_bits(f)) : f;
    }
  } else {
    rows.resize(static_cast<size_t>(out) * (in / 32) * ib::block_bytes(t));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(ib::random_bits(7, i));
    for (size_t b = 0; b < rows.size(); b += ib::block_bytes(t)) {  // finite scales
      rows[b + 1] = 0x20;
      if (t == ib::BlockType::Q4_1) rows[b + 3] = 0x20;
    }
  }
  std::vector<ib::PackedWeights> m;
  while (m.empty() || static_cast<double>(m.size()) * static_cast<double>(m[0].bytes()) < kCycledBytes) {
    if (type < 2)
      m.emplace_back(w.data(), in, out, type == 1);
    else
      m.emplace_back(t, rows.data(), in, out, type >= 4 ? ib::BlockDot::Int8 : ib::BlockDot::Exact);
  }
  return m;
}

// Args: storage (0 f32, 1 bf16, 2 q8_0, 3 q4_1, 4 q8_0 and 5 q4_1 on int8 activations), rows, in, out.
void BM_PackedGemv(benchmark::State& state) {
  const int type = static_cast<int>(state.range(0)), rows = static_cast<int>(state.range(1));
  const int in = static_cast<int>(state.range(2)), out = static_cast<int>(state.range(3));
  const auto m = matrices(type, in, out);
  std::vector<float> x(static_cast<size_t>(rows) * in, 0.5f), y(static_cast<size_t>(rows) * out);
  size_t c = 0, bytes = 0;
  for (auto _ : state) {
    const ib::PackedWeights& w = m[c++ % m.size()];
    w.multiply(x.data(), rows, 0, w.panels(), y.data());
    benchmark::DoNotOptimize(y.data());
    bytes += w.bytes();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.SetLabel(ib::to_string(m[0].type()));
}
BENCHMARK(BM_PackedGemv)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 4, 16}, {576}, {1536}})
    ->Args({3, 1, 1536, 576})
    ->Args({5, 1, 1536, 576})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
