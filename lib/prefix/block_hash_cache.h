// Automatic prefix caching with chained block hashes, as vLLM does it (APC, v1 KV cache manager).
//
// A prompt is cut into full blocks of `block_size` tokens (a partial last block is never cached).
// Block i's hash is hash(hash of block i-1, the block's tokens, an extra key such as a LoRA adapter
// id), so a block is found only after the same tokens at the same positions under the same extra
// key: the hash names the whole prefix up to and including the block. Hashes are 128-bit
// (MurmurHash3 x64-128 mixing) and every hit also compares the block's stored tokens, extra key
// and parent hash, so a hash collision is a miss, never a wrong hit.
//
// Blocks carry reference counts (running requests that use them). A block whose count drops to
// zero stays cached on a free queue in LRU order (the order in which requests released them; a
// request releases its chain tail first, so a prefix's tail is evicted before its head) and is
// evicted only when a new block needs room: the number of cached blocks never exceeds
// `capacity_blocks`, and a referenced block is never evicted.
//
// The cache only keeps metadata: each block records where its K/V lives (KvRun: holder sequence
// and position); the caller (PrefixServer) keeps the holders alive and releases them when the
// cache evicts their last block.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefix/kv_run.h"

namespace ib::prefix {

struct Hash128 {
  uint64_t hi = 0, lo = 0;
  bool operator==(const Hash128& o) const { return hi == o.hi && lo == o.lo; }
  bool operator!=(const Hash128& o) const { return !(*this == o); }
};

// The parent hash of a prompt's first block.
constexpr Hash128 kRootHash{0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull};

// hash(parent, tokens[0, n), extra_key): MurmurHash3 x64-128's mixing, seeded by the parent.
Hash128 hash_block(const Hash128& parent, const int32_t* tokens, int n, uint64_t extra_key);

class BlockHashCache {
 public:
  using BlockId = int32_t;

  struct Options {
    int block_size = 16;
    int64_t capacity_blocks = 1024;
    // Tests only: keep this many bits of each hash (< 128 forces collisions, which the stored
    // tokens must turn into misses).
    int hash_bits = 128;
  };

  struct BlockInfo {
    Hash128 hash, parent;
    uint64_t extra_key = 0;
    int index = 0;  // block index in the prompt (positions index·block_size …)
    int ref = 0;
    KvRun kv;  // where its K/V lives
  };

  struct InsertResult {
    // Every block of the prompt's cached chain the caller now holds a reference on, in order:
    // the `held` ones it passed in, then the ones this call added or found already cached.
    std::vector<BlockId> chain;
    int added = 0;               // blocks newly cached (K/V in `holder`)
    std::vector<KvRun> evicted;  // K/V of the blocks evicted to make room
    bool stopped_full = false;   // a block could not be cached: full of referenced blocks
    bool stopped_collision = false;
  };

  explicit BlockHashCache(Options o);

  int block_size() const { return opt_.block_size; }
  int64_t capacity() const { return opt_.capacity_blocks; }
  int64_t size() const { return live_; }               // cached blocks
  int64_t free_blocks() const { return free_count_; }  // cached and unreferenced (evictable)
  int64_t evictions() const { return evictions_; }
  int64_t collisions() const { return collisions_; }

  // The longest chain of cached blocks that prefixes tokens[0, n) under `extra_key`, at most
  // `max_blocks` long. Read-only: no reference is taken and LRU order is untouched (acquire
  // does both).
  std::vector<BlockId> lookup(const int32_t* tokens, int n, uint64_t extra_key, int max_blocks = INT_MAX) const;
  // A request starts using blocks: +1 reference each; they leave the free queue.
  void acquire(const std::vector<BlockId>& blocks);
  // A request is done with them: -1 reference each; a block that reaches zero joins the free
  // queue's most-recently-used end, the chain's last block first.
  void release(const std::vector<BlockId>& blocks);

  // After a prefill of tokens[0, n) whose K/V is in sequence `holder` at positions equal to the
  // token indices: caches the prompt's full blocks after `held` (the chain the request acquired
  // from lookup). Blocks already cached (e.g. a last block lookup was not allowed to use) are
  // acquired instead; new ones evict free blocks in LRU order when the cache is full. The chain
  // stops at the first block that cannot be cached. The caller releases `chain` when done.
  InsertResult insert(const int32_t* tokens, int n, uint64_t extra_key, const std::vector<BlockId>& held, int holder);

  const BlockInfo& block(BlockId id) const { return blocks_[static_cast<size_t>(id)].info; }
  // Free blocks from least to most recently used (the eviction order).
  std::vector<BlockId> free_queue() const;
  // Where every cached block's K/V lives.
  std::vector<KvRun> cached_runs() const;
  // Drops every block; no block may be referenced. Returns the K/V of the dropped blocks.
  std::vector<KvRun> clear();
  // "" when every invariant holds, else what is broken: size within capacity, the map and the
  // blocks agree, the free queue holds exactly the unreferenced blocks, hashes match contents.
  std::string check_invariants() const;

 private:
  struct Slot {
    bool live = false;
    BlockInfo info;
    BlockId prev = -1, next = -1;  // free queue links (only while ref == 0)
  };
  struct HashOf {
    size_t operator()(const Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull)); }
  };

  Hash128 hash_of(const Hash128& parent, const int32_t* tokens, uint64_t extra_key) const;
  bool same_block(BlockId id, const Hash128& parent, const int32_t* tokens, uint64_t extra_key) const;
  const int32_t* tokens_of(BlockId id) const { return &tokens_[static_cast<size_t>(id) * static_cast<size_t>(opt_.block_size)]; }
  void queue_push_back(BlockId id);
  void queue_remove(BlockId id);
  BlockId new_slot();
  void drop(BlockId id);  // removes an unreferenced block from map, queue and slots

  Options opt_;
  std::vector<Slot> blocks_;
  std::vector<int32_t> tokens_;  // [slot][block_size]: the collision check
  std::vector<BlockId> spare_;   // slots of dropped blocks, reused
  std::unordered_map<Hash128, BlockId, HashOf> map_;
  BlockId head_ = -1, tail_ = -1;  // free queue: head = least recently used
  int64_t live_ = 0, free_count_ = 0, evictions_ = 0;
  mutable int64_t collisions_ = 0;
};

}  // namespace ib::prefix
