// A checkpoint the user names with `weights:` or `serve PATH`: a Hugging Face directory
// (config.json + safetensors) or a GGUF file (llama.cpp's format). One place decides which.
#pragma once

#include <memory>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace ib::model {

// True for a GGUF file (by its magic), false for anything else (a directory).
bool is_gguf_checkpoint(const std::string& path);
// config_from_gguf or config_from_hf.
ModelConfig checkpoint_config(const std::string& path);
// gguf_weights or safetensors_weights.
std::unique_ptr<WeightSource> checkpoint_weights(const ModelConfig& c, const std::string& path);

}  // namespace ib::model
