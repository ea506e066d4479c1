// The `torch_sdpa*` peer rows of `attention`: PyTorch's scaled_dot_product_attention on the same
// shape, measured by scripts/torch_sdpa_peer.py (compiled into the binary) in its own python
// process (core/peer_process.h), which prints one JSON line. Declared here for the tests.
#pragma once

#include "core/variant.h"

namespace ib::attention {

// The text of scripts/torch_sdpa_peer.py as this binary was built with it.
const char* torch_sdpa_peer_script();

}  // namespace ib::attention
