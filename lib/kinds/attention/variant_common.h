// Pieces the CPU and CUDA attention variants share.
#pragma once

#include <vector>

#include "core/variant.h"
#include "kinds/attention/problem.h"

namespace ib::attention {

// The chapter's first table, computed (not measured) for the point: bytes of one layer-head's
// n_q×n_k score matrix in fp16, and of all heads of the 32 layers of Llama 2 7B.
inline void append_score_table(const AttentionShape& s, std::vector<Metric>& m) {
  const double bytes = score_matrix_elems(s.seq_k) * (static_cast<double>(s.seq_q) / s.seq_k) * 2.0;
  m.push_back({"S fp16/layer-head (formula)", bytes / (1 << 20), "MiB"});
  m.push_back({"S fp16 ×heads ×32 layers (formula)", bytes * s.heads * 32 / (1 << 30), "GiB"});
}

}  // namespace ib::attention
