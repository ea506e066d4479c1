// Prefix caching's indexes: the block-hash cache (hash chains, extra keys, collisions, reference
// counts, LRU order) and the radix tree (splits, merges, LRU leaves) each against a brute-force
// model under random operations. The engine side and the kinds: test_prefix_engine.cpp.
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "prefix/block_hash_cache.h"
#include "prefix/radix_cache.h"

namespace ib::prefix {
namespace {

using Tokens = std::vector<int32_t>;

Tokens seq(std::initializer_list<int32_t> t) { return Tokens(t); }
Tokens cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
Tokens iota_tokens(int n, int32_t from) {
  Tokens t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = from + i;
  return t;
}

BlockHashCache make_blocks(int bs, int64_t cap, int bits = 128) {
  BlockHashCache::Options o;
  o.block_size = bs;
  o.capacity_blocks = cap;
  o.hash_bits = bits;
  return BlockHashCache(o);
}

// Lookup + acquire + insert + release: one finished request.
BlockHashCache::InsertResult serve_once(BlockHashCache& c, const Tokens& t, uint64_t extra, int holder) {
  auto chain = c.lookup(t.data(), static_cast<int>(t.size()), extra, (static_cast<int>(t.size()) - 1) / c.block_size());
  c.acquire(chain);
  auto r = c.insert(t.data(), static_cast<int>(t.size()), extra, chain, holder);
  c.release(r.chain);
  return r;
}

// ---- hashes ----

TEST(PrefixHash, DependsOnParentTokensAndExtraKey) {
  const Tokens t = iota_tokens(16, 5);
  const Hash128 h = hash_block(kRootHash, t.data(), 16, 0);
  EXPECT_EQ(h, hash_block(kRootHash, t.data(), 16, 0));
  EXPECT_NE(h, hash_block(h, t.data(), 16, 0));          // same tokens, another parent
  EXPECT_NE(h, hash_block(kRootHash, t.data(), 16, 1));  // another adapter
  Tokens u = t;
  u[15] += 1;
  EXPECT_NE(h, hash_block(kRootHash, u.data(), 16, 0));
  EXPECT_NE(h, hash_block(kRootHash, t.data(), 15, 0));  // length is hashed
  // Both halves carry entropy (a 128-bit hash, not a 64-bit one padded).
  std::set<uint64_t> hi, lo;
  for (int i = 0; i < 1000; ++i) {
    u[0] = i;
    const Hash128 x = hash_block(kRootHash, u.data(), 16, 0);
    hi.insert(x.hi);
    lo.insert(x.lo);
  }
  EXPECT_EQ(hi.size(), 1000u);
  EXPECT_EQ(lo.size(), 1000u);
}

// ---- block-hash cache ----

TEST(PrefixBlockHash, LookupReturnsTheLongestCachedChainOfFullBlocks) {
  auto c = make_blocks(4, 100);
  const Tokens a = iota_tokens(14, 100);  // 3 full blocks + 2 tokens
  auto r = serve_once(c, a, 0, 7);
  EXPECT_EQ(r.added, 3);
  EXPECT_EQ(c.size(), 3);
  EXPECT_EQ(c.lookup(a.data(), 14, 0).size(), 3u);
  EXPECT_EQ(c.lookup(a.data(), 14, 0, 2).size(), 2u);  // capped
  EXPECT_EQ(c.lookup(a.data(), 11, 0).size(), 2u);     // only full blocks of the query
  Tokens b = a;
  b[9] = 1;  // differs in block 2
  EXPECT_EQ(c.lookup(b.data(), 14, 0).size(), 2u);
  const auto chain = c.lookup(a.data(), 14, 0);
  for (int i = 0; i < 3; ++i) {
    const auto& info = c.block(chain[static_cast<size_t>(i)]);
    EXPECT_EQ(info.index, i);
    EXPECT_EQ(info.kv.holder, 7);
    EXPECT_EQ(info.kv.pos, 4 * i);
    EXPECT_EQ(info.kv.len, 4);
  }
  EXPECT_EQ(c.check_invariants(), "");
}

TEST(PrefixBlockHash, SameTokensAtAnotherPositionOrAfterAnotherParentDoNotHit) {
  auto c = make_blocks(4, 100);
  const Tokens x = iota_tokens(4, 10), y = iota_tokens(4, 20), z = iota_tokens(4, 30);
  serve_once(c, cat(cat(x, y), seq({1})), 0, 0);  // caches X, X→Y
  serve_once(c, cat(z, seq({1})), 0, 1);          // caches Z
  const Tokens y_first = cat(y, seq({1}));
  EXPECT_EQ(c.lookup(y_first.data(), 5, 0).size(), 0u);  // Y at position 0: no hit
  const Tokens zy = cat(cat(z, y), seq({1}));
  EXPECT_EQ(c.lookup(zy.data(), 9, 0).size(), 1u);  // Z hits, Y after Z does not
  const Tokens xy = cat(cat(x, y), seq({2}));
  EXPECT_EQ(c.lookup(xy.data(), 9, 0).size(), 2u);
}

TEST(PrefixBlockHash, ExtraKeySeparatesAdapters) {
  auto c = make_blocks(4, 100);
  const Tokens a = iota_tokens(9, 1);
  serve_once(c, a, /*adapter*/ 1, 0);
  EXPECT_EQ(c.lookup(a.data(), 9, 1).size(), 2u);
  EXPECT_EQ(c.lookup(a.data(), 9, 2).size(), 0u);
  EXPECT_EQ(c.lookup(a.data(), 9, 0).size(), 0u);
  serve_once(c, a, 2, 1);  // the same tokens under adapter 2: their own blocks
  EXPECT_EQ(c.size(), 4);
  EXPECT_EQ(c.block(c.lookup(a.data(), 9, 2)[0]).kv.holder, 1);
  EXPECT_EQ(c.block(c.lookup(a.data(), 9, 1)[0]).kv.holder, 0);
}

TEST(PrefixBlockHash, CollisionsAreMissesNeverWrongHits) {
  auto c = make_blocks(2, 1000, /*hash_bits*/ 5);  // 32 hash values: collisions everywhere
  std::mt19937_64 rng(3);
  std::vector<Tokens> cached;
  for (int i = 0; i < 300; ++i) {
    Tokens t(static_cast<size_t>(2 + rng() % 9));
    for (auto& x : t) x = static_cast<int32_t>(rng() % 4);
    serve_once(c, t, rng() % 2, i);
    ASSERT_EQ(c.check_invariants(), "");
    // Every hit's stored tokens are the query's own tokens at that block.
    Tokens q(static_cast<size_t>(2 + rng() % 9));
    for (auto& x : q) x = static_cast<int32_t>(rng() % 4);
    const auto chain = c.lookup(q.data(), static_cast<int>(q.size()), 0);
    for (size_t b = 0; b < chain.size(); ++b) EXPECT_EQ(c.block(chain[b]).index, static_cast<int>(b));
  }
  EXPECT_GT(c.collisions(), 0);
  EXPECT_LE(c.size(), 32);  // one block per hash value at most
}

TEST(PrefixBlockHash, EvictionNeverDropsAReferencedBlock) {
  auto c = make_blocks(2, 4);
  const Tokens a = iota_tokens(9, 1), b = iota_tokens(9, 50);
  auto chain_a = c.lookup(a.data(), 9, 0);
  c.acquire(chain_a);
  auto ra = c.insert(a.data(), 9, 0, chain_a, 0);  // 4 blocks, still referenced
  ASSERT_EQ(ra.added, 4);
  auto rb = c.insert(b.data(), 9, 0, {}, 1);
  EXPECT_EQ(rb.added, 0);
  EXPECT_TRUE(rb.stopped_full);
  EXPECT_TRUE(rb.evicted.empty());
  EXPECT_EQ(c.lookup(a.data(), 9, 0).size(), 4u);
  c.release(ra.chain);
  rb = c.insert(b.data(), 9, 0, {}, 1);
  EXPECT_EQ(rb.added, 4);
  EXPECT_EQ(rb.evicted.size(), 4u);
  EXPECT_EQ(c.lookup(a.data(), 9, 0).size(), 0u);
  EXPECT_LE(c.size(), c.capacity());
  c.release(rb.chain);
  EXPECT_EQ(c.check_invariants(), "");
}

TEST(PrefixBlockHash, EvictsInLeastRecentlyReleasedOrderTailFirst) {
  auto c = make_blocks(2, 4);
  const Tokens a = seq({1, 1, 9}), b = seq({2, 2, 9}), d = seq({4, 4, 9});
  serve_once(c, a, 0, 0);
  serve_once(c, b, 0, 1);
  // A chain of two, released tail first: its second block is older than its first.
  const Tokens p = seq({5, 5, 6, 6, 9});
  serve_once(c, p, 0, 2);
  auto q = c.free_queue();
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(c.block(q[0]).kv.holder, 0);
  EXPECT_EQ(c.block(q[1]).kv.holder, 1);
  EXPECT_EQ(c.block(q[2]).kv.pos, 2);  // p's tail
  EXPECT_EQ(c.block(q[3]).kv.pos, 0);  // p's head, most recent
  // Using a makes it the most recent: b is evicted next, then p's tail.
  serve_once(c, a, 0, 3);
  auto r = serve_once(c, d, 0, 4);
  ASSERT_EQ(r.evicted.size(), 1u);
  EXPECT_EQ(r.evicted[0].holder, 1);
  r = serve_once(c, seq({7, 7, 9}), 0, 5);
  ASSERT_EQ(r.evicted.size(), 1u);
  EXPECT_EQ(r.evicted[0].holder, 2);
  EXPECT_EQ(r.evicted[0].pos, 2);
  EXPECT_EQ(c.check_invariants(), "");
}

TEST(PrefixBlockHash, ALastBlockTheLookupMayNotUseIsFoundAgainByInsert) {
  auto c = make_blocks(4, 10);
  const Tokens a = iota_tokens(8, 1);  // exactly two blocks
  serve_once(c, a, 0, 0);
  auto chain = c.lookup(a.data(), 8, 0, (8 - 1) / 4);  // the last token must be prefilled
  EXPECT_EQ(chain.size(), 1u);
  c.acquire(chain);
  auto r = c.insert(a.data(), 8, 0, chain, 1);
  EXPECT_EQ(r.added, 0);  // block 1 already cached: acquired, not duplicated
  EXPECT_EQ(r.chain.size(), 2u);
  EXPECT_EQ(c.size(), 2);
  c.release(r.chain);
  EXPECT_EQ(c.check_invariants(), "");
}

// The block cache replayed by a brute-force model: lists scanned linearly, the free queue a vector.
struct BlockModel {
  struct Block {
    uint64_t extra;
    Tokens prefix;  // every token up to the block's end
    int ref;
    int holder, pos;
  };
  int bs;
  int64_t cap;
  std::vector<Block> live;
  std::vector<std::pair<int, int>> free;  // (holder, pos), LRU first

  int find(uint64_t extra, const Tokens& t, int blocks) const {
    for (size_t i = 0; i < live.size(); ++i)
      if (live[i].extra == extra && static_cast<int>(live[i].prefix.size()) == blocks * bs &&
          std::equal(live[i].prefix.begin(), live[i].prefix.end(), t.begin()))
        return static_cast<int>(i);
    return -1;
  }
  int at(std::pair<int, int> id) const {
    for (size_t i = 0; i < live.size(); ++i)
      if (live[i].holder == id.first && live[i].pos == id.second) return static_cast<int>(i);
    return -1;
  }
  std::vector<int> lookup(const Tokens& t, uint64_t extra, int max_blocks) const {
    std::vector<int> chain;
    for (int b = 1; b <= std::min(static_cast<int>(t.size()) / bs, max_blocks); ++b) {
      const int i = find(extra, t, b);
      if (i < 0) break;
      chain.push_back(i);
    }
    return chain;
  }
  void acquire(int i) {
    if (live[static_cast<size_t>(i)].ref++ == 0)
      free.erase(std::find(free.begin(), free.end(),
                           std::make_pair(live[static_cast<size_t>(i)].holder, live[static_cast<size_t>(i)].pos)));
  }
  void release(const std::vector<std::pair<int, int>>& chain) {
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Block& b = live[static_cast<size_t>(at(*it))];
      if (--b.ref == 0) free.push_back(*it);
    }
  }
  // Returns the chain (as holder, pos) and the evicted (holder, pos) in order.
  std::pair<std::vector<std::pair<int, int>>, std::vector<std::pair<int, int>>> insert(
      const Tokens& t, uint64_t extra, const std::vector<std::pair<int, int>>& held, int holder) {
    std::vector<std::pair<int, int>> chain = held, evicted;
    for (int b = static_cast<int>(held.size()) + 1; b <= static_cast<int>(t.size()) / bs; ++b) {
      const int i = find(extra, t, b);
      if (i >= 0) {
        acquire(i);
        chain.emplace_back(live[static_cast<size_t>(i)].holder, live[static_cast<size_t>(i)].pos);
        continue;
      }
      if (static_cast<int64_t>(live.size()) >= cap) {
        if (free.empty()) break;
        const auto victim = free.front();
        free.erase(free.begin());
        live.erase(live.begin() + at(victim));
        evicted.push_back(victim);
      }
      live.push_back({extra, Tokens(t.begin(), t.begin() + b * bs), 1, holder, (b - 1) * bs});
      chain.emplace_back(holder, (b - 1) * bs);
    }
    return {chain, evicted};
  }
};

TEST(PrefixBlockHash, MatchesABruteForceModelUnderRandomRequests) {
  for (uint64_t seed : {1, 2, 3}) {
    std::mt19937_64 rng(seed);
    const int bs = 3;
    const int64_t cap = 12;
    auto c = make_blocks(bs, cap);
    BlockModel m{bs, cap, {}, {}};
    std::vector<Tokens> bases;
    for (int i = 0; i < 3; ++i) bases.push_back(iota_tokens(9, 100 * i));
    std::vector<std::pair<std::vector<BlockHashCache::BlockId>, std::vector<std::pair<int, int>>>> running;
    for (int step = 0; step < 400; ++step) {
      // A prompt: a shared base cut somewhere, then a few random tokens.
      const Tokens& base = bases[rng() % 3];
      Tokens t(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(rng() % 10));
      for (int k = static_cast<int>(rng() % 6); k >= 0; --k) t.push_back(static_cast<int32_t>(rng() % 3));
      const uint64_t extra = rng() % 5 == 0 ? 1 : 0;
      const int n = static_cast<int>(t.size());
      auto chain = c.lookup(t.data(), n, extra, (n - 1) / bs);
      auto mchain = m.lookup(t, extra, (n - 1) / bs);
      ASSERT_EQ(chain.size(), mchain.size()) << "step " << step;
      c.acquire(chain);
      std::vector<std::pair<int, int>> held;
      for (int i : mchain) {
        m.acquire(i);
        held.emplace_back(m.live[static_cast<size_t>(i)].holder, m.live[static_cast<size_t>(i)].pos);
      }
      for (size_t i = 0; i < chain.size(); ++i)
        ASSERT_EQ(std::make_pair(c.block(chain[i]).kv.holder, c.block(chain[i]).kv.pos), held[i]);
      auto r = c.insert(t.data(), n, extra, chain, step);
      auto [mc, me] = m.insert(t, extra, held, step);
      ASSERT_EQ(r.chain.size(), mc.size()) << "step " << step;
      ASSERT_EQ(r.evicted.size(), me.size()) << "step " << step;
      for (size_t i = 0; i < me.size(); ++i)
        ASSERT_EQ(std::make_pair(r.evicted[i].holder, r.evicted[i].pos), me[i]) << "step " << step;
      running.emplace_back(r.chain, mc);
      // Requests finish in random order; a few stay in flight (their blocks pinned).
      while (running.size() > 3 || (!running.empty() && rng() % 2)) {
        const size_t k = rng() % running.size();
        c.release(running[k].first);
        m.release(running[k].second);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      }
      ASSERT_EQ(c.check_invariants(), "") << "step " << step;
      ASSERT_LE(c.size(), cap);
      ASSERT_EQ(c.size(), static_cast<int64_t>(m.live.size()));
      const auto q = c.free_queue();
      ASSERT_EQ(q.size(), m.free.size());
      for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(std::make_pair(c.block(q[i]).kv.holder, c.block(q[i]).kv.pos), m.free[i]);
    }
    EXPECT_GT(c.evictions(), 20) << "the sequence should exercise eviction";
  }
}

// ---- radix cache ----

TEST(PrefixRadix, AMatchInsideANodeSplitsItAndIsTokenGranular) {
  RadixCache c(100);
  const Tokens a = iota_tokens(10, 1);
  auto r = c.insert(a.data(), 10, 0, 5);
  EXPECT_EQ(r.added, 10);
  const Tokens q = seq({1, 2, 3, 4, 99});
  auto m = c.match(q.data(), 5, 0, 5);
  EXPECT_EQ(m.tokens, 4);
  ASSERT_EQ(m.runs.size(), 1u);
  EXPECT_EQ(m.runs[0].holder, 5);
  EXPECT_EQ(m.runs[0].pos, 0);
  EXPECT_EQ(m.runs[0].len, 4);
  EXPECT_EQ(c.splits(), 1);
  EXPECT_EQ(c.nodes(), 3);  // root, [1..4], [5..10]
  EXPECT_EQ(c.size(), 10);
  EXPECT_EQ(c.check_invariants(), "");
  // Inserting q adds only its new token, under the split node.
  r = c.insert(q.data(), 5, 0, 6);
  EXPECT_EQ(r.added, 1);
  EXPECT_EQ(r.cached, 5);
  m = c.match(q.data(), 5, 0, 5);
  ASSERT_EQ(m.runs.size(), 2u);
  EXPECT_EQ(m.runs[1].holder, 6);
  EXPECT_EQ(m.runs[1].pos, 4);
  EXPECT_EQ(c.check_invariants(), "");
  // max_tokens bounds the match (a request's last token is always prefilled).
  EXPECT_EQ(c.match(a.data(), 10, 0, 9).tokens, 9);
}

TEST(PrefixRadix, EvictsTheLeastRecentlyUsedLeafAndMergesWhatIsLeft) {
  RadixCache c(10);
  const Tokens a = seq({1, 2, 3, 4, 5}), b = seq({1, 2, 3, 8, 9}), d = seq({7, 7, 7, 7});
  c.insert(a.data(), 5, 0, 0);
  c.insert(b.data(), 5, 0, 1);  // [1 2 3] -> {[4 5], [8 9]}
  EXPECT_EQ(c.size(), 7);
  c.match(a.data(), 5, 0, 5);            // a is now the most recent
  auto r = c.insert(d.data(), 4, 0, 2);  // needs 4, 3 free: b's leaf goes
  EXPECT_EQ(r.added, 4);
  ASSERT_EQ(r.evicted.size(), 1u);
  EXPECT_EQ(r.evicted[0].holder, 1);
  EXPECT_EQ(r.evicted[0].pos, 3);
  EXPECT_EQ(r.evicted[0].len, 2);
  EXPECT_EQ(c.merges(), 1);  // [1 2 3] + [4 5] are one node again
  EXPECT_EQ(c.nodes(), 3);   // root, [1..5], [7 7 7 7]
  const auto leaves = c.leaf_paths();
  ASSERT_EQ(leaves.size(), 2u);
  EXPECT_EQ(leaves[0].second, a);
  EXPECT_EQ(leaves[1].second, d);
  const auto m = c.match(a.data(), 5, 0, 5);
  EXPECT_EQ(m.tokens, 5);
  ASSERT_EQ(m.runs.size(), 1u);  // the merged node's runs coalesced: one copy
  EXPECT_EQ(c.check_invariants(), "");
}

TEST(PrefixRadix, ALockedPathIsNeverEvictedAndTheInsertIsCutToFit) {
  RadixCache c(8);
  const Tokens a = iota_tokens(6, 1), b = iota_tokens(6, 50);
  c.insert(a.data(), 6, 0, 0);
  auto m = c.match(a.data(), 6, 0, 6);
  c.lock(m.node);
  auto r = c.insert(b.data(), 6, 0, 1);
  EXPECT_EQ(r.added, 2);  // only what fits
  EXPECT_TRUE(r.evicted.empty());
  EXPECT_EQ(c.match(a.data(), 6, 0, 6).tokens, 6);
  EXPECT_EQ(c.size(), 8);
  c.unlock(m.node);
  r = c.insert(b.data(), 6, 0, 1);  // now a can go
  EXPECT_EQ(r.cached, 6);
  EXPECT_LE(c.size(), 8);
  EXPECT_EQ(c.check_invariants(), "");
}

TEST(PrefixRadix, ExtraKeysHaveTheirOwnTrees) {
  RadixCache c(100);
  const Tokens a = iota_tokens(6, 1);
  c.insert(a.data(), 6, 3, 0);
  EXPECT_EQ(c.match(a.data(), 6, 3, 6).tokens, 6);
  EXPECT_EQ(c.match(a.data(), 6, 4, 6).tokens, 0);
  EXPECT_EQ(c.check_invariants(), "");
}

using PathSet = std::set<std::pair<uint64_t, Tokens>>;

// Every prefix (length >= 1) of every cached path: one entry per cached token.
PathSet prefixes_of(const std::vector<std::pair<uint64_t, Tokens>>& leaves) {
  PathSet s;
  for (const auto& [extra, path] : leaves)
    for (size_t k = 1; k <= path.size(); ++k)
      s.insert({extra, Tokens(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(k))});
  return s;
}
int longest_in(const PathSet& s, uint64_t extra, const Tokens& q, int limit) {
  int best = 0;
  for (int k = 1; k <= limit; ++k)
    if (s.count({extra, Tokens(q.begin(), q.begin() + k)}))
      best = k;
    else
      break;
  return best;
}

TEST(PrefixRadix, SplitMergeAndEvictionAgreeWithABruteForceModel) {
  int64_t merges = 0, splits = 0, evictions = 0;
  for (uint64_t seed : {11, 12, 13, 14}) {
    std::mt19937_64 rng(seed);
    const int64_t cap = 40;
    RadixCache c(cap);
    PathSet model;  // the cached content as a prefix-closed set
    struct Locked {
      RadixCache::NodeId node;
      uint64_t extra;
      Tokens prefix;
    };
    std::vector<Locked> locked;
    auto random_prompt = [&] {
      Tokens t;
      const int family = static_cast<int>(rng() % 3);
      for (int k = static_cast<int>(rng() % 8); k > 0; --k) t.push_back(family * 10 + static_cast<int32_t>(rng() % 2));
      for (int k = 1 + static_cast<int>(rng() % 5); k > 0; --k) t.push_back(static_cast<int32_t>(rng() % 4));
      return t;
    };
    for (int step = 0; step < 600; ++step) {
      const Tokens t = random_prompt();
      const uint64_t extra = rng() % 4 == 0 ? 1 : 0;
      const int n = static_cast<int>(t.size());
      if (rng() % 3 == 0) {
        // A match (locked for a while, like a running request's prefix).
        const int limit = n - 1;
        auto m = c.match(t.data(), n, extra, limit);
        ASSERT_EQ(m.tokens, longest_in(model, extra, t, limit)) << "step " << step;
        int covered = 0;
        for (const auto& r : m.runs) {
          ASSERT_EQ(r.pos, covered);
          covered += r.len;
        }
        ASSERT_EQ(covered, m.tokens);
        c.lock(m.node);
        locked.push_back({m.node, extra, Tokens(t.begin(), t.begin() + m.tokens)});
      } else {
        const auto before = c.evictable_leaves();
        const PathSet old = model;
        auto r = c.insert(t.data(), n, extra, step);
        const PathSet now = prefixes_of(c.leaf_paths());
        // No phantom content: what is cached now was cached before or is this prompt's.
        for (const auto& p : now)
          if (!old.count(p)) {
            ASSERT_EQ(p.first, extra);
            ASSERT_TRUE(std::equal(p.second.begin(), p.second.end(), t.begin())) << "step " << step;
          }
        // The prompt is cached up to r.cached.
        ASSERT_EQ(longest_in(now, extra, t, n), r.cached) << "step " << step;
        // Locked prefixes survive.
        for (const auto& l : locked)
          for (size_t k = 1; k <= l.prefix.size(); ++k)
            ASSERT_TRUE(now.count({l.extra, Tokens(l.prefix.begin(), l.prefix.begin() + static_cast<std::ptrdiff_t>(k))}))
                << "step " << step;
        // A cut insert means nothing else was evictable.
        auto on_prompt = [&](const RadixCache::Leaf& e) {
          return e.extra_key == extra && e.path.size() <= t.size() && std::equal(e.path.begin(), e.path.end(), t.begin());
        };
        if (r.cached < n) {
          for (const auto& e : c.evictable_leaves()) ASSERT_TRUE(on_prompt(e)) << "step " << step;
        }
        // LRU: every leaf evicted was used no later than every evictable leaf that stayed.
        uint64_t newest_removed = 0, oldest_kept = UINT64_MAX;
        for (const auto& e : before) {
          if (!now.count({e.extra_key, e.path}))
            newest_removed = std::max(newest_removed, e.last_use);
          else if (!on_prompt(e))
            oldest_kept = std::min(oldest_kept, e.last_use);
        }
        if (!r.evicted.empty()) {
          ASSERT_LE(newest_removed, oldest_kept) << "step " << step;
        }
        model = now;
        evictions += r.evicted_nodes;
      }
      while (!locked.empty() && (locked.size() > 3 || rng() % 2)) {
        const size_t k = rng() % locked.size();
        c.unlock(locked[k].node);
        locked.erase(locked.begin() + static_cast<std::ptrdiff_t>(k));
      }
      ASSERT_EQ(c.check_invariants(), "") << "step " << step;
      ASSERT_LE(c.size(), cap);
      ASSERT_EQ(c.size(), static_cast<int64_t>(model.size())) << "one cached token per distinct prefix";
      ASSERT_EQ(prefixes_of(c.leaf_paths()), model);
    }
    for (const auto& l : locked) c.unlock(l.node);
    merges += c.merges();
    splits += c.splits();
  }
  EXPECT_GT(merges, 10);
  EXPECT_GT(splits, 10);
  EXPECT_GT(evictions, 50);
}

}  // namespace
}  // namespace ib::prefix
