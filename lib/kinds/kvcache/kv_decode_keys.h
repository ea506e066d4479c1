// The keys of the decode-attention kinds (kv-quant, kv-paged), declared once as typed parameter
// sets (core/params.h) over one struct: the shape, the layout, the CUDA split count, kv-paged's
// cache format and kv-quant's KIVI group sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/params.h"
#include "kvcache/decode_problem.h"
#include "numerics/kv_format.h"

namespace ib::kvcache {

struct KvDecodeKeys {
  int64_t batch = 1, heads = 32, kv_heads = 0, head_dim = 128, context = 4096;
  bool ragged = false;
  int64_t block_size = 0;                                    // 0: contiguous
  int64_t splits = 0;                                        // CUDA: 0 = enough to fill the GPU
  KvFormat kv_dtype = KvFormat::BF16;                        // kv-paged's format
  int64_t int4_group = kKiviGroup, int2_group = kKiviGroup;  // kv-quant's KIVI G
};

// kv-quant: the format is the variant's; block_size 0 by default, the KIVI groups.
const ParamSet<KvDecodeKeys>& kv_quant_keys();
// kv-paged: block_size 16 by default, the format from kv_dtype (bf16, fp8, int8).
const ParamSet<KvDecodeKeys>& kv_paged_keys();

// The problem the keys describe with the cache in `format` (kv_heads 0 = heads; G of a KIVI format).
DecodeShape decode_shape(const KvDecodeKeys& k, KvFormat format);

// The keys a kv-quant variant of the format reads (VariantDecl::uses): the shape's, `splits` on
// CUDA, and the KIVI formats' group size.
std::vector<std::string> quant_variant_keys(bool cuda, KvFormat format);

}  // namespace ib::kvcache
