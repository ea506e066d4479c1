#include "kinds/params/engine_params.h"

#include <fmt/format.h>

#include "model/checkpoint.h"

namespace ib::model {

KeySpec model_key(const std::string& default_preset) {
  KeySpec model =
      key_spec("model", ParamType::Enum, "engine preset (random weights unless `weights`), or checkpoint (weights: DIR)",
               Value(default_preset));
  model.choices = preset_names();
  model.choices.push_back("checkpoint");
  return model;
}

KeySpec weights_key() {
  return key_spec("weights", ParamType::String,
                  "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
                  Value(std::string("random")));
}

KeySpec matmul_key(const std::string& engines) {
  return enum_key("matmul",
                  engines +
                      " matmuls: cublas, or gemv (our weight-streaming GEMV for products of <= 8 rows whose `in` is a "
                      "multiple of 8, cuBLAS for the others)",
                  "cublas", matmul_names());
}

std::vector<std::string> with_matmul(std::vector<std::string> keys) {
  keys.push_back("matmul");
  return keys;
}

KeySpec cpu_matmul_key() {
  return enum_key(
      "cpu_matmul",
      "CPU engine's products: blas (the packed decode GEMV, prefills of > 32 rows through OpenBLAS; within "
      "float32 rounding of reference), packed (decode GEMV on each matrix packed once in its stored type, bf16 "
      "where exact; our SGEMM for prefills; bit for bit reference), int8 (blas, but GGUF Q8_0/Q4_0/Q4_1 weights multiply "
      "activations quantized to int8 per 32 inputs with integer dot products, AVX-512 VNNI: llama.cpp's "
      "arithmetic at every row count, so a row's products do not depend on its pass; within a stated tolerance of "
      "reference) or reference (float32 [in][out] GEMV and our "
      "SGEMM: the check of the others)",
      "blas", cpu_matmul_names());
}
std::vector<std::string> with_cpu_matmul(std::vector<std::string> keys) {
  keys.push_back("cpu_matmul");
  return keys;
}

std::optional<KeyProblem> check_model_weights(const KeyValues<std::string>& models,
                                              const KeyValues<std::string>& weights_values) {
  const std::string &model_key = models.key, &weights_key = weights_values.key;
  for (const std::string& weights : weights_values.values) {
    for (const std::string& name : models.values) {
      if (weights == "random") {
        if (name == "checkpoint")
          return KeyProblem{
              {weights_key, model_key},
              fmt::format("{} checkpoint needs {}: DIR (a Hugging Face checkpoint directory)", model_key, weights_key)};
        continue;
      }
      try {
        std::optional<ModelConfig> c = name == "checkpoint" ? checkpoint_config(weights) : preset(name);
        if (c) checkpoint_weights(*c, weights);  // headers only: every tensor's name, dtype and shape
      } catch (const std::exception& e) {        // InputError, or a JSON type error in an index file
        return KeyProblem{{weights_key}, e.what()};
      }
    }
  }
  return std::nullopt;
}

}  // namespace ib::model
