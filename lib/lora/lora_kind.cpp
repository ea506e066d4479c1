// Kind `lora` (the chapter's close: LoRA serving with many adapters): one base model, a pool of
// adapters, a batch whose sequences use different ones, served four ways (lora_step.h).
#include <fmt/format.h>

#include "core/errors.h"
#include "model/checkpoint.h"
#include "core/registry.h"
#include "lora/lora_keys.h"
#include "lora/lora_step.h"
#include "model/config.h"
#include "model/decode_variants.h"
#include "model/lora.h"

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

namespace {

// An adapter directory is read at spec time against every model the spec names: a rank, module
// or shape that does not fit is an error before anything runs.
std::optional<KeyProblem> check_adapters(const std::map<std::string, std::vector<Value>>& values) {
  if (auto problem = model::check_model_weights(values)) return problem;
  auto a = values.find("adapter");
  auto m = values.find("model");
  auto w = values.find("weights");
  if (a == values.end() || m == values.end() || w == values.end()) return std::nullopt;
  for (const Value& av : a->second) {
    const std::string& adapter = std::get<std::string>(av);
    if (adapter == "random") continue;
    for (const Value& mv : m->second)
      for (const Value& wv : w->second) {
        const std::string& name = std::get<std::string>(mv);
        const std::string& weights = std::get<std::string>(wv);
        try {
          const model::ModelConfig c = name == "checkpoint" ? model::checkpoint_config(weights) : *model::preset(name);
          model::load_peft_adapter(c, adapter);
        } catch (const InputError& e) {
          return KeyProblem{{"adapter"}, e.what()};
        }
      }
  }
  if (auto mods = values.find("modules"); mods != values.end())
    for (const Value& v : mods->second) try {
        model::parse_modules(std::get<std::string>(v), "modules");
      } catch (const InputError& e) {
        return KeyProblem{{"modules"}, e.what()};
      }
  return std::nullopt;
}

KindInfo lora_kind() {
  KindInfo k;
  k.name = "lora";
  k.group = "lora";
  k.doc =
      "LoRA serving: one base model, a pool of adapters (PEFT's format or seeded random ones), a batch whose sequences use "
      "different adapters. One decode step (or one prefill) served four ways: the base model alone; batched (one base GEMM "
      "plus each adapter's rows gathered into one low-rank product: Punica's SGMV, S-LoRA); merged (W + s·B·A merged per "
      "distinct adapter, its rows run, the next merged: a single-adapter server switching); unbatched (each sequence alone). "
      "Each is first checked against a plain engine on the merged float32 weights of the first four adapters' sequences.";
  k.keys = lora_keys().keys();
  k.check = check_adapters;
  return k;
}

const KindRegistration registration(lora_kind());

const VariantRegistration reg_cpu_base("lora",
                                       {"cpu_base", Backend::Cpu,
                                        "the base model alone, no adapter: the step the adapters' work is added to"},
                                       make_variant<LoraStep>(Serving::Base));
const VariantRegistration reg_cpu_batched(
    "lora",
    {"cpu_batched", Backend::Cpu,
     "one pass of the whole batch: base matmuls, then per adapter its rows' x·Aᵀ·Bᵀ gathered (SGMV's segments)"},
    make_variant<LoraStep>(Serving::Batched));
const VariantRegistration reg_cpu_merged("lora",
                                         {"cpu_merged", Backend::Cpu,
                                          "per distinct adapter: merge W + s·B·A (the switch), run its rows; a single-adapter "
                                          "server's way"},
                                         make_variant<LoraStep>(Serving::Merged));
const VariantRegistration reg_cpu_unbatched("lora",
                                            {"cpu_unbatched", Backend::Cpu,
                                             "each sequence in its own pass with its own adapter (no batching)"},
                                            make_variant<LoraStep>(Serving::Unbatched));

}  // namespace
}  // namespace ib::lora
