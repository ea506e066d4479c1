#include "model/model_choice.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "model/checkpoint.h"
#include "numerics/random.h"

namespace ib::model {

ModelChoice choose_model(const std::string& name, const std::string& weights, uint64_t seed, const std::string& model_key,
                         const std::string& weights_key) {
  ModelChoice m;
  if (name == "checkpoint") {
    if (weights == "random")
      throw InputError(fmt::format("{}: checkpoint needs {}: DIR (a Hugging Face checkpoint directory)", model_key, weights_key));
    m.config = checkpoint_config(weights);
    m.weights = checkpoint_weights(m.config, weights);
    return m;
  }
  auto c = preset(name);
  if (!c) throw InputError(fmt::format("{}: unknown preset '{}'", model_key, name));
  m.config = *c;
  m.weights = weights == "random" ? random_weights(m.config, seed) : checkpoint_weights(m.config, weights);
  return m;
}

std::vector<int32_t> random_prompt(int vocab, int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  return t;
}

}  // namespace ib::model
