// Kind `decode` (the chapter's metrics section): TTFT, TPOT, TPS, the decode step with and
// without CUDA Graphs, and prefill cost, on the transformer engine (lib/model). Its keys:
// decode_keys.h; the shared machinery: decode_variant.h; one file per measurement (generate.cpp,
// decode_step.cpp, prefill.cpp) and llama.cpp's peer rows (llamacpp_peer.cpp).
#include "core/registry.h"
#include "kinds/decode/decode_keys.h"
#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"
#include "model/model_choice.h"

namespace ib::model {
namespace {

KindInfo decode_kind() {
  KindInfo k;
  k.name = "decode";
  k.smallest = "prompt: 8\nnew_tokens: 4\n";
  k.group = "decode";
  k.doc =
      "The transformer engine measured as a server sees it: TTFT = prefill to the first token on the host, TPOT = "
      "(end-to-end − TTFT)/(n − 1), TPS = all output tokens / wall time (vLLM's definitions). Every variant is first "
      "checked against a recomputation without the KV cache (the cached steps' logits vs one prefill of the whole "
      "sequence). A decode step's roofline is weights + KV read once; a prefill's, its FLOPs.";
  k.keys = decode_keys().keys();
  k.roofline = true;
  k.check = [](const auto& values) {
    const SpecValues<DecodeKeys> v(decode_keys(), values);
    const auto model = v.field(&DecodeKeys::model), weights = v.field(&DecodeKeys::weights);
    if (auto problem = check_model_weights(model, weights)) return problem;
    return check_text_prompts(values, v.field([](const DecodeKeys& x) -> const auto& { return x.prompts.tokenizer; }), weights,
                              model);
  };
  return k;
}

const KindRegistration decode_registration(decode_kind());

}  // namespace
}  // namespace ib::model
