// The live sequences of an engine, shared by the CPU and CUDA models: a sequence id is its index,
// and a released id is reused by the next new sequence. S has `bool live` and a `cache` with
// bytes().
#pragma once

#include <cstdint>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace ib::model {

template <class S>
class SequenceTable {
 public:
  // The lowest free id; its slot (slot(id)) is not live yet: the caller fills it and sets live.
  int free_id() {
    int id = 0;
    while (id < static_cast<int>(seqs_.size()) && seqs_[static_cast<size_t>(id)].live) ++id;
    if (id == static_cast<int>(seqs_.size())) seqs_.emplace_back();
    return id;
  }
  S& slot(int id) { return seqs_.at(static_cast<size_t>(id)); }
  S& at(int seq) {
    if (seq < 0 || seq >= static_cast<int>(seqs_.size()) || !seqs_[static_cast<size_t>(seq)].live)
      throw std::invalid_argument(fmt::format("no live sequence {}", seq));
    return seqs_[static_cast<size_t>(seq)];
  }
  const S& at(int seq) const { return const_cast<SequenceTable*>(this)->at(seq); }
  int live_count() const {
    int n = 0;
    for (const auto& s : seqs_) n += s.live ? 1 : 0;
    return n;
  }
  // Bytes of the caches of live sequences.
  int64_t cache_bytes() const {
    int64_t b = 0;
    for (const auto& s : seqs_)
      if (s.live) b += static_cast<int64_t>(s.cache.bytes());
    return b;
  }

 private:
  std::vector<S> seqs_;
};

}  // namespace ib::model
