// PagedAttention's block manager (vLLM): a pool of fixed-size KV blocks, a free list, a block
// table per sequence, reference counts, and copy-on-write when a sequence that shares its last,
// partly filled block with a fork appends to it. It only does the bookkeeping: the caller moves
// the data, copying each (src, dst) pair `take_copies()` returns before writing the new tokens.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace ib::kvcache {

class BlockManager {
 public:
  using SeqId = int;

  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(refs_.size()); }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int used_blocks() const { return num_blocks() - free_blocks(); }
  int ref_count(int block) const { return refs_[static_cast<size_t>(block)]; }

  // A new, empty sequence.
  SeqId create();
  // Grows the sequence by `tokens`, allocating blocks as needed (and copying-on-write its last
  // block if it is shared and not full). Returns false, changing nothing, when the free list
  // cannot supply the blocks.
  bool append(SeqId s, int tokens = 1);
  // Blocks `append(s, tokens)` would need (including a copy-on-write block).
  int blocks_needed(SeqId s, int tokens) const;
  // A new sequence sharing every block of `parent` (reference counts +1), same length.
  SeqId fork(SeqId parent);
  // Drops the sequence; blocks whose count reaches 0 return to the free list.
  void free(SeqId s);
  // Shortens the sequence to `length` tokens, releasing the blocks past it.
  void truncate(SeqId s, int length);

  bool alive(SeqId s) const;
  int length(SeqId s) const;
  const std::vector<int32_t>& table(SeqId s) const;
  std::vector<SeqId> sequences() const;

  // Copy-on-write copies made since the last call: (source block, destination block).
  std::vector<std::pair<int32_t, int32_t>> take_copies();
  int64_t copies_made() const { return copies_made_; }

  // Throws std::logic_error when the bookkeeping is inconsistent: a reference count differs from
  // the number of live tables holding the block, a block is both free and referenced or neither
  // (leaked), a table is too short or too long for its length.
  void check_invariants() const;

 private:
  struct Seq {
    bool alive = false;
    int length = 0;
    std::vector<int32_t> table;
  };
  int32_t take_free();
  void release(int32_t block);
  Seq& seq(SeqId s);
  const Seq& seq(SeqId s) const;

  int block_size_;
  std::vector<int> refs_;
  std::vector<int32_t> free_;  // stack: the most recently freed block is reused first
  std::vector<Seq> seqs_;
  std::vector<std::pair<int32_t, int32_t>> copies_;
  int64_t copies_made_ = 0;
};

}  // namespace ib::kvcache
