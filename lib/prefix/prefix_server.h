// A prefix cache in front of the transformer engine: how a server serves a request's prefill
// with automatic prefix caching.
//
//   lookup (longest cached prefix, at most n - 1 tokens: the last token is always computed, it
//   gives the logits) -> pin it -> new sequence, Model::copy_cache of the cached runs from the
//   sequences that hold them -> prefill only the rest (first token) -> insert the prompt (evicting
//   LRU entries when full) -> finish: unpin.
//
// How K/V is held (the engine keeps one contiguous KV cache per sequence, no shared pages): the
// cached K/V of a block or radix node stays in the sequence of the request that computed it, its
// holder. A finished request's sequence is kept alive while the cache still points into it and
// released when the cache evicts its last entry there; a request that added nothing is released
// at once. The memory held is therefore the holders' whole allocations (engine-tracked, so a
// memory limit becomes an OOM row), which exceeds cached tokens × K/V bytes per token: a holder
// also carries the positions it copied from others and its uncached tail. Both are reported. A
// paged engine (vLLM, SGLang) would share the pages instead of copying the prefix; here a hit
// costs one K/V copy of the prefix, which is inside the measured TTFT.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "prefix/block_hash_cache.h"
#include "prefix/radix_cache.h"

namespace ib::prefix {

enum class CacheKind { None, BlockHash, Radix };
const char* to_string(CacheKind k);

struct ServerOptions {
  CacheKind kind = CacheKind::None;
  int block_size = 16;          // block_hash
  int64_t capacity_tokens = 0;  // block_hash: floor(capacity / block_size) blocks; radix: tokens
};

// One request in flight (between serve and finish).
struct Served {
  int seq = -1;          // the request's sequence: every prompt position's K/V
  int prompt = 0;        // tokens
  int hit = 0;           // tokens reused from the cache (copied, not prefilled)
  int written = 0;       // tokens this request added to the cache
  int evicted = 0;       // tokens evicted to make room for them
  double lookup_us = 0;  // bookkeeping: lookup + pin
  double insert_us = 0;  // bookkeeping: insert + eviction + holder accounting
  double finish_us = 0;  // bookkeeping: unpin
  double copy_ms = 0;    // Model::copy_cache calls (host time; asynchronous on the GPU)
  double bookkeeping_us() const { return lookup_us + insert_us + finish_us; }
  // Internal: what finish() releases.
  std::vector<BlockHashCache::BlockId> chain;
  RadixCache::NodeId node = -1;
};

class PrefixServer {
 public:
  PrefixServer(model::Model& m, ServerOptions o);
  ~PrefixServer();
  PrefixServer(const PrefixServer&) = delete;
  PrefixServer& operator=(const PrefixServer&) = delete;

  CacheKind kind() const { return opt_.kind; }
  // Prefills tokens[0, n) reusing the longest cached prefix; `out` receives the last position's
  // logits and/or the first token. The caller calls finish() when the request is done.
  Served serve(const int32_t* tokens, int n, uint64_t extra_key, const model::StepOutput& out);
  void finish(Served& r);
  // Drops the cache and releases every holder (no request may be in flight).
  void clear();

  int64_t cached_tokens() const;
  int64_t capacity_tokens() const;
  int64_t evicted_tokens() const { return evicted_tokens_; }
  int holders() const { return static_cast<int>(holder_tokens_.size()); }
  // Bytes of the engine's KV allocations of the holders (and of requests in flight).
  int64_t held_bytes() const { return model_.kv_bytes(); }
  // "" when the cache's invariants hold and every cached entry points into a live holder whose
  // count matches.
  std::string check() const;

 private:
  void add_holder_tokens(int seq, int64_t tokens);
  void drop_holder_tokens(const std::vector<KvRun>& runs);
  void copy_runs(const std::vector<KvRun>& runs, int dst);

  model::Model& model_;
  ServerOptions opt_;
  std::unique_ptr<BlockHashCache> blocks_;
  std::unique_ptr<RadixCache> radix_;
  std::unordered_map<int, int64_t> holder_tokens_;  // holder sequence -> cached tokens it holds
  std::unordered_map<int, int> in_flight_;          // sequences of requests between serve and finish
  int64_t evicted_tokens_ = 0;
};

// The cache alone, without an engine: what each request of a trace would reuse and write.
// Bookkeeping only (each request is its own "holder"; nothing is computed), for cost arithmetic
// and micro-benchmarks; the hits are the ones PrefixServer gets on the same trace.
class CacheReplay {
 public:
  struct Step {
    int prompt = 0, hit = 0, written = 0, evicted = 0;
  };
  explicit CacheReplay(ServerOptions o);
  // One request: lookup (at most n - 1 tokens), pin, insert, unpin.
  Step step(const int32_t* tokens, int n, uint64_t extra_key);
  std::string check() const;
  int64_t cached_tokens() const;

 private:
  ServerOptions opt_;
  std::unique_ptr<BlockHashCache> blocks_;
  std::unique_ptr<RadixCache> radix_;
  int next_holder_ = 0;
};

}  // namespace ib::prefix
