#include "prefix/radix_cache.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace ib::prefix {
namespace {

// Splits `runs` (covering key positions [0, total)) into the first k tokens and the rest.
std::pair<std::vector<KvRun>, std::vector<KvRun>> split_runs(const std::vector<KvRun>& runs, int k) {
  std::vector<KvRun> a, b;
  int seen = 0;
  for (const KvRun& r : runs) {
    if (seen + r.len <= k)
      a.push_back(r);
    else if (seen >= k)
      b.push_back(r);
    else {
      const int left = k - seen;
      a.push_back({r.holder, r.pos, left});
      b.push_back({r.holder, r.pos + left, r.len - left});
    }
    seen += r.len;
  }
  return {std::move(a), std::move(b)};
}

}  // namespace

RadixCache::RadixCache(int64_t capacity_tokens) : capacity_(capacity_tokens) {
  if (capacity_ < 0) throw std::invalid_argument("capacity must not be negative");
}

RadixCache::NodeId RadixCache::new_node() {
  NodeId id;
  if (!spare_.empty()) {
    id = spare_.back();
    spare_.pop_back();
  } else {
    id = static_cast<NodeId>(nodes_.size());
    nodes_.emplace_back();
  }
  at(id) = Node{};
  at(id).live = true;
  ++live_nodes_;
  return id;
}

RadixCache::NodeId RadixCache::root_for(uint64_t extra_key) {
  auto it = roots_.find(extra_key);
  if (it != roots_.end()) return it->second;
  const NodeId id = new_node();
  at(id).root = true;
  at(id).extra_key = extra_key;
  roots_.emplace(extra_key, id);
  return id;
}

void RadixCache::refresh(NodeId id) {
  Node& n = at(id);
  if (n.in_evictable) {
    evictable_.erase({n.last_use, id});
    n.in_evictable = false;
  }
  if (n.live && !n.root && n.children.empty() && n.ref == 0) {
    evictable_.insert({n.last_use, id});
    n.in_evictable = true;
  }
}

void RadixCache::touch(NodeId id) {
  for (NodeId x = id; x >= 0; x = at(x).parent) {
    Node& n = at(x);
    if (n.in_evictable) {
      evictable_.erase({n.last_use, x});
      n.in_evictable = false;
    }
    n.last_use = clock_;
    refresh(x);
  }
}

void RadixCache::lock(NodeId node) {
  for (NodeId x = node; x >= 0; x = at(x).parent) {
    if (!at(x).live) throw std::logic_error("lock of an evicted node");
    ++at(x).ref;
    refresh(x);
  }
}

void RadixCache::unlock(NodeId node) {
  for (NodeId x = node; x >= 0; x = at(x).parent) {
    if (!at(x).live || at(x).ref <= 0) throw std::logic_error("unlock of an unlocked node");
    --at(x).ref;
    refresh(x);
  }
}

RadixCache::NodeId RadixCache::split(NodeId id, int k) {
  const NodeId up = new_node();  // may reallocate nodes_: take references after it
  Node& lo = at(id);
  Node& hi = at(up);
  hi.parent = lo.parent;
  hi.depth = lo.depth;
  hi.key.assign(lo.key.begin(), lo.key.begin() + k);
  auto parts = split_runs(lo.runs, k);
  hi.runs = std::move(parts.first);
  hi.ref = lo.ref;
  hi.last_use = lo.last_use;
  hi.extra_key = lo.extra_key;
  lo.key.erase(lo.key.begin(), lo.key.begin() + k);
  lo.runs = std::move(parts.second);
  lo.depth += k;
  lo.parent = up;
  hi.children.emplace(lo.key[0], id);
  at(hi.parent).children[hi.key[0]] = up;
  ++splits_;
  refresh(id);
  refresh(up);
  return up;
}

RadixCache::Match RadixCache::match(const int32_t* tokens, int n, uint64_t extra_key, int max_tokens) {
  ++clock_;
  Match res;
  const int limit = std::max(0, std::min(n, max_tokens));
  NodeId cur = root_for(extra_key);
  int m = 0;
  while (m < limit) {
    auto it = at(cur).children.find(tokens[m]);
    if (it == at(cur).children.end()) break;
    NodeId child = it->second;
    const int len = static_cast<int>(at(child).key.size());
    int k = 0;
    while (k < len && m + k < limit && at(child).key[static_cast<size_t>(k)] == tokens[m + k]) ++k;
    if (k < len) child = split(child, k);
    for (const KvRun& r : at(child).runs) append_run(res.runs, r);
    m += k;
    cur = child;
    if (k < len) break;
  }
  touch(cur);
  res.node = cur;
  res.tokens = m;
  return res;
}

RadixCache::InsertResult RadixCache::insert(const int32_t* tokens, int n, uint64_t extra_key, int holder) {
  ++clock_;
  InsertResult r;
  NodeId cur = root_for(extra_key);
  int m = 0;
  while (m < n) {
    auto it = at(cur).children.find(tokens[m]);
    if (it == at(cur).children.end()) break;
    NodeId child = it->second;
    const int len = static_cast<int>(at(child).key.size());
    int k = 0;
    while (k < len && m + k < n && at(child).key[static_cast<size_t>(k)] == tokens[m + k]) ++k;
    if (k < len) child = split(child, k);
    m += k;
    cur = child;
    if (k < len) break;
  }
  const int64_t need = n - m;
  if (need > 0) {
    lock(cur);  // the path we attach to must survive the eviction
    if (need > capacity_ - tokens_) evict(need - (capacity_ - tokens_), r);
    unlock(cur);
    const int add = static_cast<int>(std::min<int64_t>(need, capacity_ - tokens_));
    if (add > 0) {
      const NodeId leaf = new_node();
      Node& l = at(leaf);
      l.parent = cur;
      l.depth = m;
      l.key.assign(tokens + m, tokens + m + add);
      l.runs.push_back({holder, m, add});
      l.extra_key = extra_key;
      at(cur).children.emplace(tokens[m], leaf);
      refresh(cur);
      tokens_ += add;
      r.added = add;
      cur = leaf;
    }
  }
  touch(cur);
  r.node = cur;
  r.cached = m + r.added;
  return r;
}

void RadixCache::evict(int64_t need, InsertResult& r) {
  while (need > 0 && !evictable_.empty()) {
    const NodeId victim = evictable_.begin()->second;
    need -= static_cast<int64_t>(at(victim).key.size());
    remove_leaf(victim, &r);
  }
}

void RadixCache::remove_leaf(NodeId id, InsertResult* r) {
  Node& n = at(id);
  if (n.in_evictable) evictable_.erase({n.last_use, id});
  const NodeId parent = n.parent;
  at(parent).children.erase(n.key[0]);
  const int64_t len = static_cast<int64_t>(n.key.size());
  tokens_ -= len;
  evicted_tokens_ += len;
  if (r) {
    for (const KvRun& run : n.runs) r->evicted.push_back(run);
    ++r->evicted_nodes;
  }
  n = Node{};
  spare_.push_back(id);
  --live_nodes_;
  // A parent left with one child and no references is merged with it when that changes no
  // token's eviction time: its last use is the child's (it was last used on the way to it).
  Node& p = at(parent);
  if (!p.root && p.ref == 0 && p.children.size() == 1 && at(p.children.begin()->second).last_use == p.last_use)
    merge_into_parent(p.children.begin()->second);
  else
    refresh(parent);
}

void RadixCache::merge_into_parent(NodeId child) {
  Node& c = at(child);
  const NodeId pid = c.parent;
  Node& p = at(pid);
  if (c.in_evictable) evictable_.erase({c.last_use, child});
  if (p.in_evictable) {
    evictable_.erase({p.last_use, pid});
    p.in_evictable = false;
  }
  p.key.insert(p.key.end(), c.key.begin(), c.key.end());
  for (const KvRun& run : c.runs) append_run(p.runs, run);
  p.children = std::move(c.children);
  for (const auto& kv : p.children) at(kv.second).parent = pid;
  c = Node{};
  spare_.push_back(child);
  --live_nodes_;
  ++merges_;
  refresh(pid);
}

std::vector<KvRun> RadixCache::cached_runs() const {
  std::vector<KvRun> runs;
  for (const Node& n : nodes_)
    if (n.live && !n.root) runs.insert(runs.end(), n.runs.begin(), n.runs.end());
  return runs;
}

std::vector<KvRun> RadixCache::clear() {
  for (const Node& n : nodes_)
    if (n.live && n.ref > 0) throw std::logic_error("clear() while a node is locked");
  std::vector<KvRun> dropped;
  for (const Node& n : nodes_)
    if (n.live && !n.root)
      for (const KvRun& r : n.runs) dropped.push_back(r);
  nodes_.clear();
  spare_.clear();
  roots_.clear();
  evictable_.clear();
  tokens_ = 0;
  live_nodes_ = 0;
  return dropped;
}

std::vector<int32_t> RadixCache::path_of(NodeId id) const {
  std::vector<NodeId> chain;
  for (NodeId x = id; x >= 0; x = at(x).parent) chain.push_back(x);
  std::vector<int32_t> p;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) p.insert(p.end(), at(*it).key.begin(), at(*it).key.end());
  return p;
}

std::vector<std::pair<uint64_t, std::vector<int32_t>>> RadixCache::leaf_paths() const {
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.live && !n.root && n.children.empty()) out.emplace_back(n.extra_key, path_of(static_cast<NodeId>(i)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<RadixCache::Leaf> RadixCache::evictable_leaves() const {
  std::vector<Leaf> out;
  for (const auto& e : evictable_) out.push_back({e.first, at(e.second).extra_key, path_of(e.second)});
  return out;
}

std::string RadixCache::check_invariants() const {
  int64_t tokens = 0, live = 0, leaves = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.live) continue;
    ++live;
    const NodeId id = static_cast<NodeId>(i);
    if (n.ref < 0) return fmt::format("node {} has reference count {}", i, n.ref);
    for (const auto& [tok, c] : n.children) {
      if (c < 0 || static_cast<size_t>(c) >= nodes_.size() || !at(c).live) return fmt::format("node {} has a dead child", i);
      if (at(c).parent != id || at(c).key.empty() || at(c).key[0] != tok)
        return fmt::format("node {}'s child {} is linked wrong", i, c);
    }
    if (n.root) {
      auto it = roots_.find(n.extra_key);
      if (it == roots_.end() || it->second != id || !n.key.empty() || n.parent != -1 || n.depth != 0)
        return fmt::format("root {} is malformed", i);
      continue;
    }
    if (n.key.empty()) return fmt::format("node {} holds no tokens", i);
    tokens += static_cast<int64_t>(n.key.size());
    const Node& p = at(n.parent);
    if (!p.live) return fmt::format("node {}'s parent is dead", i);
    if (n.depth != p.depth + static_cast<int>(p.key.size()))
      return fmt::format("node {} is at depth {}, its parent ends at {}", i, n.depth, p.depth + p.key.size());
    if (n.extra_key != p.extra_key) return fmt::format("node {} is under another extra key's root", i);
    if (p.ref < n.ref) return fmt::format("node {} has {} references, its parent {}", i, n.ref, p.ref);
    if (p.last_use < n.last_use) return fmt::format("node {} was used after its parent", i);
    int pos = n.depth, covered = 0;
    for (const KvRun& r : n.runs) {
      if (r.pos != pos || r.len <= 0 || r.holder < 0) return fmt::format("node {}'s K/V runs do not cover its positions", i);
      pos += r.len;
      covered += r.len;
    }
    if (covered != static_cast<int>(n.key.size()))
      return fmt::format("node {}'s runs cover {} of {} tokens", i, covered, n.key.size());
    const bool should = n.children.empty() && n.ref == 0;
    leaves += should;
    if (should != n.in_evictable || (should && !evictable_.count({n.last_use, id})))
      return fmt::format("node {} is {} the evictable set", i, n.in_evictable ? "wrongly in" : "missing from");
  }
  if (tokens != tokens_) return fmt::format("nodes hold {} tokens, counted {}", tokens, tokens_);
  if (tokens_ > capacity_) return fmt::format("{} tokens cached, capacity {}", tokens_, capacity_);
  if (live != live_nodes_) return fmt::format("{} live nodes, counted {}", live, live_nodes_);
  if (leaves != static_cast<int64_t>(evictable_.size()))
    return fmt::format("{} evictable leaves, the set holds {}", leaves, evictable_.size());
  return {};
}

}  // namespace ib::prefix
