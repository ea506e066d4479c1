// The CPU engine's sequence bookkeeping: a sequence's KV cache allocated, released, forked,
// truncated and copied into another (prefix reuse), with its eviction marks and format.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "model/cpu_model_internal.h"

namespace ib::model::cpu_detail {

int CpuModel::new_sequence(int capacity) {
  if (capacity <= 0) throw std::invalid_argument("sequence capacity must be positive");
  const int id = seqs_.free_id();
  Sequence& s = seqs_.slot(id);
  s.cache.allocate(static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(capacity), "KV cache");
  s.capacity = capacity;
  s.length = 0;
  s.live = true;
  s.evicted.clear();
  s.evicted_head.clear();
  s.recording = false;
  s.record = {};
  s.kv_format.reset();
  s.fp8_scale.clear();
  s.tree.close();
  s.adapter = -1;
  return id;
}
void CpuModel::release(int seq) { seqs_.release(seq); }
int CpuModel::fork(int seq) {
  no_tree(seq, "fork");
  const int src_capacity = at(seq).capacity;
  const int id = new_sequence(src_capacity);
  Sequence& src = at(seq);  // new_sequence may have grown seqs_
  Sequence& dst = at(id);
  std::memcpy(dst.cache.data(), src.cache.data(), src.cache.bytes());
  dst.length = src.length;
  dst.evicted = src.evicted;
  dst.evicted_head = src.evicted_head;
  dst.kv_format = src.kv_format;
  dst.fp8_scale = src.fp8_scale;
  dst.adapter = src.adapter;
  return id;
}
void CpuModel::truncate(int seq, int length) { seqs_.truncate(seq, length); }
void CpuModel::copy_cache(int src, int dst, int begin, int n) {
  no_tree(src, "copy_cache");
  no_tree(dst, "copy_cache");
  Sequence& s = at(src);
  Sequence& d = at(dst);
  if (begin < 0 || n < 0 || d.length < begin || s.length < begin + n || begin + n > d.capacity)
    throw std::invalid_argument(fmt::format("copy_cache [{}, {}) from a {}-token into a {}-token sequence (capacity {})", begin,
                                            begin + n, s.length, d.length, d.capacity));
  const size_t hd = static_cast<size_t>(c_.head_dim);
  for (int l = 0; l < c_.layers; ++l)
    for (int kh = 0; kh < c_.kv_heads; ++kh) {
      std::memcpy(cache_k(d, l, kh) + static_cast<size_t>(begin) * hd, cache_k(s, l, kh) + static_cast<size_t>(begin) * hd,
                  sizeof(float) * hd * static_cast<size_t>(n));
      std::memcpy(cache_v(d, l, kh) + static_cast<size_t>(begin) * hd, cache_v(s, l, kh) + static_cast<size_t>(begin) * hd,
                  sizeof(float) * hd * static_cast<size_t>(n));
    }
  if (!d.evicted.empty()) std::fill(d.evicted.begin() + begin, d.evicted.begin() + begin + n, uint8_t{0});
  for (int lh = 0; !d.evicted_head.empty() && lh < c_.layers * c_.kv_heads; ++lh) {
    auto row = d.evicted_head.begin() + static_cast<std::ptrdiff_t>(lh) * d.capacity;
    std::fill(row + begin, row + begin + n, uint8_t{0});
  }
  d.length = begin + n;
}

}  // namespace ib::model::cpu_detail
