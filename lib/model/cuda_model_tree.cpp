// The CUDA engine's tree verification: prefill_tree uploads the nodes' rows, slots and ancestor
// lists and runs them through the layers; keep_tree_path moves one path's K/V into place.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "model/cuda_model_internal.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"

namespace ib::model::cuda_detail {

// Tree verification: the tree's rows through the layers like a prefill chunk, with K/V stored
// at the nodes' slots, RoPE at their depths and attention through kernels/model_ops' tree
// attention (committed positions, then the ancestors).
void CudaModel::prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out) {
  if (n <= 0) throw std::invalid_argument("prefill_tree of no tokens");
  if (n > o_.max_prefill)
    throw std::invalid_argument(fmt::format("prefill_tree of {} tokens: at most {} (max_prefill)", n, o_.max_prefill));
  check_tokens(tokens, n, c_.vocab);
  Sequence& s = at(seq);
  const int base = s.tree.open() ? s.tree.base() : s.length, first_node = s.tree.size();
  if (base + first_node + n > s.capacity)
    throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq, s.capacity));
  std::vector<std::vector<int>> nodes = s.tree.extend(parents, n);
  // Host image of the device inputs: rows, slots, ancestor offsets and slots.
  std::vector<AttnRow> rows(static_cast<size_t>(n));
  std::vector<int32_t> slots(static_cast<size_t>(n)), begin(static_cast<size_t>(n) + 1, 0), anc;
  for (int i = 0; i < n; ++i) {
    const std::vector<int>& a = nodes[static_cast<size_t>(i)];
    AttnRow& r = rows[static_cast<size_t>(i)];
    r.cache = s.cache.data();
    r.capacity = s.capacity;
    r.pos = base + static_cast<int>(a.size()) - 1;
    slots[static_cast<size_t>(i)] = base + first_node + i;
    for (int x : a) anc.push_back(base + x);
    begin[static_cast<size_t>(i) + 1] = static_cast<int32_t>(anc.size());
  }
  const size_t rows_bytes = align16(sizeof(AttnRow) * rows.size()), slots_bytes = align16(sizeof(int32_t) * slots.size()),
               begin_bytes = align16(sizeof(int32_t) * begin.size()), anc_bytes = sizeof(int32_t) * anc.size();
  const size_t bytes = rows_bytes + slots_bytes + begin_bytes + anc_bytes;
  if (tree_dev_.size() < bytes) tree_dev_.allocate(bytes, "tree verification inputs");
  std::vector<unsigned char> host(bytes, 0);
  std::memcpy(host.data(), rows.data(), sizeof(AttnRow) * rows.size());
  std::memcpy(host.data() + rows_bytes, slots.data(), sizeof(int32_t) * slots.size());
  std::memcpy(host.data() + rows_bytes + slots_bytes, begin.data(), sizeof(int32_t) * begin.size());
  std::memcpy(host.data() + rows_bytes + slots_bytes + begin_bytes, anc.data(), anc_bytes);
  IB_CUDA_CHECK(cudaMemcpyAsync(tree_dev_.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream_));
  IB_CUDA_CHECK(
      cudaMemcpyAsync(prefill_tokens_.data(), tokens, sizeof(int32_t) * static_cast<size_t>(n), cudaMemcpyHostToDevice, stream_));
  TreeInputs tree;
  tree.slots = reinterpret_cast<const int32_t*>(tree_dev_.data() + rows_bytes);
  tree.anc_begin = reinterpret_cast<const int32_t*>(tree_dev_.data() + rows_bytes + slots_bytes);
  tree.anc = reinterpret_cast<const int32_t*>(tree_dev_.data() + rows_bytes + slots_bytes + begin_bytes);
  tree.base = base;
  const bool opened = !s.tree.open();
  s.tree.append(base, std::move(nodes));
  try {
    bind_cublas(stream_);
    forward_layers(stream_, n, prefill_tokens_.data(), reinterpret_cast<const AttnRow*>(tree_dev_.data()), nullptr, &tree);
  } catch (...) {
    // The nodes of this call were never computed: the tree is as before it.
    s.tree.rollback(first_node, opened);
    throw;
  }
  s.length = base + s.tree.size();
  if (out.logits || out.next) head_rows(out, n);
  IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host image above is released on return
}

void CudaModel::keep_tree_path(int seq, const std::vector<int>& path) {
  Sequence& s = at(seq);
  s.tree.check_path(path);
  const int base = s.tree.base();
  // One 2D copy per moved position (a row per (layer, K/V, kv head) block), in path order on
  // the stream: path[i] >= i, so no position is overwritten before it is read.
  const size_t pitch = static_cast<size_t>(s.capacity) * c_.head_dim * sizeof(uint16_t);
  for (size_t i = 0; i < path.size(); ++i) {
    const size_t from = static_cast<size_t>(base + path[i]), to = static_cast<size_t>(base) + i;
    if (from == to) continue;
    IB_CUDA_CHECK(cudaMemcpy2DAsync(s.cache.data() + to * c_.head_dim, pitch, s.cache.data() + from * c_.head_dim, pitch,
                                    static_cast<size_t>(c_.head_dim) * sizeof(uint16_t),
                                    static_cast<size_t>(2) * c_.layers * c_.kv_heads, cudaMemcpyDeviceToDevice, stream_));
  }
  s.length = base + static_cast<int>(path.size());
  s.tree.close();
}

}  // namespace ib::model::cuda_detail
