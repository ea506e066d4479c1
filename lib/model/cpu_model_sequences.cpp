// The CPU engine's sequence bookkeeping: a sequence's KV cache allocated, released, forked,
// truncated and copied into another (prefix reuse), with its eviction marks and format; and the
// paged cache: the block pool, block tables, growth with copy-on-write.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "model/cpu_model_internal.h"

namespace ib::model::cpu_detail {

void CpuModel::enable_paged_kv(int num_blocks, int block_size) {
  if (num_blocks < 1 || block_size < 1 || (block_size & (block_size - 1)) != 0)
    throw std::invalid_argument(
        fmt::format("enable_paged_kv: {} blocks of {} tokens (at least one block, of a power of two)", num_blocks, block_size));
  if (seqs_.live_count() > 0) throw std::logic_error("enable_paged_kv with live sequences");
  pool_.reset();
  pool_.allocate(static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(block_size) * static_cast<size_t>(num_blocks),
                 "KV block pool");
  blocks_.emplace(num_blocks, block_size);
}

int CpuModel::blocks_needed(int seq, int tokens) const {
  const Sequence& s = at(seq);
  return s.blocks < 0 ? 0 : blocks_->blocks_needed(s.blocks, tokens);
}

KvRows CpuModel::kv_rows(Sequence& s, int layer, int kv, int kvh) {
  KvRows r;
  r.d = c_.head_dim;
  if (s.blocks < 0) {
    r.base = kv == 0 ? cache_k(s, layer, kvh) : cache_v(s, layer, kvh);
    return r;
  }
  const size_t bs = static_cast<size_t>(blocks_->block_size());
  while ((size_t{1} << r.block_shift) < bs) ++r.block_shift;
  r.block_stride = bs * static_cast<size_t>(r.d);
  r.base = pool_.data() + ((static_cast<size_t>(layer) * 2 + static_cast<size_t>(kv)) * static_cast<size_t>(c_.kv_heads) +
                           static_cast<size_t>(kvh)) *
                              static_cast<size_t>(blocks_->num_blocks()) * r.block_stride;
  r.table = blocks_->table(s.blocks).data();
  return r;
}

void CpuModel::contiguous_only(const Sequence& s, const char* what) const {
  if (s.blocks >= 0) throw std::invalid_argument(fmt::format("{} is not supported on a paged sequence", what));
}

void CpuModel::grow_blocks(const std::vector<int>& seqs, const std::vector<int>& lengths) {
  if (!blocks_) return;
  int need = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = at(seqs[i]);
    const int more = lengths[i] - blocks_->length(s.blocks);
    if (more > 0) need += blocks_->blocks_needed(s.blocks, more);
  }
  if (need > blocks_->free_blocks())
    throw KvBlocksExhausted(
        fmt::format("the pass needs {} KV blocks and {} of {} are free", need, blocks_->free_blocks(), blocks_->num_blocks()));
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = at(seqs[i]);
    const int more = lengths[i] - blocks_->length(s.blocks);
    if (more > 0 && !blocks_->append(s.blocks, more)) throw std::logic_error("grow_blocks: the block count was wrong");
  }
  // Copy-on-write: a shared, partly filled last block gets its private copy before it is written.
  const size_t block = static_cast<size_t>(blocks_->block_size()) * static_cast<size_t>(c_.head_dim);
  const size_t part = static_cast<size_t>(blocks_->num_blocks()) * block;  // one (layer, K or V, kv head)
  for (const auto& [src, dst] : blocks_->take_copies())
    for (size_t i = 0; i < static_cast<size_t>(c_.kv_elems_per_token()) / static_cast<size_t>(c_.head_dim); ++i)
      std::memcpy(pool_.data() + i * part + static_cast<size_t>(dst) * block,
                  pool_.data() + i * part + static_cast<size_t>(src) * block, sizeof(float) * block);
}

int CpuModel::open_sequence(int capacity) {
  if (capacity <= 0) throw std::invalid_argument("sequence capacity must be positive");
  const int id = seqs_.free_id();
  Sequence& s = seqs_.slot(id);
  if (blocks_)
    s.blocks = blocks_->create();
  else
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

int CpuModel::new_sequence(int capacity) { return open_sequence(capacity); }

void CpuModel::release(int seq) {
  Sequence& s = at(seq);
  if (s.blocks >= 0) blocks_->free(s.blocks);
  s.blocks = -1;
  seqs_.release(seq);
}

int CpuModel::fork(int seq) {
  no_tree(seq, "fork");
  const int src_capacity = at(seq).capacity;
  int id = -1;
  if (at(seq).blocks >= 0) {  // paged: the child shares every block, nothing is copied
    const int parent_blocks = at(seq).blocks;
    id = seqs_.free_id();
    Sequence& d = seqs_.slot(id);
    d = Sequence{};
    d.blocks = blocks_->fork(parent_blocks);
    d.capacity = src_capacity;
    d.live = true;
  } else {
    id = open_sequence(src_capacity);
  }
  Sequence& src = at(seq);  // opening a slot may have grown seqs_
  Sequence& dst = at(id);
  if (src.blocks < 0) std::memcpy(dst.cache.data(), src.cache.data(), src.cache.bytes());
  dst.length = src.length;
  dst.evicted = src.evicted;
  dst.evicted_head = src.evicted_head;
  dst.kv_format = src.kv_format;
  dst.fp8_scale = src.fp8_scale;
  dst.adapter = src.adapter;
  return id;
}

int CpuModel::share_prefix(int src, int length, int capacity) {
  if (at(src).blocks < 0) return Model::share_prefix(src, length, capacity);
  no_tree(src, "share_prefix");
  if (length < 0 || length > at(src).length || length > capacity)
    throw std::invalid_argument(
        fmt::format("share_prefix of {} tokens of a {}-token sequence into a {}-token one", length, at(src).length, capacity));
  const int id = fork(src);
  truncate(id, length);
  Sequence& s = at(id);
  s.capacity = capacity;
  s.evicted.clear();
  s.evicted_head.clear();
  s.adapter = -1;
  return id;
}

SwappedKv CpuModel::swap_out(int seq) {
  no_tree(seq, "swap_out");
  Sequence& s = at(seq);
  if (s.blocks < 0) throw std::invalid_argument("swap_out of a sequence that is not paged");
  if (s.kv_format || !s.evicted.empty() || !s.evicted_head.empty())
    throw std::invalid_argument("swap_out of a sequence under a KV format or eviction study");
  SwappedKv out;
  out.length = s.length;
  out.rows.resize(static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(s.length));
  copy_host_rows(s, out.rows.data(), nullptr);
  release(seq);
  return out;
}

int CpuModel::swap_in(const SwappedKv& kv, int capacity) {
  if (!blocks_) throw std::invalid_argument("swap_in on an engine without paged KV");
  if (kv.length < 0 || kv.length > capacity ||
      kv.rows.size() != static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(kv.length))
    throw std::invalid_argument(
        fmt::format("swap_in of {} rows for {} tokens into a {}-token sequence", kv.rows.size(), kv.length, capacity));
  const int id = open_sequence(capacity);
  try {
    grow_blocks({id}, {kv.length});
  } catch (...) {
    release(id);
    throw;
  }
  Sequence& s = at(id);
  s.length = kv.length;
  copy_host_rows(s, nullptr, kv.rows.data());
  return id;
}

void CpuModel::copy_host_rows(Sequence& s, float* to_host, const float* from_host) {
  const size_t d = static_cast<size_t>(c_.head_dim), row = sizeof(float) * d;
  size_t at = 0;
  for (int l = 0; l < c_.layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int kh = 0; kh < c_.kv_heads; ++kh) {
        const KvRows cache = kv_rows(s, l, kv, kh);
        for (int p = 0; p < s.length; ++p, at += d) {
          if (to_host)
            std::memcpy(to_host + at, cache.row(p), row);
          else
            std::memcpy(cache.row(p), from_host + at, row);
        }
      }
}

void CpuModel::truncate(int seq, int length) {
  seqs_.truncate(seq, length);
  Sequence& s = at(seq);
  if (s.blocks >= 0) blocks_->truncate(s.blocks, s.length);
}

void CpuModel::copy_cache(int src, int dst, int begin, int n) {
  no_tree(src, "copy_cache");
  no_tree(dst, "copy_cache");
  {
    const Sequence& s = at(src);
    const Sequence& d = at(dst);
    if (begin < 0 || n < 0 || d.length < begin || s.length < begin + n || begin + n > d.capacity)
      throw std::invalid_argument(fmt::format("copy_cache [{}, {}) from a {}-token into a {}-token sequence (capacity {})", begin,
                                              begin + n, s.length, d.length, d.capacity));
  }
  if (at(dst).blocks >= 0) {  // paged: dst's positions from `begin` on become its own blocks first
    blocks_->truncate(at(dst).blocks, begin);
    at(dst).length = begin;
    grow_blocks({dst}, {begin + n});
  }
  Sequence& s = at(src);
  Sequence& d = at(dst);
  const size_t row = sizeof(float) * static_cast<size_t>(c_.head_dim);
  for (int l = 0; l < c_.layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      for (int kh = 0; kh < c_.kv_heads; ++kh) {
        const KvRows from = kv_rows(s, l, kv, kh), to = kv_rows(d, l, kv, kh);
        if (!from.table && !to.table) {
          std::memcpy(to.row(begin), from.row(begin), row * static_cast<size_t>(n));
          continue;
        }
        for (int p = begin; p < begin + n; ++p) std::memcpy(to.row(p), from.row(p), row);
      }
  if (!d.evicted.empty()) std::fill(d.evicted.begin() + begin, d.evicted.begin() + begin + n, uint8_t{0});
  for (int lh = 0; !d.evicted_head.empty() && lh < c_.layers * c_.kv_heads; ++lh) {
    auto evicted_row = d.evicted_head.begin() + static_cast<std::ptrdiff_t>(lh) * d.capacity;
    std::fill(evicted_row + begin, evicted_row + begin + n, uint8_t{0});
  }
  d.length = begin + n;
}

}  // namespace ib::model::cpu_detail
