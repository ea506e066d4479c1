// The `xgrammar` and `llguidance` peer rows of constrain-compile and constrain-mask: XGrammar's and
// llguidance's JSON Schema matchers on the same schema, vocabulary (our token ids and bytes, EOS
// included) and documents, measured by scripts/constrain_peer.py (compiled into the binary) in its
// own python process, which prints one JSON line (the design of the torch SDPA peers,
// attention/torch_peer.h). Declared here for the kinds' registrations and the tests.
#pragma once

#include <string>

#include "core/registry.h"

namespace ib::constrain {

// The text of scripts/constrain_peer.py as this binary was built with it.
const char* constrain_peer_script();

// The kind with the peer keys (python, peer_timeout) added. The peers (declared in
// python_peer.cpp) read every key; our variants declare the kind's other keys only, so an
// experiment of ours alone carries no python key.
KindInfo with_python_peers(KindInfo kind);

}  // namespace ib::constrain
