// Interning of int32 tuples: equal tuples get equal ids (0, 1, 2, ... in order of first sight),
// stored back to back in one arena and found through an open-addressing table of ids.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "numerics/random.h"

namespace ib::constrain {

class TupleInterner {
 public:
  TupleInterner() : slots_(1024, -1) {
    start_.reserve(512);  // (also keeps GCC from reading start_ as a one-element array under inlining)
    start_.push_back(0);
  }

  // The tuple's id; `fresh` (if given) tells whether it was new.
  int32_t intern(const std::vector<int32_t>& t, bool* fresh = nullptr) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ t.size();
    for (int32_t x : t) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull;
    h = mix64(h);
    size_t mask = slots_.size() - 1;
    for (size_t i = static_cast<size_t>(h) & mask;; i = (i + 1) & mask) {
      const int32_t id = slots_[i];
      if (id < 0) break;
      if (hash_[static_cast<size_t>(id)] == h && equal(id, t)) {
        if (fresh) *fresh = false;
        return id;
      }
    }
    if (fresh) *fresh = true;
    const int32_t id = static_cast<int32_t>(hash_.size());
    arena_.insert(arena_.end(), t.begin(), t.end());
    start_.push_back(static_cast<uint32_t>(arena_.size()));
    hash_.push_back(h);
    if (hash_.size() * 2 > slots_.size()) {
      slots_.assign(slots_.size() * 2, -1);
      mask = slots_.size() - 1;
      for (int32_t j = 0; j < id; ++j) place(j, mask);
    }
    place(id, mask);
    return id;
  }
  size_t size() const { return hash_.size(); }
  size_t entries() const { return arena_.size(); }  // elements of every tuple together
  // Tuple `id` as [begin, end) (valid until the next intern).
  const int32_t* begin(int32_t id) const { return arena_.data() + start_[static_cast<size_t>(id)]; }
  const int32_t* end(int32_t id) const { return arena_.data() + start_[static_cast<size_t>(id) + 1]; }

 private:
  void place(int32_t id, size_t mask) {
    size_t i = static_cast<size_t>(hash_[static_cast<size_t>(id)]) & mask;
    while (slots_[i] >= 0) i = (i + 1) & mask;
    slots_[i] = id;
  }
  bool equal(int32_t id, const std::vector<int32_t>& t) const {
    return static_cast<size_t>(end(id) - begin(id)) == t.size() && std::equal(t.begin(), t.end(), begin(id));
  }
  std::vector<int32_t> arena_;
  std::vector<uint32_t> start_;  // tuple i: arena_[start_[i], start_[i + 1])
  std::vector<uint64_t> hash_;
  std::vector<int32_t> slots_;
};

}  // namespace ib::constrain
