// The `xgrammar` and `llguidance` peer rows of constrain-compile and constrain-mask: XGrammar's and
// llguidance's JSON Schema matchers on the same schema, vocabulary (our token ids and bytes, EOS
// included) and documents, measured by scripts/constrain_peer.py (compiled into the binary) in its
// own python process, which prints one JSON line (the design of the torch SDPA peers,
// kinds/attention/torch_peer.h). The script's text is declared here for the tests.
#pragma once

namespace ib::constrain {

// The text of scripts/constrain_peer.py as this binary was built with it.
const char* constrain_peer_script();

}  // namespace ib::constrain
