// The kernels' AttentionParams for an attention shape (pointers and strides left unset): shared
// by the CUDA variants and the GPU tests that launch the kernels directly.
#pragma once

#include "attention.h"
#include "kinds/attention/problem.h"

namespace ib::attention {

inline AttentionParams attention_params(const AttentionShape& s) {
  AttentionParams a;
  a.batch = s.batch;
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.head_dim = s.head_dim;
  a.seq_q = s.seq_q;
  a.seq_k = s.seq_k;
  a.causal = s.causal;
  a.window = s.causal ? s.window : 0;
  a.scale = static_cast<float>(s.scale());
  a.fp16 = s.dtype == DType::F16;
  return a;
}

}  // namespace ib::attention
