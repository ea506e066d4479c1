// A radix tree over token sequences, as SGLang's RadixAttention keeps it.
//
// Each node holds a run of tokens (the edge from its parent) and where their K/V lives; a path
// from a root spells a cached prefix. Matches are token-granular: a match that ends inside a
// node splits it there, so the matched prefix always ends at a node. Nodes carry reference counts
// (lock() on a node counts on its whole path: a running request pins its prefix) and the time of
// their last use (a logical clock: one tick per match or insert). When room is needed, the least
// recently used unreferenced leaf is evicted; its parent, left with a single child, no references
// and the same last use as that child, is merged with it (fewer, longer nodes; no token's eviction
// time changes). Capacity is in tokens and never exceeded:
// an insert that cannot make room (everything else pinned) caches only the tokens that fit.
// Each extra key (e.g. a LoRA adapter id) has its own root, so adapters never share K/V.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "prefix/kv_run.h"

namespace ib::prefix {

class RadixCache {
 public:
  using NodeId = int32_t;

  struct Match {
    NodeId node = -1;         // the matched prefix ends at this node (a root when nothing matched)
    int tokens = 0;           // tokens matched
    std::vector<KvRun> runs;  // where they live, in position order
  };

  struct InsertResult {
    NodeId node = -1;            // the node the cached part of the prompt ends at
    int cached = 0;              // tokens of the prompt now cached (matched + added)
    int added = 0;               // tokens newly cached (K/V in `holder`)
    std::vector<KvRun> evicted;  // K/V of evicted tokens
    int evicted_nodes = 0;
  };

  explicit RadixCache(int64_t capacity_tokens);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return tokens_; }  // cached tokens
  int64_t evictable_count() const { return static_cast<int64_t>(evictable_.size()); }
  int64_t evicted_tokens() const { return evicted_tokens_; }
  int64_t merges() const { return merges_; }
  int64_t splits() const { return splits_; }
  int64_t nodes() const { return live_nodes_; }

  // The longest cached prefix of tokens[0, n) under `extra_key`, at most `max_tokens` long;
  // splits the node the match ends inside and marks the path used.
  Match match(const int32_t* tokens, int n, uint64_t extra_key, int max_tokens);
  void lock(NodeId node);    // +1 reference on node and every ancestor
  void unlock(NodeId node);  // -1 on the same path

  // Caches tokens[0, n) whose K/V is in sequence `holder` at positions equal to the token
  // indices: the part not cached yet becomes a new leaf, after evicting LRU leaves for room.
  InsertResult insert(const int32_t* tokens, int n, uint64_t extra_key, int holder);

  // Where every cached token's K/V lives.
  std::vector<KvRun> cached_runs() const;
  // Drops every node; nothing may be locked. Returns the K/V of the dropped tokens.
  std::vector<KvRun> clear();

  // Introspection for tests: every root-to-leaf token path (extra key first), and the
  // evictable leaves in eviction order.
  struct Leaf {
    uint64_t last_use = 0, extra_key = 0;
    std::vector<int32_t> path;
  };
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> leaf_paths() const;
  std::vector<Leaf> evictable_leaves() const;
  uint64_t clock() const { return clock_; }
  // "" when every invariant holds: tokens counted right and within capacity, children keyed by
  // their first token, no empty non-root node, runs cover each node at its positions, a parent's
  // references >= its children's and its last use >= theirs, the evictable set is exactly the
  // unreferenced non-root leaves.
  std::string check_invariants() const;

 private:
  struct Node {
    bool live = false;
    NodeId parent = -1;
    int depth = 0;                                 // tokens before this node's first token
    std::vector<int32_t> key;                      // the edge's tokens
    std::vector<KvRun> runs;                       // their K/V, covering positions [depth, depth + key.size())
    std::unordered_map<int32_t, NodeId> children;  // by first token
    int ref = 0;
    uint64_t last_use = 0;
    uint64_t extra_key = 0;
    bool root = false;
    bool in_evictable = false;
  };

  NodeId root_for(uint64_t extra_key);
  NodeId new_node();
  Node& at(NodeId id) { return nodes_[static_cast<size_t>(id)]; }
  const Node& at(NodeId id) const { return nodes_[static_cast<size_t>(id)]; }
  // Splits `id` after `k` tokens; returns the new upper node (which keeps id's parent link).
  NodeId split(NodeId id, int k);
  void touch(NodeId id);    // last use = now on the path
  void refresh(NodeId id);  // keeps the evictable set in step with id's state
  void evict(int64_t need, InsertResult& r);
  void remove_leaf(NodeId id, InsertResult* r);
  void merge_into_parent(NodeId child);  // parent absorbs its only child
  std::vector<int32_t> path_of(NodeId id) const;

  int64_t capacity_;
  int64_t tokens_ = 0, evicted_tokens_ = 0, merges_ = 0, splits_ = 0, live_nodes_ = 0;
  uint64_t clock_ = 0;
  std::vector<Node> nodes_;
  std::vector<NodeId> spare_;
  std::unordered_map<uint64_t, NodeId> roots_;
  std::set<std::pair<uint64_t, NodeId>> evictable_;  // (last use, node): LRU first
};

}  // namespace ib::prefix
