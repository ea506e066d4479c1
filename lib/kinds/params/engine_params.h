// The keys of the kinds that run the engine, declared once: `model` (a preset, or checkpoint) and
// `weights`, the CUDA engine's `matmul` and the CPU engine's `cpu_matmul`; and the spec-time check
// of a model and its weights.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/registry.h"
#include "core/value.h"
#include "model/model.h"

namespace ib::model {

// The `model` key of the kinds that run the engine (a preset with random weights unless `weights`,
// or checkpoint) with its default preset, and the `weights` key.
KeySpec model_key(const std::string& default_preset);
KeySpec weights_key();
// The `matmul` key (EngineOptions::matmul, default cublas) of the kinds that run the CUDA engine;
// `engines` says whose matmuls it sets in its doc ("CUDA engine"). Only CUDA variants read it
// (the CPU engine's choice is `cpu_matmul`: a sweep over either on the other backend would repeat rows). `with_matmul`
// adds it to a CUDA variant's keys.
KeySpec matmul_key(const std::string& engines = "CUDA engine");
std::vector<std::string> with_matmul(std::vector<std::string> keys);
// The `cpu_matmul` key of the CPU engine's variants (default blas).
KeySpec cpu_matmul_key();
std::vector<std::string> with_cpu_matmul(std::vector<std::string> keys);

// Spec-time check of a model key and its weights key (every value of each, as a kind's
// SpecValues reads them): checkpoint needs a directory; a directory's config.json (for
// checkpoint) and safetensors headers are read and every tensor the config needs is checked,
// nothing is loaded. The problem names the weights key first. For KindInfo::check.
std::optional<KeyProblem> check_model_weights(const KeyValues<std::string>& models, const KeyValues<std::string>& weights);

}  // namespace ib::model
