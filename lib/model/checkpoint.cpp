#include "model/checkpoint.h"

#include <filesystem>

#include "core/data_dir.h"
#include "core/gguf_file.h"
#include "model/gguf_checkpoint.h"

namespace ib::model {

bool is_gguf_checkpoint(const std::string& path) {
  const std::string p = data_path(path);
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && gguf::is_gguf(p);
}

ModelConfig checkpoint_config(const std::string& path) {
  return is_gguf_checkpoint(path) ? config_from_gguf(path) : config_from_hf(path);
}

std::unique_ptr<WeightSource> checkpoint_weights(const ModelConfig& c, const std::string& path) {
  return is_gguf_checkpoint(path) ? gguf_weights(c, path) : safetensors_weights(c, path);
}

}  // namespace ib::model
