// The model a point names (a preset with random weights, or a checkpoint: `model`/`weights` or a
// kind's own pair of keys), the spec-time check of a model and its weights, and random prompts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/registry.h"
#include "core/sweep.h"
#include "core/value.h"
#include "model/model.h"

namespace ib::model {

// The model of a point: a preset with random weights, or `checkpoint` with weights: DIR.
struct ModelChoice {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};
ModelChoice choose_model(const Point& p, uint64_t seed);
// The same for a preset name (or "checkpoint") and weights ("random" or a directory) under the
// spec keys `model_key` / `weights_key` (named in errors).
ModelChoice choose_model(const std::string& name, const std::string& weights, uint64_t seed,
                         const std::string& model_key = "model", const std::string& weights_key = "weights");
// Spec-time check of a model key and its weights key (every value of each): checkpoint needs a
// directory; a directory's config.json (for checkpoint) and safetensors headers are read and
// every tensor the config needs is checked, nothing is loaded. The problem names the weights key
// first. For KindInfo::check.
std::optional<KeyProblem> check_model_weights(const std::map<std::string, std::vector<Value>>& values,
                                              const std::string& model_key = "model", const std::string& weights_key = "weights");
// Deterministic prompt tokens of a point (token ids below the vocabulary size, seed-dependent).
std::vector<int32_t> random_prompt(int vocab, int n, uint64_t seed);

}  // namespace ib::model
