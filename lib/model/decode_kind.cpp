// Kind `decode` (the chapter's metrics section): TTFT, TPOT, TPS, the decode step with and
// without CUDA Graphs, and prefill cost, on the transformer engine (lib/model).
#include "core/registry.h"
#include "model/config.h"
#include "model/decode_variants.h"
#include "model/text_prompt.h"

namespace ib::model {
namespace {

// The CUDA variants also read `matmul`, the CPU ones `cpu_matmul` (each backend only its own, or
// a sweep over the other's would repeat rows).
// Every variant takes a text prompt (text_prompt.h) in place of the random `prompt` tokens.
std::vector<std::string> with_text(std::vector<std::string> keys) {
  for (const auto& k : text_prompt_key_names()) keys.push_back(k);
  return keys;
}
const std::vector<std::string> kStepKeys = with_text({"model", "weights", "batch", "prompt", "temperature"});
const std::vector<std::string> kPrefillKeys = with_text({"model", "weights", "prompt", "temperature"});
const std::vector<std::string> kGenerateKeys = with_text({"model", "weights", "batch", "prompt", "new_tokens", "temperature"});

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
  k.keys = {
      model_key("tiny"),
      weights_key(),
      key_spec("batch", ParamType::Int, "sequences decoded together", Value(int64_t{1}), 1.0, 4096.0),
      key_spec("prompt", ParamType::Int, "prompt tokens (the context of a decode step)", Value(int64_t{512}), 1.0),
      key_spec("new_tokens", ParamType::Int, "tokens generated per sequence (generate)", Value(int64_t{128}), 1.0),
      key_spec("temperature", ParamType::Float, "0 = greedy; else sampling on the backend", Value(0.0), 0.0),
      matmul_key(),
      cpu_matmul_key(),
  };
  for (auto& t : text_prompt_keys()) k.keys.push_back(std::move(t));
  for (auto& t : llamacpp_peer_keys()) k.keys.push_back(std::move(t));
  k.check = [](const auto& values) {
    if (auto problem = check_model_weights(values)) return problem;
    return check_text_prompts(values);
  };
  return k;
}

const KindRegistration registration(decode_kind());

// Every variant is the engine's DecodeVariant, measuring one thing on one backend.
VariantFactory decode_variant(Backend backend, DecodeMeasure what, bool cuda_graph) {
  return make_variant<DecodeVariant>(backend, what, cuda_graph);
}

const VariantRegistration reg_decode_generate(
    "decode",
    {"generate", Backend::Cuda, "prefill every prompt, then new_tokens − 1 batched decode steps with CUDA Graphs; TTFT/TPOT/TPS",
     with_matmul(kGenerateKeys)},
    IB_IF_CUDA(decode_variant(Backend::Cuda, DecodeMeasure::Generate, true)));
const VariantRegistration reg_decode_decode_step("decode",
                                                 {"decode_step", Backend::Cuda,
                                                  "one batched decode step at context `prompt`, replayed as a CUDA Graph",
                                                  with_matmul(kStepKeys)},
                                                 IB_IF_CUDA(decode_variant(Backend::Cuda, DecodeMeasure::Step, true)));
const VariantRegistration reg_decode_decode_step_eager(
    "decode",
    {"decode_step_eager", Backend::Cuda, "the same step launched kernel by kernel (no graph): the launch overhead graphs save",
     with_matmul(kStepKeys)},
    IB_IF_CUDA(decode_variant(Backend::Cuda, DecodeMeasure::Step, false)));
const VariantRegistration reg_decode_prefill("decode",
                                             {"prefill", Backend::Cuda,
                                              "one prefill of `prompt` tokens (cuBLAS GEMMs, flash2 attention)",
                                              with_matmul(kPrefillKeys)},
                                             IB_IF_CUDA(decode_variant(Backend::Cuda, DecodeMeasure::Prefill, true)));
const VariantRegistration reg_decode_cpu_generate("decode",
                                                  {"cpu_generate", Backend::Cpu,
                                                   "generation on the CPU engine (float32 on bf16-rounded weights)",
                                                   with_cpu_matmul(kGenerateKeys)},
                                                  decode_variant(Backend::Cpu, DecodeMeasure::Generate, false));
// No graph on the CPU: its step plays decode_step_eager.
const VariantRegistration reg_decode_cpu_decode_step("decode",
                                                     {"cpu_decode_step", Backend::Cpu, "one decode step on the CPU engine",
                                                      with_cpu_matmul(kStepKeys), false, "decode_step_eager"},
                                                     decode_variant(Backend::Cpu, DecodeMeasure::Step, false));
const VariantRegistration reg_decode_cpu_prefill("decode",
                                                 {"cpu_prefill", Backend::Cpu, "one prefill on the CPU engine",
                                                  with_cpu_matmul(kPrefillKeys)},
                                                 decode_variant(Backend::Cpu, DecodeMeasure::Prefill, false));

}  // namespace
}  // namespace ib::model
