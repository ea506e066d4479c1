#include "prefix/block_hash_cache.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ib::prefix {
namespace {

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// One 16-byte round of MurmurHash3_x64_128.
inline void murmur_round(uint64_t& h1, uint64_t& h2, uint64_t k1, uint64_t k2) {
  constexpr uint64_t c1 = 0x87c37b91114253d5ull, c2 = 0x4cf5ad432745937full;
  k1 *= c1;
  k1 = rotl(k1, 31);
  k1 *= c2;
  h1 ^= k1;
  h1 = rotl(h1, 27);
  h1 += h2;
  h1 = h1 * 5 + 0x52dce729;
  k2 *= c2;
  k2 = rotl(k2, 33);
  k2 *= c1;
  h2 ^= k2;
  h2 = rotl(h2, 31);
  h2 += h1;
  h2 = h2 * 5 + 0x38495ab5;
}

inline uint64_t pack(const int32_t* t, int i, int n) {
  const uint64_t a = i < n ? static_cast<uint32_t>(t[i]) : 0u;
  const uint64_t b = i + 1 < n ? static_cast<uint32_t>(t[i + 1]) : 0u;
  return a | (b << 32);
}

}  // namespace

Hash128 hash_block(const Hash128& parent, const int32_t* tokens, int n, uint64_t extra_key) {
  uint64_t h1 = parent.hi, h2 = parent.lo;
  murmur_round(h1, h2, extra_key, static_cast<uint64_t>(n));
  for (int i = 0; i < n; i += 4) murmur_round(h1, h2, pack(tokens, i, n), pack(tokens, i + 2, n));
  const uint64_t len = static_cast<uint64_t>(n) * 4 + 16;
  h1 ^= len;
  h2 ^= len;
  h1 += h2;
  h2 += h1;
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  h1 += h2;
  h2 += h1;
  return {h1, h2};
}

BlockHashCache::BlockHashCache(Options o) : opt_(o) {
  if (opt_.block_size <= 0) throw std::invalid_argument("block_size must be positive");
  if (opt_.capacity_blocks < 0) throw std::invalid_argument("capacity must not be negative");
  if (opt_.hash_bits < 1 || opt_.hash_bits > 128) throw std::invalid_argument("hash_bits must be 1 … 128");
}

Hash128 BlockHashCache::hash_of(const Hash128& parent, const int32_t* tokens, uint64_t extra_key) const {
  Hash128 h = hash_block(parent, tokens, opt_.block_size, extra_key);
  const int bits = opt_.hash_bits;
  if (bits < 64) {
    h.hi = 0;
    h.lo &= (uint64_t{1} << bits) - 1;
  } else if (bits < 128) {
    h.hi &= bits == 64 ? 0 : (uint64_t{1} << (bits - 64)) - 1;
  }
  return h;
}

bool BlockHashCache::same_block(BlockId id, const Hash128& parent, const int32_t* tokens, uint64_t extra_key) const {
  const BlockInfo& b = block(id);
  return b.parent == parent && b.extra_key == extra_key && std::equal(tokens, tokens + opt_.block_size, tokens_of(id));
}

std::vector<BlockHashCache::BlockId> BlockHashCache::lookup(const int32_t* tokens, int n, uint64_t extra_key,
                                                            int max_blocks) const {
  std::vector<BlockId> chain;
  const int full = std::min(n / opt_.block_size, max_blocks);
  Hash128 parent = kRootHash;
  for (int i = 0; i < full; ++i) {
    const int32_t* t = tokens + static_cast<size_t>(i) * static_cast<size_t>(opt_.block_size);
    const Hash128 h = hash_of(parent, t, extra_key);
    auto it = map_.find(h);
    if (it == map_.end()) break;
    if (!same_block(it->second, parent, t, extra_key)) {
      ++collisions_;
      break;
    }
    chain.push_back(it->second);
    parent = h;
  }
  return chain;
}

void BlockHashCache::acquire(const std::vector<BlockId>& blocks) {
  for (BlockId id : blocks) {
    Slot& s = blocks_.at(static_cast<size_t>(id));
    if (!s.live) throw std::logic_error("acquire of an evicted block");
    if (s.info.ref++ == 0) queue_remove(id);
  }
}

void BlockHashCache::release(const std::vector<BlockId>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Slot& s = blocks_.at(static_cast<size_t>(*it));
    if (!s.live || s.info.ref <= 0) throw std::logic_error("release of an unreferenced block");
    if (--s.info.ref == 0) queue_push_back(*it);
  }
}

BlockHashCache::InsertResult BlockHashCache::insert(const int32_t* tokens, int n, uint64_t extra_key,
                                                    const std::vector<BlockId>& held, int holder) {
  InsertResult r;
  r.chain = held;
  const int bs = opt_.block_size;
  const int full = n / bs;
  Hash128 parent = held.empty() ? kRootHash : block(held.back()).hash;
  for (int i = static_cast<int>(held.size()); i < full; ++i) {
    const int32_t* t = tokens + static_cast<size_t>(i) * static_cast<size_t>(bs);
    const Hash128 h = hash_of(parent, t, extra_key);
    auto it = map_.find(h);
    if (it != map_.end()) {
      if (!same_block(it->second, parent, t, extra_key)) {
        // Another block owns this hash: the rest of the chain cannot be named, so it is not cached.
        ++collisions_;
        r.stopped_collision = true;
        break;
      }
      acquire({it->second});
      r.chain.push_back(it->second);
      parent = h;
      continue;
    }
    if (live_ >= opt_.capacity_blocks) {
      if (head_ < 0) {
        r.stopped_full = true;  // every cached block is in use
        break;
      }
      const BlockId victim = head_;
      r.evicted.push_back(block(victim).kv);
      drop(victim);
      ++evictions_;
    }
    const BlockId id = new_slot();
    Slot& s = blocks_[static_cast<size_t>(id)];
    s.info = BlockInfo{h, parent, extra_key, i, 1, KvRun{holder, i * bs, bs}};
    std::copy(t, t + bs, tokens_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(id) * static_cast<size_t>(bs)));
    map_.emplace(h, id);
    r.chain.push_back(id);
    ++r.added;
    parent = h;
  }
  return r;
}

std::vector<BlockHashCache::BlockId> BlockHashCache::free_queue() const {
  std::vector<BlockId> q;
  for (BlockId id = head_; id >= 0; id = blocks_[static_cast<size_t>(id)].next) q.push_back(id);
  return q;
}

std::vector<KvRun> BlockHashCache::cached_runs() const {
  std::vector<KvRun> runs;
  for (const Slot& s : blocks_)
    if (s.live) runs.push_back(s.info.kv);
  return runs;
}

std::vector<KvRun> BlockHashCache::clear() {
  std::vector<KvRun> dropped;
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].live && blocks_[i].info.ref > 0) throw std::logic_error("clear() while a block is referenced");
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].live) {
      dropped.push_back(blocks_[i].info.kv);
      drop(static_cast<BlockId>(i));
    }
  return dropped;
}

void BlockHashCache::queue_push_back(BlockId id) {
  Slot& s = blocks_[static_cast<size_t>(id)];
  s.prev = tail_;
  s.next = -1;
  if (tail_ >= 0)
    blocks_[static_cast<size_t>(tail_)].next = id;
  else
    head_ = id;
  tail_ = id;
  ++free_count_;
}

void BlockHashCache::queue_remove(BlockId id) {
  Slot& s = blocks_[static_cast<size_t>(id)];
  if (s.prev >= 0)
    blocks_[static_cast<size_t>(s.prev)].next = s.next;
  else
    head_ = s.next;
  if (s.next >= 0)
    blocks_[static_cast<size_t>(s.next)].prev = s.prev;
  else
    tail_ = s.prev;
  s.prev = s.next = -1;
  --free_count_;
}

BlockHashCache::BlockId BlockHashCache::new_slot() {
  BlockId id;
  if (!spare_.empty()) {
    id = spare_.back();
    spare_.pop_back();
  } else {
    id = static_cast<BlockId>(blocks_.size());
    blocks_.emplace_back();
    tokens_.resize(blocks_.size() * static_cast<size_t>(opt_.block_size));
  }
  blocks_[static_cast<size_t>(id)].live = true;
  ++live_;
  return id;
}

void BlockHashCache::drop(BlockId id) {
  Slot& s = blocks_[static_cast<size_t>(id)];
  queue_remove(id);
  map_.erase(s.info.hash);
  s.live = false;
  s.info = BlockInfo{};
  spare_.push_back(id);
  --live_;
}

std::string BlockHashCache::check_invariants() const {
  if (live_ > opt_.capacity_blocks) return fmt::format("{} blocks cached, capacity {}", live_, opt_.capacity_blocks);
  if (static_cast<int64_t>(map_.size()) != live_) return fmt::format("map holds {} hashes, {} blocks live", map_.size(), live_);
  int64_t live = 0, unreferenced = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Slot& s = blocks_[i];
    if (!s.live) continue;
    ++live;
    const BlockInfo& b = s.info;
    if (b.ref < 0) return fmt::format("block {} has reference count {}", i, b.ref);
    unreferenced += b.ref == 0;
    auto it = map_.find(b.hash);
    if (it == map_.end() || it->second != static_cast<BlockId>(i))
      return fmt::format("block {} is not in the map under its hash", i);
    if (hash_of(b.parent, tokens_of(static_cast<BlockId>(i)), b.extra_key) != b.hash)
      return fmt::format("block {}'s hash does not match its parent, tokens and extra key", i);
    if (b.kv.len != opt_.block_size || b.kv.pos != b.index * opt_.block_size)
      return fmt::format("block {} records K/V at [{}, +{}) for block index {}", i, b.kv.pos, b.kv.len, b.index);
  }
  if (live != live_) return fmt::format("{} live slots, counted {}", live, live_);
  int64_t queued = 0;
  BlockId prev = -1;
  for (BlockId id = head_; id >= 0; id = blocks_[static_cast<size_t>(id)].next) {
    const Slot& s = blocks_[static_cast<size_t>(id)];
    if (!s.live || s.info.ref != 0) return fmt::format("block {} is on the free queue with reference count {}", id, s.info.ref);
    if (s.prev != prev) return fmt::format("free queue link broken at block {}", id);
    prev = id;
    if (++queued > live_) return "the free queue has a cycle";
  }
  if (prev != tail_) return "free queue tail is wrong";
  if (queued != unreferenced || queued != free_count_)
    return fmt::format("free queue holds {} blocks, {} unreferenced, counted {}", queued, unreferenced, free_count_);
  return {};
}

}  // namespace ib::prefix
