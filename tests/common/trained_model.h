// One of our committed trained models (data/models/, with its recipe) loaded for a test: its
// config, weights, tokenizer and constrain vocabulary; engines made from it on demand.
#pragma once

#include <memory>
#include <string>

#include "constrain/vocab.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ib::testing_support {

struct TrainedModel {
  explicit TrainedModel(const std::string& name = "ib-draft-1m")
      : dir(std::string(IB_SOURCE_DIR) + "/data/models/" + name),
        config(model::config_from_hf(dir)),
        weights(model::safetensors_weights(config, dir)),
        tok(tokenizer::Tokenizer::load(dir)),
        vocab(constrain::load_vocabulary(dir + "/tokenizer.json")) {}
  std::unique_ptr<model::Model> cpu_engine() const { return model::make_cpu_model(config, *weights); }

  std::string dir;
  model::ModelConfig config;
  std::unique_ptr<model::WeightSource> weights;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::shared_ptr<const constrain::Vocabulary> vocab;
};

}  // namespace ib::testing_support
