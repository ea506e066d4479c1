// The CUDA engine's sequence bookkeeping: a sequence's KV cache allocated, released, forked,
// copied into another (prefix reuse; 2D copies over the cache's blocks) and truncated.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "model/cuda_model_internal.h"
#include "numerics/cuda_check.h"

namespace ib::model::cuda_detail {

int CudaModel::new_sequence(int capacity) {
  if (capacity <= 0) throw std::invalid_argument("sequence capacity must be positive");
  Bf16Buffer cache(static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(capacity),
                   "KV cache");  // may be OutOfMemory
  const int id = seqs_.free_id();
  Sequence& s = seqs_.slot(id);
  s.cache = std::move(cache);
  s.capacity = capacity;
  s.length = 0;
  s.live = true;
  s.tree.close();
  return id;
}

// The cache's cudaFree waits for the work in flight that may still read it.
void CudaModel::release(int seq) { seqs_.release(seq); }

int CudaModel::fork(int seq) {
  no_tree(seq, "fork");
  const int cap = at(seq).capacity;
  const int id = new_sequence(cap);
  Sequence& src = at(seq);  // new_sequence may have grown seqs_
  Sequence& dst = at(id);
  if (src.length > 0) {
    // Rows are the (layer, K/V, kv head) blocks of `capacity` positions; only the first
    // `length` positions of each hold anything.
    const size_t pitch = static_cast<size_t>(cap) * c_.head_dim * sizeof(uint16_t);
    IB_CUDA_CHECK(cudaMemcpy2DAsync(dst.cache.data(), pitch, src.cache.data(), pitch,
                                    static_cast<size_t>(src.length) * c_.head_dim * sizeof(uint16_t),
                                    static_cast<size_t>(2) * c_.layers * c_.kv_heads, cudaMemcpyDeviceToDevice, stream_));
  }
  dst.length = src.length;
  return id;
}

void CudaModel::copy_cache(int src, int dst, int begin, int n) {
  no_tree(src, "copy_cache");
  no_tree(dst, "copy_cache");
  Sequence& s = at(src);
  Sequence& d = at(dst);
  if (begin < 0 || n < 0 || d.length < begin || s.length < begin + n || begin + n > d.capacity)
    throw std::invalid_argument(fmt::format("copy_cache [{}, {}) from a {}-token into a {}-token sequence (capacity {})", begin,
                                            begin + n, s.length, d.length, d.capacity));
  if (n > 0) {
    // One row per (layer, K/V, kv head) block; the caches' pitches differ when capacities do.
    const size_t row = static_cast<size_t>(n) * c_.head_dim * sizeof(uint16_t);
    const size_t off = static_cast<size_t>(begin) * c_.head_dim;
    IB_CUDA_CHECK(cudaMemcpy2DAsync(d.cache.data() + off, static_cast<size_t>(d.capacity) * c_.head_dim * sizeof(uint16_t),
                                    s.cache.data() + off, static_cast<size_t>(s.capacity) * c_.head_dim * sizeof(uint16_t), row,
                                    static_cast<size_t>(2) * c_.layers * c_.kv_heads, cudaMemcpyDeviceToDevice, stream_));
  }
  d.length = begin + n;
}

void CudaModel::truncate(int seq, int length) { seqs_.truncate(seq, length); }

}  // namespace ib::model::cuda_detail
