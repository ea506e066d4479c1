// Keys shared by the decode-attention kinds (kv-quant, kv-paged).
#pragma once

#include <string>
#include <vector>

#include "core/value.h"
#include "numerics/kv_format.h"

namespace ib::kvcache {

std::vector<KeySpec> decode_keys(bool paged_kind);
// The keys a kv-quant variant of the format reads (VariantDecl::uses): the shape's, `splits` on
// CUDA, and the KIVI formats' group size.
std::vector<std::string> quant_variant_keys(bool cuda, KvFormat format);

}  // namespace ib::kvcache
