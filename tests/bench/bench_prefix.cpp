// Google Benchmark: a prefix cache's bookkeeping per request (lookup + pin + insert + eviction +
// unpin), with the cache full at 10,000 blocks of 16 tokens (the bar: <= 50 µs).
// Requests are 2,000-token prompts + a 7–10-token query: a hit walks 125 blocks; a miss also
// inserts 125 blocks and evicts as many.
#include <benchmark/benchmark.h>

#include "numerics/random.h"
#include "prefix/prefix_server.h"

namespace {

using namespace ib::prefix;
using Tokens = std::vector<int32_t>;

Tokens random_tokens(int n, uint64_t seed) {
  Tokens t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(ib::random_bits(seed, static_cast<uint64_t>(i)) % 32000);
  return t;
}

void BM_PrefixBookkeeping(benchmark::State& state) {
  const CacheKind kind = state.range(0) == 0 ? CacheKind::BlockHash : CacheKind::Radix;
  const bool miss = state.range(1) != 0;
  constexpr int kBlock = 16, kBlocks = 10000, kPrompt = 2000;
  // block_hash: 80 prompts fill the 10,000 blocks exactly (a query never completes a block).
  // radix: 79 leave 2,000 tokens for the queries' leaves, which LRU cycles (a radix leaf is
  // evicted whole: with no room a query would evict a whole 2,000-token prompt).
  const int kResident = kBlocks * kBlock / kPrompt - (kind == CacheKind::Radix ? 1 : 0);
  CacheReplay cache({kind, kBlock, int64_t{kBlocks} * kBlock});
  std::vector<Tokens> resident;
  for (int i = 0; i < kResident; ++i) {
    resident.push_back(random_tokens(kPrompt, 1000 + static_cast<uint64_t>(i)));
    cache.step(resident.back().data(), kPrompt, 0);
  }
  // Requests built ahead: a resident prompt + a query (hit), or a prompt never seen before in a
  // cycle longer than the cache (every request misses and evicts).
  std::vector<Tokens> requests;
  for (int i = 0; i < 256; ++i) {
    Tokens t = miss ? random_tokens(kPrompt, 50000 + static_cast<uint64_t>(i)) : resident[static_cast<size_t>(i % kResident)];
    const Tokens q = random_tokens(7 + i % 4, 90000 + static_cast<uint64_t>(i));
    t.insert(t.end(), q.begin(), q.end());
    requests.push_back(std::move(t));
  }
  size_t i = 0;
  int64_t hit = 0, tokens = 0;
  for (auto _ : state) {
    const Tokens& t = requests[i++ % requests.size()];
    const auto s = cache.step(t.data(), static_cast<int>(t.size()), 0);
    hit += s.hit;
    tokens += s.prompt;
    benchmark::DoNotOptimize(s);
  }
  state.counters["hit_rate"] = tokens > 0 ? static_cast<double>(hit) / static_cast<double>(tokens) : 0;
  state.counters["cached_blocks"] = static_cast<double>(cache.cached_tokens()) / kBlock;
  state.SetLabel(std::string(to_string(kind)) + (miss ? " miss" : " hit") + ", 2,000-token prompt, 10,000 cached blocks");
}
BENCHMARK(BM_PrefixBookkeeping)->Args({0, 0})->Args({1, 0})->Args({0, 1})->Args({1, 1})->Unit(benchmark::kMicrosecond);

}  // namespace
