// Keys shared by the decode-attention kinds (kv-quant, kv-paged).
#pragma once

#include <vector>

#include "core/value.h"

namespace ib::kvcache {

std::vector<KeySpec> decode_keys(bool paged_kind);

}  // namespace ib::kvcache
