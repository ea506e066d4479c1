#include "model/config.h"
#include "core/data_dir.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"

namespace ib::model {

// A config.json is a few KiB; past this it is not one.
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;

int64_t ModelConfig::parameters() const {
  const int64_t h = hidden, q = q_dim(), kv = kv_dim();
  int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * int64_t{mlp} + 2 * h;
  if (qkv_bias) per_layer += q + 2 * kv;
  if (o_bias) per_layer += h;
  if (mlp_bias) per_layer += 2 * int64_t{mlp} + h;
  if (qk_norm) per_layer += 2 * int64_t{head_dim};
  int64_t p = int64_t{vocab} * h + per_layer * layers + h;
  if (!tied_embeddings) p += int64_t{vocab} * h;
  return p;
}

bool ModelConfig::any_window() const {
  for (int l = 0; l < layers; ++l)
    if (window(l) > 0) return true;
  return false;
}

double ModelConfig::flops_per_token(int64_t context) const {
  const double h = hidden, q = q_dim(), kv = kv_dim();
  const double matmul = layers * (h * q + 2 * h * kv + q * h + 3 * h * mlp) + static_cast<double>(vocab) * h;
  double seen = 0;  // (query, key) pairs over the layers
  for (int l = 0; l < layers; ++l) {
    const int w = window(l);
    seen += static_cast<double>(w > 0 && context > w ? w : context);
  }
  return 2 * matmul + 4.0 * head_dim * heads * seen;
}

std::vector<double> ModelConfig::rope_inv_freq() const {
  // transformers' modeling_rope_utils, in double (transformers computes these in float32).
  const int half = head_dim / 2;
  const RopeScaling& r = rope_scaling;
  std::vector<double> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) f[static_cast<size_t>(i)] = 1.0 / std::pow(static_cast<double>(rope_theta), 2.0 * i / head_dim);
  if (r.type == "linear") {
    for (double& x : f) x /= r.factor;
  } else if (r.type == "llama3") {
    const double old_len = r.original_max_positions;
    const double low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * M_PI / x;
      if (wavelen > low_wavelen) {
        x /= r.factor;  // long wavelengths: interpolated
      } else if (!(wavelen < high_wavelen)) {
        const double smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        x = (1 - smooth) * x / r.factor + smooth * x;
      }  // short wavelengths: unchanged
    }
  } else if (r.type == "yarn") {
    const double dim = head_dim, base = rope_theta;
    auto correction_dim = [&](double rotations) {
      return dim * std::log(r.original_max_positions / (rotations * 2 * M_PI)) / (2 * std::log(base));
    };
    double low = correction_dim(r.beta_fast), high = correction_dim(r.beta_slow);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1);
    if (low == high) high += 0.001;  // transformers: "prevent singularity"
    for (int i = 0; i < half; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1 - ramp;  // weight of the unscaled frequency
      double& x = f[static_cast<size_t>(i)];
      x = x / r.factor * (1 - extrapolation) + x * extrapolation;
    }
  }
  return f;
}

std::string ModelConfig::describe() const {
  std::string window_text;
  if (!layer_windows.empty()) {
    int n = 0;
    for (int w : layer_windows) n += w > 0;
    if (n > 0) window_text = fmt::format(", sliding window on {} of {} layers", n, layers);
  } else if (sliding_window > 0) {
    window_text = fmt::format(", sliding window {}", sliding_window);
  }
  return fmt::format("{} layers, hidden {}, {} heads ({} kv) × {}, MLP {}, vocab {}{}{}", layers, hidden, heads, kv_heads,
                     head_dim, mlp, vocab, tied_embeddings ? ", tied embeddings" : "", window_text);
}

std::string ModelConfig::describe_details() const {
  std::vector<std::string> parts;
  if (!model_type.empty()) parts.push_back(model_type);
  std::string rope = fmt::format("rope theta {:g}", rope_theta);
  const RopeScaling& r = rope_scaling;
  if (r.type == "linear") rope += fmt::format(", linear x{:g}", r.factor);
  if (r.type == "llama3")
    rope += fmt::format(", llama3 x{:g} (original {}, low {:g}, high {:g})", r.factor, r.original_max_positions,
                        r.low_freq_factor, r.high_freq_factor);
  if (r.type == "yarn")
    rope += fmt::format(", yarn x{:g} (original {}, beta {:g}/{:g}, attention x{:.4g})", r.factor, r.original_max_positions,
                        r.beta_fast, r.beta_slow, r.attention_factor);
  parts.push_back(rope);
  parts.push_back(fmt::format("rms eps {:g}", rms_eps));
  if (any_window()) {
    // Runs of layers with the same window: "window 6 on layers 1-2, full on 0".
    std::vector<std::string> runs;
    for (int l = 0; l < layers;) {
      int e = l;
      while (e + 1 < layers && window(e + 1) == window(l)) ++e;
      const std::string range = e == l ? fmt::format("layer {}", l) : fmt::format("layers {}-{}", l, e);
      runs.push_back(window(l) > 0 ? fmt::format("window {} on {}", window(l), range) : fmt::format("full on {}", range));
      l = e + 1;
    }
    parts.push_back(fmt::format("{}", fmt::join(runs, ", ")));
  }
  std::vector<std::string> bias;
  if (qkv_bias) bias.push_back("q/k/v");
  if (o_bias) bias.push_back("o");
  if (mlp_bias) bias.push_back("mlp");
  if (!bias.empty()) parts.push_back(fmt::format("bias {}", fmt::join(bias, ", ")));
  if (qk_norm) parts.push_back("q/k norm");
  for (const auto& n : load_notes) parts.push_back(n);
  return fmt::format("{}", fmt::join(parts, "; "));
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
  // Llama 3 8B: GQA 32/8, 128K vocabulary, theta 5e5 with llama3 frequency scaling (Llama 3.1).
  ModelConfig llama3 = make("llama3-8b", 32, 4096, 32, 8, 14336, 128256);
  llama3.rope_theta = 500000.0f;
  llama3.rope_scaling.type = "llama3";
  llama3.rope_scaling.factor = 8.0;
  llama3.rope_scaling.low_freq_factor = 1.0;
  llama3.rope_scaling.high_freq_factor = 4.0;
  llama3.rope_scaling.original_max_positions = 8192;
  llama3.max_positions = 131072;
  v.push_back(llama3);
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

namespace {

// The model types the engine runs, each with the architecture transformers builds for it.
struct Architecture {
  const char* model_type;
  const char* architecture;
};
constexpr Architecture kArchitectures[] = {{"llama", "LlamaForCausalLM"},
                                           {"qwen2", "Qwen2ForCausalLM"},
                                           {"mistral", "MistralForCausalLM"},
                                           {"qwen3", "Qwen3ForCausalLM"}};

// Keys whose presence means a model the engine would run wrongly: refused, never ignored.
constexpr const char* kRefusedKeys[] = {"quantization_config",   "num_local_experts", "num_experts",      "num_experts_per_tok",
                                        "moe_intermediate_size", "n_routed_experts",  "n_shared_experts", "decoder_sparse_step"};

// config.json read key by key. Every field is checked for its JSON type (and integers for
// range) before use: a garbage config is an InputError naming the file and the key, never a
// type_error or a division by 0.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& j, const std::string& path) : j_(j), path_(path) {}

  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw InputError(fmt::format("{}: {}: {}", path_, key, message));
  }
  bool present(const nlohmann::json& obj, const char* key) const { return obj.contains(key) && !obj[key].is_null(); }
  bool present(const char* key) const { return present(j_, key); }
  int integer(const nlohmann::json& obj, const std::string& where, const char* key, int min) const {
    const std::string name = where.empty() ? key : where + "." + key;
    if (!present(obj, key) || !obj[key].is_number_integer()) fail(name, "missing or not an integer");
    const int64_t v = obj[key].get<int64_t>();
    if (v < min || v > std::numeric_limits<int>::max()) fail(name, fmt::format("{} is out of range (at least {})", v, min));
    return static_cast<int>(v);
  }
  int integer(const char* key, int min) const { return integer(j_, "", key, min); }
  int need(const char* key) const { return integer(key, 1); }
  double real(const nlohmann::json& obj, const std::string& where, const char* key, double def, double min_exclusive) const {
    const std::string name = where.empty() ? key : where + "." + key;
    if (!present(obj, key)) return def;
    if (!obj[key].is_number()) fail(name, "not a number");
    const double v = obj[key].get<double>();
    if (!std::isfinite(v) || !(v > min_exclusive)) fail(name, fmt::format("{:g} is out of range (above {:g})", v, min_exclusive));
    return v;
  }
  bool flag(const char* key, bool def) const {
    if (!present(key)) return def;
    if (!j_[key].is_boolean()) fail(key, "not true or false");
    return j_[key].get<bool>();
  }
  std::string text(const nlohmann::json& obj, const std::string& name, const char* key, const std::string& def) const {
    if (!present(obj, key)) return def;
    if (!obj[key].is_string()) fail(name, "not a string");
    return obj[key].get<std::string>();
  }
  std::string text(const char* key, const std::string& def) const { return text(j_, key, key, def); }
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& j_;
  const std::string& path_;
};

// rope_theta and the scaling, from transformers 5's `rope_parameters` or 4.x's top-level
// `rope_theta` + `rope_scaling` (transformers 5 reads both: standardize_rope_params).
void read_rope(const ConfigReader& r, ModelConfig& c) {
  const nlohmann::json& j = r.json();
  const char* key = r.present("rope_parameters") ? "rope_parameters" : r.present("rope_scaling") ? "rope_scaling" : nullptr;
  if (r.present("rope_parameters") && r.present("rope_scaling")) {
    const auto& a = j["rope_parameters"];
    const auto& b = j["rope_scaling"];
    if (a.is_object() && b.is_object() &&
        r.text(a, "rope_parameters.rope_type", "rope_type", "default") !=
            r.text(b, "rope_scaling.rope_type", "rope_type", r.text(b, "rope_scaling.type", "type", "default")))
      r.fail("rope_scaling", "disagrees with rope_parameters on the rope type");
  }
  double theta = r.real(j, "", "rope_theta", 10000.0, 0.0);
  if (r.present("partial_rotary_factor") && r.real(j, "", "partial_rotary_factor", 1.0, 0.0) != 1.0)
    r.fail("partial_rotary_factor", "only 1 (RoPE over the whole head) is supported");
  RopeScaling s;
  if (key) {
    const nlohmann::json& p = j[key];
    const std::string where = key;
    if (!p.is_object()) r.fail(where, "not an object");
    for (const char* nested : {"full_attention", "sliding_attention"})
      if (p.contains(nested)) r.fail(where + "." + nested, "RoPE parameters per layer type are not supported");
    theta = r.real(p, where, "rope_theta", theta, 0.0);
    s.type = r.text(p, where + ".rope_type", "rope_type", r.text(p, where + ".type", "type", "default"));
    if (r.present(p, "partial_rotary_factor") && r.real(p, where, "partial_rotary_factor", 1.0, 0.0) != 1.0)
      r.fail(where + ".partial_rotary_factor", "only 1 (RoPE over the whole head) is supported");
    const int max_pos = c.max_positions;
    // transformers: a top-level original_max_position_embeddings wins, then the dict's, then max_position_embeddings.
    auto original = [&]() {
      if (r.present("original_max_position_embeddings")) return r.integer("original_max_position_embeddings", 1);
      return r.present(p, "original_max_position_embeddings") ? r.integer(p, where, "original_max_position_embeddings", 1)
                                                              : max_pos;
    };
    if (s.type == "default") {
    } else if (s.type == "linear") {
      s.factor = r.real(p, where, "factor", 0.0, 0.0);
      if (s.factor == 0.0) r.fail(where + ".factor", "missing (linear scaling needs it)");
    } else if (s.type == "llama3") {
      for (const char* k : {"factor", "low_freq_factor", "high_freq_factor"})
        if (!r.present(p, k)) r.fail(where + "." + k, "missing (llama3 scaling needs it)");
      s.factor = r.real(p, where, "factor", 1.0, 0.0);
      s.low_freq_factor = r.real(p, where, "low_freq_factor", 1.0, 0.0);
      s.high_freq_factor = r.real(p, where, "high_freq_factor", 4.0, 0.0);
      if (!(s.high_freq_factor > s.low_freq_factor)) r.fail(where + ".high_freq_factor", "must be above low_freq_factor");
      s.original_max_positions = original();
    } else if (s.type == "yarn") {
      s.original_max_positions = original();
      s.factor =
          r.present(p, "factor") ? r.real(p, where, "factor", 1.0, 0.0) : static_cast<double>(max_pos) / s.original_max_positions;
      auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
      const double m = r.real(p, where, "mscale", 0.0, -1e300), m_all = r.real(p, where, "mscale_all_dim", 0.0, -1e300);
      if (r.present(p, "attention_factor"))
        s.attention_factor = r.real(p, where, "attention_factor", 1.0, 0.0);
      else if (m != 0.0 && m_all != 0.0)
        s.attention_factor = mscale(s.factor, m) / mscale(s.factor, m_all);
      else
        s.attention_factor = mscale(s.factor, 1.0);
      // transformers: `get("beta_fast") or 32` (0 means the default too).
      s.beta_fast = r.real(p, where, "beta_fast", 0.0, -1e300);
      if (s.beta_fast == 0.0) s.beta_fast = 32.0;
      s.beta_slow = r.real(p, where, "beta_slow", 0.0, -1e300);
      if (s.beta_slow == 0.0) s.beta_slow = 1.0;
      if (r.present(p, "truncate")) {
        if (!p["truncate"].is_boolean()) r.fail(where + ".truncate", "not true or false");
        s.truncate = p["truncate"].get<bool>();
      }
    } else if (s.type == "dynamic") {
      r.fail(where + ".rope_type",
             "'dynamic' is not supported (its frequencies change with the sequence length while the cache keeps keys "
             "rotated by the old ones; supported: default, linear, llama3, yarn)");
    } else {
      r.fail(where + ".rope_type", fmt::format("'{}' is not supported (default, linear, llama3, yarn)", s.type));
    }
  }
  c.rope_theta = static_cast<float>(theta);
  c.rope_scaling = s;
}

// Which layers attend through a sliding window, as each model's attention module decides.
void read_windows(const ConfigReader& r, const std::string& type, ModelConfig& c) {
  const nlohmann::json& j = r.json();
  auto window_size = [&]() { return r.present("sliding_window") ? r.integer("sliding_window", 1) : 0; };
  if (type == "llama") return;  // LlamaAttention has no window
  if (type == "mistral") {
    c.sliding_window = window_size();  // every layer, when set
    return;
  }
  // qwen2, qwen3: sliding_window counts only with use_sliding_window; layer_types (or, without
  // it, layers at or past max_window_layers) say which layers use it.
  const int w = r.flag("use_sliding_window", false) ? window_size() : 0;
  std::vector<std::string> types;
  if (r.present("layer_types")) {
    const auto& lt = j["layer_types"];
    if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.layers)
      r.fail("layer_types", fmt::format("expected a list of {} layer types (num_hidden_layers)", c.layers));
    for (size_t i = 0; i < lt.size(); ++i) {
      if (!lt[i].is_string()) r.fail(fmt::format("layer_types[{}]", i), "not a string");
      const std::string t = lt[i].get<std::string>();
      if (t != "full_attention" && t != "sliding_attention")
        r.fail(fmt::format("layer_types[{}]", i), fmt::format("'{}' is not full_attention or sliding_attention", t));
      types.push_back(t);
    }
  } else {
    const int first = r.present("max_window_layers") ? r.integer("max_window_layers", 0) : 28;  // Qwen2Config's default
    for (int l = 0; l < c.layers; ++l) types.push_back(w > 0 && l >= first ? "sliding_attention" : "full_attention");
  }
  c.layer_windows.assign(static_cast<size_t>(c.layers), 0);
  bool any = false;
  for (int l = 0; l < c.layers; ++l)
    if (types[static_cast<size_t>(l)] == "sliding_attention" && w > 0) {
      c.layer_windows[static_cast<size_t>(l)] = w;
      any = true;
    }
  if (!any)
    c.layer_windows.clear();
  else
    c.sliding_window = w;
}

}  // namespace

namespace {

// eos_token_id: an id or a list of ids, each in the vocabulary (transformers' generate stops on any).
std::vector<int32_t> eos_ids_of(const nlohmann::json& j, const std::string& path, int vocab) {
  std::vector<int32_t> ids;
  if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) return ids;
  const nlohmann::json& e = j["eos_token_id"];
  const nlohmann::json list = e.is_array() ? e : nlohmann::json::array({e});
  for (const auto& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab)
      throw InputError(fmt::format("{}: eos_token_id: {} is not a token id of the vocabulary of {}", path, v.dump(), vocab));
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

ModelConfig config_from_hf(const std::string& dir) {
  const std::string path = data_path(dir) + "/config.json";
  if (::access(path.c_str(), F_OK) != 0)
    throw InputError(path + ": cannot open (a Hugging Face checkpoint directory needs config.json)");
  ModelConfig c = config_from_hf_json(read_input_file(path, kMaxConfigBytes), path);
  c.name = dir;
  // generate() takes its stopping ids from generation_config.json over config.json's.
  const std::string gen = data_path(dir) + "/generation_config.json";
  if (::access(gen.c_str(), F_OK) == 0) {
    nlohmann::json g;
    try {
      g = parse_json_bounded(read_input_file(gen, kMaxConfigBytes), gen);
    } catch (const std::exception& e) {
      throw InputError(gen + ": not JSON: " + e.what());
    }
    if (!g.is_object()) throw InputError(gen + ": expected a JSON object of generation settings");
    if (g.contains("eos_token_id") && !g["eos_token_id"].is_null()) c.eos_ids = eos_ids_of(g, gen, c.vocab);
  }
  return c;
}

ModelConfig config_from_hf_json(const std::string& text, const std::string& path) {
  if (text.size() > kMaxConfigBytes) throw InputError(path + ": larger than 16 MiB, not a model config");
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, path);
  } catch (const std::exception& e) {
    throw InputError(path + ": not JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(path + ": expected a JSON object of model settings");
  const ConfigReader r(j, path);
  const std::string type = r.text("model_type", "");
  const Architecture* arch = nullptr;
  for (const auto& a : kArchitectures)
    if (type == a.model_type) arch = &a;
  if (!arch) r.fail("model_type", fmt::format("'{}' is not supported (llama, qwen2, mistral, qwen3)", type));
  if (r.present("architectures")) {
    const auto& a = j["architectures"];
    if (!a.is_array()) r.fail("architectures", "not a list");
    for (const auto& e : a)
      if (!e.is_string() || e.get<std::string>() != arch->architecture)
        r.fail("architectures", fmt::format("{} is not {} (model_type {})", e.dump(), arch->architecture, type));
  }
  for (const char* key : kRefusedKeys)
    if (r.present(key)) r.fail(key, "not supported (quantized and mixture-of-experts models are not run by this engine)");
  const std::string act = r.text("hidden_act", "silu");
  if (act != "silu") r.fail("hidden_act", fmt::format("'{}' is not supported (silu: SwiGLU)", act));

  ModelConfig c;
  c.model_type = type;
  c.layers = r.need("num_hidden_layers");
  if (c.layers > 4096) r.fail("num_hidden_layers", fmt::format("{} is past the limit of 4096", c.layers));
  c.hidden = r.need("hidden_size");
  c.heads = r.need("num_attention_heads");
  c.kv_heads = r.present("num_key_value_heads") ? r.need("num_key_value_heads") : c.heads;
  c.head_dim = r.present("head_dim") ? r.need("head_dim") : c.hidden / c.heads;
  if (c.head_dim <= 0) r.fail("hidden_size", fmt::format("{} is smaller than num_attention_heads {}", c.hidden, c.heads));
  if (c.head_dim % 2 != 0) r.fail("head_dim", fmt::format("{} is odd (RoPE rotates pairs)", c.head_dim));
  c.mlp = r.need("intermediate_size");
  c.vocab = r.need("vocab_size");
  // Shapes whose products overflow the engine's int indices are bad input, not a crash.
  const int64_t widest = std::max({int64_t{c.hidden}, int64_t{c.mlp}, int64_t{c.heads} * c.head_dim, int64_t{c.vocab}});
  if (int64_t{c.heads} * c.head_dim > (int64_t{1} << 20) ||
      widest * std::max<int64_t>(c.hidden, c.mlp) > std::numeric_limits<int32_t>::max())
    r.fail("hidden_size", "the shapes are past what the engine indexes (a matrix of more than 2^31 elements)");
  c.tied_embeddings = r.flag("tie_word_embeddings", false);
  // Biases as each architecture's modules take them: Qwen2 q/k/v always; Llama and Qwen3 q/k/v
  // and o_proj with attention_bias, Llama gate/up/down with mlp_bias; Mistral none.
  if (type == "qwen2") c.qkv_bias = true;
  if (type == "llama" || type == "qwen3") c.qkv_bias = c.o_bias = r.flag("attention_bias", false);
  if (type == "llama") c.mlp_bias = r.flag("mlp_bias", false);
  c.qk_norm = type == "qwen3";
  c.rms_eps = static_cast<float>(r.real(j, "", "rms_norm_eps", 1e-5, 0.0));
  c.max_positions = r.present("max_position_embeddings") ? r.need("max_position_embeddings") : 4096;
  read_rope(r, c);
  if (c.heads % c.kv_heads != 0)
    r.fail("num_key_value_heads", fmt::format("{} does not divide num_attention_heads {}", c.kv_heads, c.heads));
  read_windows(r, type, c);
  c.eos_ids = eos_ids_of(j, path, c.vocab);
  return c;
}

}  // namespace ib::model
