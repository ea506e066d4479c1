// The model a kind's keys name (a preset with random weights, or a checkpoint), and random prompts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace ib::model {

// A model: a preset with random weights, or `checkpoint` with weights: DIR.
struct ModelChoice {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};
// A preset name (or "checkpoint") and weights ("random" or a directory) under the
// spec keys `model_key` / `weights_key` (named in errors).
ModelChoice choose_model(const std::string& name, const std::string& weights, uint64_t seed,
                         const std::string& model_key = "model", const std::string& weights_key = "weights");
// Deterministic prompt tokens of a point (token ids below the vocabulary size, seed-dependent).
std::vector<int32_t> random_prompt(int vocab, int n, uint64_t seed);

}  // namespace ib::model
