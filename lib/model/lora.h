// LoRA adapters over the engine's base model (Hu et al. 2021): for a targeted projection W
// [out][in], y = W·x + scaling · B·(A·x), with A [rank][in], B [out][rank] and scaling = alpha /
// rank (alpha / sqrt(rank) with rsLoRA), as PEFT's LoraLayer computes it. An adapter comes from
// PEFT's format (adapter_config.json + adapter_model.safetensors, the names PEFT writes) or is
// drawn at random (seeded). The engine holds adapters resident and applies a sequence's own
// adapter to its rows (Model::add_adapter, set_adapter), or merges one into its weights.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ib::model {

// The seven projections of a Llama layer an adapter can target, in PEFT's module names.
enum class LoraModule { Q, K, V, O, Gate, Up, Down };
constexpr int kLoraModules = 7;
const char* module_name(LoraModule m);  // "q_proj", ..., "down_proj"
// "q_proj" -> Q; also the short names q, k, v, o, gate, up, down. nullopt for anything else.
bool parse_module(const std::string& name, LoraModule* out);
// A module list as a spec writes it: "q_proj,v_proj", "q,v", or "all" (the seven); an unknown
// name is an InputError naming `key` and the choices.
std::vector<LoraModule> parse_modules(const std::string& list, const std::string& key);
std::string modules_label(const std::vector<LoraModule>& modules);  // "q_proj,v_proj"
// The projection's [out, in] in a model of config `c`.
std::array<int, 2> module_shape(const ModelConfig& c, LoraModule m);
// The Hugging Face name of a layer's base weight ("model.layers.3.self_attn.q_proj.weight").
std::string module_weight_name(int layer, LoraModule m);

struct LoraAdapter {
  std::string name;  // the directory, or "random:<seed>"
  int rank = 0;
  float alpha = 0;
  float scaling = 0;  // alpha / rank, or alpha / sqrt(rank) (rsLoRA)
  bool rslora = false;
  std::array<bool, kLoraModules> targets{};
  // [layer][module]: A row-major [rank][in], B row-major [out][rank] (PEFT's layouts), float32 as
  // stored; empty where the module is not targeted.
  std::vector<std::array<std::vector<float>, kLoraModules>> a, b;

  bool targets_module(LoraModule m) const { return targets[static_cast<size_t>(m)]; }
  std::vector<LoraModule> modules() const;
  int64_t parameters() const;  // elements of every A and B
};

// PEFT's format: DIR/adapter_config.json (peft_type LORA, r, lora_alpha, target_modules as a list
// or a regex over module paths, use_rslora, fan_in_fan_out false, bias "none", no rank/alpha
// patterns, no modules_to_save, no layers_to_transform) and DIR/adapter_model.safetensors with
// base_model.model.model.layers.<l>.<self_attn|mlp>.<module>.lora_A.weight [r, in] and lora_B
// [out, r]. Anything else, a missing or mis-shaped tensor, or a module the base model lacks is an
// InputError naming the file and the key or tensor.
LoraAdapter load_peft_adapter(const ModelConfig& c, const std::string& dir);

// A random adapter: A uniform(±1/sqrt(in)) (Kaiming-like, as PEFT initialises A) and B uniform
// (±b), both rounded to bf16 so a GPU copy holds the same values; b is chosen so that the update
// scaling·B·A·x has about `strength` times the size of x, what a unit-gain projection W·x has (B
// is zero at PEFT's initialisation; a trained one is not): the logits move measurably, not
// absurdly. Adapter i of a pool is random_adapter(..., seed + i).
LoraAdapter random_adapter(const ModelConfig& c, int rank, float alpha, const std::vector<LoraModule>& modules, uint64_t seed,
                           float strength = 0.1f);

// An InputError when the adapter's shapes do not fit the model (layers, module shapes).
void check_adapter_fits(const ModelConfig& c, const LoraAdapter& a);

// The base weights with the adapter merged, W + scaling·B·A in float32 (the reference a merged
// server computes with; tests and validation build a plain engine from it). `base` and `a` must
// outlive it.
std::unique_ptr<WeightSource> merged_weights(const WeightSource& base, const ModelConfig& c, const LoraAdapter& a);

}  // namespace ib::model
