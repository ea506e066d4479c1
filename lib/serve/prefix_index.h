// The prefix cache's lookup table (vLLM's automatic prefix caching): every full KV block of every
// sequence a new request may share from, under its chained hash. Block i of a sequence is keyed by
// hash(key of block i-1, the block's tokens, the LoRA adapter), so one probe per block finds the
// longest cached prefix of a prompt, whatever the number and length of the cached sequences (a
// scan compares every cached token). Every probe also compares the block's tokens, adapter and
// parent key, so a hash collision is a miss, never a wrong hit.
//
// The blocks themselves are the engine's, shared by reference count (Model::share_prefix); this
// table only says which sequences hold the K/V of a prefix. Many sequences hold the same block
// when they share it (or computed the same tokens): a block is listed while any of them does.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "prefix/block_hash_cache.h"

namespace ib::serve {

class PrefixIndex {
 public:
  // hash_bits < 128 (tests only) keeps that many bits of each key, to force collisions.
  explicit PrefixIndex(int block_size, int hash_bits = 128);

  int block_size() const { return bs_; }
  int64_t blocks() const { return static_cast<int64_t>(entries_.size()); }  // distinct blocks listed
  int sequences() const { return static_cast<int>(chains_.size()); }

  // Sequence `seq` (LoRA adapter `adapter`, -1 for none) holds the K/V of its first `n` tokens,
  // token_at(i) for i < n: its full blocks are listed (the new ones hashed), those past n dropped.
  // Cheap when nothing crossed a block boundary (every step calls it for every running request).
  template <class TokenAt>
  void update(int seq, int adapter, int n, TokenAt token_at) {
    const auto [at, added] = chains_.try_emplace(seq);
    Chain& chain = at->second;
    if (added) root_ends_.push_back(seq);
    const size_t full = static_cast<size_t>(n / bs_);
    if (chain.keys.size() == full || (chain.keys.size() < full && chain.stopped)) return;
    unmark_end(seq, chain);
    if (chain.keys.size() > full) drop_tail(seq, chain, full);
    while (chain.keys.size() < full && !chain.stopped) {
      const int first = static_cast<int>(chain.keys.size()) * bs_;
      for (int i = 0; i < bs_; ++i) block_[static_cast<size_t>(i)] = token_at(first + i);
      add_block(seq, adapter, chain);
    }
    mark_end(seq, chain);
  }
  void remove(int seq);  // its blocks unlisted (released, or preempted)

  // The longest run of full blocks of tokens[0, n) listed under `adapter`: how many blocks, and
  // the sequences holding all of them (each holds at least blocks·block_size tokens of this prefix).
  struct Match {
    int blocks = 0;
    std::vector<int> seqs;
  };
  Match longest(const int32_t* tokens, int n, int adapter) const;
  // The key of `seq`'s block `block` (it names the whole prefix up to that block's end), or
  // nullptr when that block is not listed.
  const prefix::Hash128* key(int seq, int block) const;
  // The sequences holding `seq`'s block `block` (seq among them), in the order they were listed;
  // nullptr when that block is not listed.
  const std::vector<int>* holders(int seq, int block) const;
  // Sequences whose listed blocks all belong to `seq`'s (the candidates for a prefix of it: their
  // listed run ends at one of its blocks, or they have none), at most `per_block` of the most
  // recently listed at each block; seq itself left out.
  std::vector<int> ending_along(int seq, size_t per_block) const;

 private:
  struct Entry {
    prefix::Hash128 parent;
    int adapter = -1;
    std::vector<int32_t> tokens;  // the block's, for the collision check
    std::vector<int> seqs;        // holders
    std::vector<int> ends;        // holders whose listed run ends here
  };
  struct HashOf {
    size_t operator()(const prefix::Hash128& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull)); }
  };
  struct Chain {
    std::vector<prefix::Hash128> keys;  // its listed blocks' keys, in order
    bool stopped = false;               // the next block's key is taken by other contents: nothing more listed
  };
  static bool same(const Entry& e, const prefix::Hash128& parent, const int32_t* tokens, int adapter);
  prefix::Hash128 key_of(const prefix::Hash128& parent, const int32_t* tokens, int adapter) const;
  // The listed entry for block `tokens` after `parent` under `adapter`, or nullptr.
  const Entry* find(const prefix::Hash128& parent, const int32_t* tokens, int adapter, prefix::Hash128* key) const;
  void add_block(int seq, int adapter, Chain& chain);  // block_ after the chain's last
  void drop_tail(int seq, Chain& chain, size_t keep);
  std::vector<int>& end_list(const Chain& chain);  // where a sequence with this chain is listed as ending
  void unmark_end(int seq, const Chain& chain);
  void mark_end(int seq, const Chain& chain) { end_list(chain).push_back(seq); }

  int bs_;
  int hash_bits_;
  std::vector<int32_t> block_;  // update's staging block
  std::unordered_map<prefix::Hash128, Entry, HashOf> entries_;
  std::unordered_map<int, Chain> chains_;
  std::vector<int> root_ends_;  // listed sequences with no block
};

}  // namespace ib::serve
