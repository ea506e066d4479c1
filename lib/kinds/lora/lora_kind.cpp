// Kind `lora` (the chapter's close: LoRA serving with many adapters): one base model, a pool of
// adapters, a batch whose sequences use different ones, served four ways: base.cpp, batched.cpp,
// merged.cpp and unbatched.cpp, on the shared machinery of lora_variant.h.
#include <fmt/format.h>

#include "core/errors.h"
#include "core/registry.h"
#include "kinds/lora/lora_keys.h"
#include "kinds/params/engine_params.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/model_choice.h"

namespace ib::lora {

namespace {

// An adapter directory is read at spec time against every model the spec names: a rank, module
// or shape that does not fit is an error before anything runs.
std::optional<KeyProblem> check_adapters(const SpecKeyValues& values) {
  const SpecValues<LoraKeys> v(lora_keys(), values);
  const auto models = v.field(&LoraKeys::model), weights = v.field(&LoraKeys::weights), adapters = v.field(&LoraKeys::adapter),
             modules = v.field(&LoraKeys::modules);
  if (auto problem = model::check_model_weights(models, weights)) return problem;
  for (const std::string& adapter : adapters.values) {
    if (adapter == "random") continue;
    for (const std::string& name : models.values)
      for (const std::string& w : weights.values) {
        try {
          const model::ModelConfig c = name == "checkpoint" ? model::checkpoint_config(w) : *model::preset(name);
          model::load_peft_adapter(c, adapter);
        } catch (const InputError& e) {
          return KeyProblem{{adapters.key}, e.what()};
        }
      }
  }
  for (const std::string& m : modules.values) try {
      model::parse_modules(m, modules.key);
    } catch (const InputError& e) {
      return KeyProblem{{modules.key}, e.what()};
    }
  return std::nullopt;
}

KindInfo lora_kind() {
  KindInfo k;
  k.name = "lora";
  k.smallest = "batch: 4\nadapters: 2\nrank: 4\nprompt: 8\n";
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

const KindRegistration lora_registration(lora_kind());

}  // namespace
}  // namespace ib::lora
