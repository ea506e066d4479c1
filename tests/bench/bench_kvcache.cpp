// Google Benchmark: the paged KV cache's bookkeeping. One decode step of a batch (every sequence
// appends a token: a new block every block_size steps), and the fork + copy-on-write + free of
// parallel sampling, over a pool of 10,000 blocks.
#include <benchmark/benchmark.h>

#include "model/block_manager.h"

namespace {

using ib::kvcache::BlockManager;

void BM_BlockManagerDecodeStep(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  constexpr int kBlockSize = 16, kPrompt = 500;
  const int blocks = batch * (kPrompt / kBlockSize + 64) + 16;
  BlockManager m(blocks, kBlockSize);
  std::vector<int> seqs;
  for (int i = 0; i < batch; ++i) {
    seqs.push_back(m.create());
    m.append(seqs.back(), kPrompt);
  }
  int steps = 0;
  for (auto _ : state) {
    for (int s : seqs) benchmark::DoNotOptimize(m.append(s, 1));
    if (++steps == 60 * kBlockSize) {  // keep the pool from filling: shorten every sequence again
      state.PauseTiming();
      for (int s : seqs) m.truncate(s, kPrompt);
      steps = 0;
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(BM_BlockManagerDecodeStep)->Arg(1)->Arg(32)->Arg(256);

void BM_BlockManagerForkAppendFree(benchmark::State& state) {
  constexpr int kBlockSize = 16;
  BlockManager m(10000, kBlockSize);
  const int parent = m.create();
  m.append(parent, 2000 + 7);  // a partial last block: every child's first append copies it
  for (auto _ : state) {
    const int child = m.fork(parent);
    m.append(child, 1);
    benchmark::DoNotOptimize(m.take_copies());
    m.free(child);
  }
}
BENCHMARK(BM_BlockManagerForkAppendFree);

}  // namespace
