// The `attention` kind's keys, bound to the fields they fill (core/params.h): declared once, in
// attention_kind.cpp, and read back into this struct by every variant.
#pragma once

#include <string>
#include <vector>

#include "core/params.h"
#include "numerics/dtype.h"

namespace ib::attention {

struct AttentionKeys {
  int batch = 1, heads = 32;
  int kv_heads = 0;  // 0 = heads
  int head_dim = 128, seq = 2048;
  int seq_q = 0;  // 0 = seq
  bool causal = true;
  int window = 0;
  DType dtype = DType::BF16;
  bool score_table = false;
  std::string python;  // the torch peers'
  double peer_timeout = 120;
};

const ParamSet<AttentionKeys>& attention_keys();

// The keys every attention variant reads (VariantDecl::uses): the kind's but the torch peers'
// python and peer_timeout.
std::vector<std::string> attention_shape_keys();

}  // namespace ib::attention
