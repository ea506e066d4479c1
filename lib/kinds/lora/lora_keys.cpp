#include "kinds/lora/lora_keys.h"

#include "kinds/params/engine_params.h"

namespace ib::lora {

const ParamSet<LoraKeys>& lora_keys() {
  using P = LoraKeys;
  static const ParamSet<LoraKeys> set =
      ParamSet<LoraKeys>()
          .add(&P::model, model::model_key("tiny"))
          .add(&P::weights, model::weights_key())
          .add(&P::adapter, key_spec("adapter", ParamType::String,
                                     "random (seeded adapters, one per pool slot), or a PEFT adapter directory "
                                     "(adapter_config.json + adapter_model.safetensors; resident `adapters` times; its own "
                                     "rank, alpha and modules)",
                                     Value(std::string("random"))))
          .add(&P::adapters, key_spec("adapters", ParamType::Int, "adapters resident (the pool the batch's sequences draw from)",
                                      Value(int64_t{16}), 1.0, 4096.0))
          .add(&P::rank, key_spec("rank", ParamType::Int, "LoRA rank r of the random adapters", Value(int64_t{16}), 1.0, 1024.0))
          .add(&P::alpha,
               key_spec("alpha", ParamType::Float, "LoRA alpha of the random adapters (scaling alpha / r)", Value(32.0), 0.0))
          .add(&P::modules, key_spec("modules", ParamType::String,
                                     "projections the random adapters target: q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,"
                                     "down_proj (or q,k,v,o,gate,up,down), or all; PEFT's Llama default is q_proj,v_proj",
                                     Value(std::string("q_proj,v_proj"))))
          .add(&P::popularity,
               enum_key("popularity",
                        "which adapter each sequence uses: uniform (round-robin over the pool: min(adapters, batch) distinct) "
                        "or zipf (drawn, P(i) ∝ 1/(i+1)^zipf_s: a few popular adapters, a long tail)",
                        "uniform", {"uniform", "zipf"}),
               [](const std::string& s) { return s == "zipf" ? Popularity::Zipf : Popularity::Uniform; })
          .add(&P::zipf_s, key_spec("zipf_s", ParamType::Float, "the Zipf exponent of popularity: zipf", Value(1.0), 0.0, 10.0))
          .add(&P::batch, key_spec("batch", ParamType::Int, "sequences in the batch", Value(int64_t{16}), 1.0, 1024.0))
          .add(&P::prompt,
               key_spec("prompt", ParamType::Int, "prompt tokens: the context of a decode step, the length of a prefill",
                        Value(int64_t{128}), 1.0))
          .add(&P::measure,
               enum_key("measure", "decode (one step of the batch at context `prompt`) or prefill (every prompt from empty)",
                        "decode", {"decode", "prefill"}),
               [](const std::string& s) { return s == "prefill" ? Measure::Prefill : Measure::Decode; });
  return set;
}

}  // namespace ib::lora
