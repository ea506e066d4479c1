// The CPU engine's passes as the Model interface calls them: prefill, batched prefill, decode and
// tree verification (prefill_tree, keep_tree_path). Each checks its arguments and gives every
// row its sequence and position; forward (cpu_model_forward.cpp) does the arithmetic.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "model/cpu_model_internal.h"

namespace ib::model::cpu_detail {

void CpuModel::prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) {
  if (n <= 0) throw std::invalid_argument("prefill of no tokens");
  n_logits = std::clamp(n_logits, 1, n);
  no_tree(seq, "prefill");
  std::vector<int> seq_of(static_cast<size_t>(n), seq), pos(static_cast<size_t>(n));
  const int start = at(seq).length;
  for (int r = 0; r < n; ++r) pos[static_cast<size_t>(r)] = start + r;
  forward(tokens, n, seq_of, pos, n - n_logits, out);
}

void CpuModel::prefill_batch_rows(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                                  const int* logit_rows) {
  std::vector<int> seq_of, pos, out_rows;
  bool every_row = true;
  for (int i = 0; i < n; ++i) {
    if (counts[i] <= 0) throw std::invalid_argument("prefill_batch: a sequence with no tokens");
    if (logit_rows[i] < 1 || logit_rows[i] > counts[i])
      throw std::invalid_argument("prefill_batch: a sequence's logit rows must be 1 to its token count");
    every_row &= logit_rows[i] == counts[i];
    no_tree(seqs[i], "prefill_batch");
    for (int i2 = 0; i2 < i; ++i2)
      if (seqs[i] == seqs[i2]) throw std::invalid_argument("prefill_batch holds each sequence once");
    for (int j = 0; j < counts[i]; ++j) {
      seq_of.push_back(seqs[i]);
      pos.push_back(at(seqs[i]).length + j);
    }
    for (int r = static_cast<int>(seq_of.size()) - logit_rows[i]; r < static_cast<int>(seq_of.size()); ++r) out_rows.push_back(r);
  }
  forward(tokens, static_cast<int>(seq_of.size()), seq_of, pos, 0, out, nullptr, every_row ? nullptr : &out_rows);
}

void CpuModel::decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) {
  std::vector<int> seq_of(seqs, seqs + batch), pos(static_cast<size_t>(batch));
  for (int r = 0; r < batch; ++r) {
    no_tree(seqs[r], "decode");
    pos[static_cast<size_t>(r)] = at(seqs[r]).length;
  }
  for (int r = 0; r < batch; ++r)
    for (int r2 = 0; r2 < r; ++r2)
      if (seqs[r] == seqs[r2]) throw std::invalid_argument("a decode batch holds each sequence once");
  forward(tokens, batch, seq_of, pos, 0, out);
}

void CpuModel::prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out) {
  if (n <= 0) throw std::invalid_argument("prefill_tree of no tokens");
  Sequence& s = at(seq);
  if (s.recording) throw std::invalid_argument("prefill_tree while recording attention");
  check_tokens(tokens, n, c_.vocab);
  const int base = s.tree.open() ? s.tree.base() : s.length, first_node = s.tree.size();
  if (base + first_node + n > s.capacity)
    throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq, s.capacity));
  s.tree.append(base, s.tree.extend(parents, n));
  TreeRows tree;
  tree.base = base;
  std::vector<int> seq_of(static_cast<size_t>(n), seq), pos(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::vector<int>& anc = s.tree.ancestors(first_node + i);
    pos[static_cast<size_t>(i)] = base + static_cast<int>(anc.size()) - 1;
    tree.slot.push_back(base + first_node + i);
    tree.nodes.push_back(&anc);
  }
  forward(tokens, n, seq_of, pos, 0, out, &tree);
}

void CpuModel::keep_tree_path(int seq, const std::vector<int>& path) {
  Sequence& s = at(seq);
  s.tree.check_path(path);
  const int base = s.tree.base();
  const size_t hd = static_cast<size_t>(c_.head_dim);
  // path is increasing and path[i] >= i, so no slot is overwritten before it is read.
  for (size_t i = 0; i < path.size(); ++i) {
    const size_t from = static_cast<size_t>(base + path[i]), to = static_cast<size_t>(base) + i;
    if (from == to) continue;
    for (int l = 0; l < c_.layers; ++l)
      for (int kv = 0; kv < 2; ++kv)
        for (int kh = 0; kh < c_.kv_heads; ++kh) {
          const KvRows rows = kv_rows(s, l, kv, kh);
          std::memmove(rows.row(static_cast<int>(to)), rows.row(static_cast<int>(from)), sizeof(float) * hd);
        }
    if (!s.evicted.empty()) s.evicted[to] = s.evicted[from];
    for (size_t lh = 0; !s.evicted_head.empty() && lh < static_cast<size_t>(c_.layers) * c_.kv_heads; ++lh)
      s.evicted_head[lh * static_cast<size_t>(s.capacity) + to] = s.evicted_head[lh * static_cast<size_t>(s.capacity) + from];
  }
  s.length = base + static_cast<int>(path.size());
  s.tree.close();
  if (s.blocks >= 0) blocks_->truncate(s.blocks, s.length);  // the other nodes' slots return their blocks
}

}  // namespace ib::model::cpu_detail
