#include "model/model_choice.h"

#include <fmt/format.h>

#include "core/errors.h"
#include "model/checkpoint.h"
#include "numerics/random.h"

namespace ib::model {

ModelChoice choose_model(const Point& p, uint64_t seed) { return choose_model(p.text("model"), p.text("weights"), seed); }

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

std::optional<KeyProblem> check_model_weights(const std::map<std::string, std::vector<Value>>& values,
                                              const std::string& model_key, const std::string& weights_key) {
  auto m = values.find(model_key);
  auto w = values.find(weights_key);
  if (m == values.end() || w == values.end()) return std::nullopt;
  for (const Value& wv : w->second) {
    const std::string& weights = std::get<std::string>(wv);
    for (const Value& mv : m->second) {
      const std::string& name = std::get<std::string>(mv);
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

std::vector<int32_t> random_prompt(int vocab, int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  return t;
}

}  // namespace ib::model
