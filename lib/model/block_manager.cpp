#include "model/block_manager.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace ib::kvcache {

BlockManager::BlockManager(int num_blocks, int block_size) : block_size_(block_size) {
  if (num_blocks < 0 || block_size <= 0) throw std::invalid_argument("BlockManager: need num_blocks >= 0 and block_size > 0");
  refs_.assign(static_cast<size_t>(num_blocks), 0);
  // Block 0 on top of the stack: a fresh pool hands out 0, 1, 2, ...
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

BlockManager::Seq& BlockManager::seq(SeqId s) {
  if (s < 0 || static_cast<size_t>(s) >= seqs_.size() || !seqs_[static_cast<size_t>(s)].alive)
    throw std::invalid_argument(fmt::format("BlockManager: no live sequence {}", s));
  return seqs_[static_cast<size_t>(s)];
}
const BlockManager::Seq& BlockManager::seq(SeqId s) const { return const_cast<BlockManager*>(this)->seq(s); }

bool BlockManager::alive(SeqId s) const {
  return s >= 0 && static_cast<size_t>(s) < seqs_.size() && seqs_[static_cast<size_t>(s)].alive;
}
int BlockManager::length(SeqId s) const { return seq(s).length; }
const std::vector<int32_t>& BlockManager::table(SeqId s) const { return seq(s).table; }

std::vector<BlockManager::SeqId> BlockManager::sequences() const {
  std::vector<SeqId> out;
  for (size_t i = 0; i < seqs_.size(); ++i)
    if (seqs_[i].alive) out.push_back(static_cast<SeqId>(i));
  return out;
}

BlockManager::SeqId BlockManager::create() {
  seqs_.push_back(Seq{true, 0, {}});
  return static_cast<SeqId>(seqs_.size() - 1);
}

int32_t BlockManager::take_free() {
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockManager::release(int32_t block) {
  int& r = refs_[static_cast<size_t>(block)];
  if (r <= 0) throw std::logic_error(fmt::format("BlockManager: block {} released with reference count {}", block, r));
  if (--r == 0) free_.push_back(block);
}

int BlockManager::blocks_needed(SeqId s, int tokens) const {
  const Seq& q = seq(s);
  const int have = static_cast<int>(q.table.size());
  const int want = (q.length + tokens + block_size_ - 1) / block_size_;
  int n = std::max(0, want - have);
  // Writing into a shared, partly filled last block needs a private copy first.
  if (tokens > 0 && q.length % block_size_ != 0 && refs_[static_cast<size_t>(q.table.back())] > 1) ++n;
  return n;
}

bool BlockManager::append(SeqId s, int tokens) {
  if (tokens < 0) throw std::invalid_argument("BlockManager::append: negative token count");
  if (tokens == 0) return true;
  if (blocks_needed(s, tokens) > free_blocks()) return false;
  Seq& q = seq(s);
  if (q.length % block_size_ != 0 && refs_[static_cast<size_t>(q.table.back())] > 1) {
    const int32_t src = q.table.back();
    const int32_t dst = take_free();
    release(src);
    q.table.back() = dst;
    copies_.emplace_back(src, dst);
    ++copies_made_;
  }
  q.length += tokens;
  while (static_cast<int>(q.table.size()) * block_size_ < q.length) q.table.push_back(take_free());
  return true;
}

BlockManager::SeqId BlockManager::fork(SeqId parent) {
  Seq child = seq(parent);
  for (int32_t b : child.table) ++refs_[static_cast<size_t>(b)];
  seqs_.push_back(std::move(child));
  return static_cast<SeqId>(seqs_.size() - 1);
}

void BlockManager::free(SeqId s) {
  Seq& q = seq(s);
  for (int32_t b : q.table) release(b);
  q = Seq{};
}

void BlockManager::truncate(SeqId s, int length) {
  Seq& q = seq(s);
  if (length < 0 || length > q.length)
    throw std::invalid_argument(fmt::format("BlockManager::truncate: length {} of {}", length, q.length));
  const size_t keep = static_cast<size_t>((length + block_size_ - 1) / block_size_);
  while (q.table.size() > keep) {
    release(q.table.back());
    q.table.pop_back();
  }
  q.length = length;
}

std::vector<std::pair<int32_t, int32_t>> BlockManager::take_copies() { return std::exchange(copies_, {}); }

void BlockManager::check_invariants() const {
  std::vector<int> held(refs_.size(), 0);
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const Seq& q = seqs_[i];
    if (!q.alive) continue;
    const size_t want = static_cast<size_t>((q.length + block_size_ - 1) / block_size_);
    if (q.table.size() != want)
      throw std::logic_error(fmt::format("sequence {}: {} blocks for {} tokens (want {})", i, q.table.size(), q.length, want));
    for (int32_t b : q.table) {
      if (b < 0 || static_cast<size_t>(b) >= refs_.size())
        throw std::logic_error(fmt::format("sequence {}: block {} out of the pool", i, b));
      ++held[static_cast<size_t>(b)];
    }
  }
  std::vector<char> is_free(refs_.size(), 0);
  for (int32_t b : free_) {
    if (is_free[static_cast<size_t>(b)]) throw std::logic_error(fmt::format("block {} twice on the free list", b));
    is_free[static_cast<size_t>(b)] = 1;
  }
  for (size_t b = 0; b < refs_.size(); ++b) {
    if (refs_[b] != held[b])
      throw std::logic_error(fmt::format("block {}: reference count {} but {} tables hold it", b, refs_[b], held[b]));
    if (is_free[b] && held[b]) throw std::logic_error(fmt::format("block {} is free and referenced", b));
    if (!is_free[b] && !held[b]) throw std::logic_error(fmt::format("block {} leaked: neither free nor referenced", b));
  }
}

}  // namespace ib::kvcache
