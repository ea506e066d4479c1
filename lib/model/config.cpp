#include "model/config.h"

#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"

namespace ib::model {

int64_t ModelConfig::parameters() const {
  const int64_t h = hidden, q = q_dim(), kv = kv_dim();
  int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * int64_t{mlp} + 2 * h;
  if (qkv_bias) per_layer += q + 2 * kv;
  int64_t p = int64_t{vocab} * h + per_layer * layers + h;
  if (!tied_embeddings) p += int64_t{vocab} * h;
  return p;
}

double ModelConfig::flops_per_token(int64_t context) const {
  const double h = hidden, q = q_dim(), kv = kv_dim();
  const double matmul = layers * (h * q + 2 * h * kv + q * h + 3 * h * mlp) + static_cast<double>(vocab) * h;
  int64_t seen = context;
  if (sliding_window > 0 && seen > sliding_window) seen = sliding_window;
  return 2 * matmul + 4.0 * head_dim * heads * layers * static_cast<double>(seen);
}

std::string ModelConfig::describe() const {
  return fmt::format("{} layers, hidden {}, {} heads ({} kv) × {}, MLP {}, vocab {}{}{}", layers, hidden, heads, kv_heads, head_dim,
                     mlp, vocab, tied_embeddings ? ", tied embeddings" : "",
                     sliding_window > 0 ? fmt::format(", sliding window {}", sliding_window) : "");
}

namespace {

ModelConfig make(std::string name, int layers, int hidden, int heads, int kv_heads, int mlp, int vocab) {
  ModelConfig c;
  c.name = std::move(name);
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.mlp = mlp;
  c.vocab = vocab;
  return c;
}

std::vector<ModelConfig> presets() {
  std::vector<ModelConfig> v;
  // Published shapes (the checkpoints' config.json).
  ModelConfig llama = make("llama2-7b", 32, 4096, 32, 32, 11008, 32000);
  llama.max_positions = 4096;
  v.push_back(llama);
  ModelConfig q05 = make("qwen2-0.5b", 24, 896, 14, 2, 4864, 151936);
  q05.tied_embeddings = true;
  q05.qkv_bias = true;
  q05.rope_theta = 1000000.0f;
  q05.rms_eps = 1e-6f;
  q05.max_positions = 32768;
  v.push_back(q05);
  ModelConfig q7 = make("qwen2-7b", 28, 3584, 28, 4, 18944, 152064);
  q7.qkv_bias = true;
  q7.rope_theta = 1000000.0f;
  q7.rms_eps = 1e-6f;
  q7.max_positions = 32768;
  v.push_back(q7);
  ModelConfig mistral = make("mistral-7b", 32, 4096, 32, 8, 14336, 32000);
  mistral.sliding_window = 4096;
  mistral.max_positions = 32768;
  v.push_back(mistral);
  // Test and CPU shapes.
  ModelConfig tiny = make("tiny", 2, 64, 4, 4, 172, 512);
  tiny.max_positions = 2048;
  v.push_back(tiny);
  ModelConfig tg = make("tiny-gqa", 2, 64, 4, 2, 160, 600);
  tg.tied_embeddings = true;
  tg.qkv_bias = true;
  tg.rope_theta = 1000000.0f;
  tg.rms_eps = 1e-6f;
  tg.sliding_window = 48;
  tg.max_positions = 2048;
  v.push_back(tg);
  ModelConfig deep = make("deep-narrow", 32, 128, 4, 4, 344, 32000);
  deep.max_positions = 4096;
  v.push_back(deep);
  return v;
}

}  // namespace

std::optional<ModelConfig> preset(const std::string& name) {
  for (const auto& c : presets())
    if (c.name == name) return c;
  return std::nullopt;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const auto& c : presets()) n.push_back(c.name);
  return n;
}

ModelConfig config_from_hf(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open (a Hugging Face checkpoint directory needs config.json)");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw InputError(path + ": not JSON: " + e.what());
  }
  // Every field is checked for its JSON type (and integers for range) before use: a garbage
  // config is an InputError naming the file and the key, never a type_error or a division by 0.
  if (!j.is_object()) throw InputError(path + ": expected a JSON object of model settings");
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto integer = [&](const char* key, int min) {
    if (!present(key) || !j[key].is_number_integer()) throw InputError(fmt::format("{}: {}: missing or not an integer", path, key));
    const int64_t v = j[key].get<int64_t>();
    if (v < min || v > std::numeric_limits<int>::max())
      throw InputError(fmt::format("{}: {}: {} is out of range (at least {})", path, key, v, min));
    return static_cast<int>(v);
  };
  auto need = [&](const char* key) { return integer(key, 1); };
  auto real = [&](const char* key, float def) {
    if (!present(key)) return def;
    if (!j[key].is_number()) throw InputError(fmt::format("{}: {}: not a number", path, key));
    return j[key].get<float>();
  };
  auto flag = [&](const char* key, bool def) {
    if (!present(key)) return def;
    if (!j[key].is_boolean()) throw InputError(fmt::format("{}: {}: not true or false", path, key));
    return j[key].get<bool>();
  };
  auto text = [&](const char* key, const std::string& def) {
    if (!present(key)) return def;
    if (!j[key].is_string()) throw InputError(fmt::format("{}: {}: not a string", path, key));
    return j[key].get<std::string>();
  };
  std::string type = text("model_type", "");
  if (type != "llama" && type != "qwen2" && type != "mistral")
    throw InputError(fmt::format("{}: model_type: '{}' is not supported (llama, qwen2, mistral)", path, type));
  if (text("hidden_act", "silu") != "silu")
    throw InputError(fmt::format("{}: hidden_act: only silu (SwiGLU) is supported", path));
  ModelConfig c;
  c.name = dir;
  c.layers = need("num_hidden_layers");
  c.hidden = need("hidden_size");
  c.heads = need("num_attention_heads");
  c.kv_heads = present("num_key_value_heads") ? need("num_key_value_heads") : c.heads;
  c.head_dim = present("head_dim") ? need("head_dim") : c.hidden / c.heads;
  if (c.head_dim <= 0)
    throw InputError(fmt::format("{}: hidden_size: {} is smaller than num_attention_heads {}", path, c.hidden, c.heads));
  c.mlp = need("intermediate_size");
  c.vocab = need("vocab_size");
  c.tied_embeddings = flag("tie_word_embeddings", false);
  c.qkv_bias = type == "qwen2" || flag("attention_bias", false);
  c.rope_theta = real("rope_theta", 10000.0f);
  c.rms_eps = real("rms_norm_eps", 1e-5f);
  c.max_positions = present("max_position_embeddings") ? need("max_position_embeddings") : 4096;
  const bool window_on = type == "mistral" || flag("use_sliding_window", false);
  if (window_on && present("sliding_window") && j["sliding_window"].is_number_integer()) c.sliding_window = integer("sliding_window", 0);
  if (c.heads % c.kv_heads != 0)
    throw InputError(fmt::format("{}: num_key_value_heads: {} does not divide num_attention_heads {}", path, c.kv_heads, c.heads));
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    throw InputError(fmt::format("{}: rope_scaling: not supported yet", path));
  return c;
}

}  // namespace ib::model
