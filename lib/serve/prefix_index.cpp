#include "serve/prefix_index.h"

#include <algorithm>
#include <stdexcept>

namespace ib::serve {

using prefix::Hash128;

PrefixIndex::PrefixIndex(int block_size, int hash_bits)
    : bs_(block_size), hash_bits_(hash_bits), block_(static_cast<size_t>(std::max(block_size, 0))) {
  if (block_size <= 0) throw std::invalid_argument("block_size must be positive");
  if (hash_bits < 1 || hash_bits > 128) throw std::invalid_argument("hash_bits must be 1 … 128");
}

Hash128 PrefixIndex::key_of(const Hash128& parent, const int32_t* tokens, int adapter) const {
  // The adapter is part of the key: a LoRA adapter changes K and V, so its blocks are its own.
  Hash128 h = prefix::hash_block(parent, tokens, bs_, static_cast<uint64_t>(static_cast<int64_t>(adapter)));
  if (hash_bits_ < 64) {
    h.hi = 0;
    h.lo &= (uint64_t{1} << hash_bits_) - 1;
  } else if (hash_bits_ < 128) {
    h.hi &= (uint64_t{1} << (hash_bits_ - 64)) - 1;
  }
  return h;
}

bool PrefixIndex::same(const Entry& e, const Hash128& parent, const int32_t* tokens, int adapter) {
  return e.parent == parent && e.adapter == adapter && std::equal(e.tokens.begin(), e.tokens.end(), tokens);
}

const PrefixIndex::Entry* PrefixIndex::find(const Hash128& parent, const int32_t* tokens, int adapter, Hash128* key) const {
  *key = key_of(parent, tokens, adapter);
  const auto it = entries_.find(*key);
  return it != entries_.end() && same(it->second, parent, tokens, adapter) ? &it->second : nullptr;
}

void PrefixIndex::add_block(int seq, int adapter, Chain& chain) {
  const Hash128 parent = chain.keys.empty() ? prefix::kRootHash : chain.keys.back();
  const Hash128 key = key_of(parent, block_.data(), adapter);
  const auto it = entries_.find(key);
  if (it == entries_.end()) {
    entries_.emplace(key, Entry{parent, adapter, block_, {seq}, {}});
  } else if (same(it->second, parent, block_.data(), adapter)) {
    it->second.seqs.push_back(seq);
  } else {
    chain.stopped = true;  // a collision: the key names other contents
    return;
  }
  chain.keys.push_back(key);
}

void PrefixIndex::drop_tail(int seq, Chain& chain, size_t keep) {
  while (chain.keys.size() > keep) {
    const auto it = entries_.find(chain.keys.back());
    std::vector<int>& seqs = it->second.seqs;
    seqs.erase(std::find(seqs.begin(), seqs.end(), seq));
    if (seqs.empty()) entries_.erase(it);
    chain.keys.pop_back();
    chain.stopped = false;  // the block that collided is no longer next
  }
}

void PrefixIndex::remove(int seq) {
  const auto it = chains_.find(seq);
  if (it == chains_.end()) return;
  unmark_end(seq, it->second);
  drop_tail(seq, it->second, 0);
  chains_.erase(it);
}

std::vector<int>& PrefixIndex::end_list(const Chain& chain) {
  return chain.keys.empty() ? root_ends_ : entries_.at(chain.keys.back()).ends;
}

void PrefixIndex::unmark_end(int seq, const Chain& chain) {
  std::vector<int>& ends = end_list(chain);
  ends.erase(std::find(ends.begin(), ends.end(), seq));
}

const std::vector<int>* PrefixIndex::holders(int seq, int block) const {
  const Hash128* k = key(seq, block);
  return k ? &entries_.at(*k).seqs : nullptr;
}

std::vector<int> PrefixIndex::ending_along(int seq, size_t per_block) const {
  std::vector<int> out;
  auto take = [&](const std::vector<int>& ends) {
    const size_t from = ends.size() > per_block ? ends.size() - per_block : 0;
    for (size_t i = from; i < ends.size(); ++i)
      if (ends[i] != seq) out.push_back(ends[i]);
  };
  take(root_ends_);
  if (const auto it = chains_.find(seq); it != chains_.end())
    for (const Hash128& k : it->second.keys) take(entries_.at(k).ends);
  return out;
}

const Hash128* PrefixIndex::key(int seq, int block) const {
  const auto it = chains_.find(seq);
  if (it == chains_.end() || block < 0 || static_cast<size_t>(block) >= it->second.keys.size()) return nullptr;
  return &it->second.keys[static_cast<size_t>(block)];
}

PrefixIndex::Match PrefixIndex::longest(const int32_t* tokens, int n, int adapter) const {
  Match m;
  Hash128 parent = prefix::kRootHash, key;
  const Entry* last = nullptr;
  for (int first = 0; first + bs_ <= n; first += bs_) {
    const Entry* e = find(parent, tokens + first, adapter, &key);
    if (!e) break;
    last = e;
    ++m.blocks;
    parent = key;
  }
  if (last) m.seqs = last->seqs;
  return m;
}

}  // namespace ib::serve
