// Kind `specdec` (§8.2): autoregressive decoding against speculative decoding with a draft model
// (acceptance controlled or real), n-gram prompt lookup, token trees and lookahead, on the
// transformer engine. Its keys: specdec_keys.h; the shared machinery: specdec_variant.h; each
// method in a file of its own (autoregressive.cpp, draft_model.cpp, ...), registering its variants.
#include "core/registry.h"
#include "kinds/specdec/specdec_keys.h"

namespace ib::specdec {
namespace {

KindInfo specdec_kind() {
  KindInfo k;
  k.name = "specdec";
  k.smallest =
      "target: tiny\ndraft: self\ndraft_layers: 1\nacceptance: model\nprompt: 16\nnew_tokens: 12\nk: 3\ntree: 3x2x1\nbranches: "
      "2\nlookahead_window: 3\nlookahead_ngram: 3\n";
  k.group = "specdec";
  k.doc =
      "Speculative decoding on the engine: one run generates new_tokens. Greedy (temperature 0): every variant's output "
      "is first checked token for token against the target decoding alone (or the forced text). Sampled (temperature > "
      "0, rejection sampling, trees by recursive rejection sampling): the distributions verification used are checked "
      "against the target's own from a fresh prefill of the output, and every token must lie in its support. "
      "Acceptance comes from a named source: controlled(alpha) (greedy only; the draft model really runs, its token is "
      "the target's next with probability alpha), model (the draft's own choices), or a real text (n-gram).";
  k.keys = specdec_keys().keys();
  k.check = check_specdec_keys;
  return k;
}

const KindRegistration specdec_registration(specdec_kind());

}  // namespace
}  // namespace ib::specdec
