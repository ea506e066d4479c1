#include "model/weights.h"
#include "core/data_dir.h"
#include "model/safetensors_file.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "core/output.h"
#include "numerics/dtype.h"
#include "numerics/half.h"
#include "numerics/parallel.h"
#include "numerics/random.h"

namespace ib::model {

int64_t TensorSpec::elems() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorSpec::is_norm() const { return name.find("norm.weight") != std::string::npos; }

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden, q = c.q_dim(), kv = c.kv_dim(), m = c.mlp;
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab, h}});
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    t.push_back({p + "input_layernorm.weight", {h}});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}});
    if (c.qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}});
      t.push_back({p + "self_attn.k_proj.bias", {kv}});
      t.push_back({p + "self_attn.v_proj.bias", {kv}});
    }
    if (c.qk_norm) {
      t.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
      t.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    }
    t.push_back({p + "self_attn.o_proj.weight", {h, q}});
    if (c.o_bias) t.push_back({p + "self_attn.o_proj.bias", {h}});
    t.push_back({p + "post_attention_layernorm.weight", {h}});
    t.push_back({p + "mlp.gate_proj.weight", {m, h}});
    t.push_back({p + "mlp.up_proj.weight", {m, h}});
    t.push_back({p + "mlp.down_proj.weight", {h, m}});
    if (c.mlp_bias) {
      t.push_back({p + "mlp.gate_proj.bias", {m}});
      t.push_back({p + "mlp.up_proj.bias", {m}});
      t.push_back({p + "mlp.down_proj.bias", {h}});
    }
  }
  t.push_back({"model.norm.weight", {h}});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", {c.vocab, h}});
  return t;
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t x = 1469598103934665603ull;
  for (unsigned char ch : s) x = (x ^ ch) * 1099511628211ull;
  return x;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The config.json keys that decide whether the model has a tensor and its shape. A checkpoint
// whose weights disagree with its config most often has one of these wrong, so errors name them.
std::string config_keys_of(const std::string& tensor) {
  auto has = [&](const char* part) { return tensor.find(part) != std::string::npos; };
  const std::string layers = tensor.rfind("model.layers.", 0) == 0 ? "num_hidden_layers, " : "";
  if (tensor == "lm_head.weight") return "tie_word_embeddings, vocab_size, hidden_size";
  if (has("embed_tokens")) return "vocab_size, hidden_size";
  if (ends_with(tensor, ".bias")) return layers + (has(".mlp.") ? "mlp_bias" : "attention_bias");
  if (has("q_proj") || has("o_proj")) return layers + "num_attention_heads, head_dim, hidden_size";
  if (has("k_proj") || has("v_proj")) return layers + "num_key_value_heads, head_dim, hidden_size";
  if (has(".mlp.")) return layers + "intermediate_size, hidden_size";
  return layers + "hidden_size";
}

class RandomWeights : public WeightSource {
 public:
  RandomWeights(const ModelConfig& c, uint64_t seed) : c_(c), seed_(seed) {}
  void read(const TensorSpec& spec, float* dst) const override {
    if (spec.is_norm()) {
      std::fill(dst, dst + spec.elems(), 1.0f);
      return;
    }
    const uint64_t s = tensor_seed(spec);
    const float scale = tensor_scale(spec);
    parallel_for(static_cast<size_t>(spec.elems()), [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) dst[i] = round_to(DType::BF16, scale * random_uniform(s, i));
    });
  }
  std::string describe() const override { return fmt::format("random weights (seed {})", seed_); }
  bool is_random() const override { return true; }
  uint64_t tensor_seed(const TensorSpec& spec) const override { return mix64(seed_ ^ fnv1a(spec.name)); }
  float tensor_scale(const TensorSpec& spec) const override {
    if (spec.is_norm()) return 1.0f;
    const double residual = 1.0 / std::sqrt(2.0 * c_.layers);  // branch outputs added to the stream
    const double fan_in = spec.shape.size() == 2 ? static_cast<double>(spec.shape[1]) : 1.0;
    const double unit = std::sqrt(3.0 / fan_in);  // uniform(±a) has variance a²/3: unit-variance outputs
    const std::string& n = spec.name;
    // Logits of standard deviation ~3: peaked next-token distributions that are not one-hot.
    if (n == "lm_head.weight") return static_cast<float>(3.0 * std::sqrt(3.0 / static_cast<double>(c_.hidden)));
    if (n == "model.embed_tokens.weight")
      return c_.tied_embeddings ? static_cast<float>(3.0 * std::sqrt(3.0 / static_cast<double>(c_.hidden))) : 1.0f;
    if (ends_with(n, ".bias")) return 0.1f;
    if (ends_with(n, "o_proj.weight") || ends_with(n, "down_proj.weight")) return static_cast<float>(unit * residual);
    return static_cast<float>(unit);
  }

 private:
  ModelConfig c_;
  uint64_t seed_;
};

class SafetensorsWeights : public WeightSource {
 public:
  SafetensorsWeights(const ModelConfig& c, std::string dir) : dir_(std::move(dir)) {
    namespace fs = std::filesystem;
    const std::string single = dir_ + "/model.safetensors", index = dir_ + "/model.safetensors.index.json";
    if (fs::exists(index)) {
      const std::string text = read_input_file(index, uint64_t{64} << 20);
      nlohmann::json j;
      try {
        j = parse_json_bounded(text, index);
      } catch (const std::exception& e) {
        throw InputError(index + ": not JSON: " + e.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object()) throw InputError(index + ": weight_map: missing");
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string()) throw InputError(index + ": /weight_map/" + it.key() + ": not a file name");
        const std::string file = it.value().get<std::string>();
        if (!files_.count(file)) files_.emplace(file, SafetensorsFile(dir_ + "/" + file));
        where_[it.key()] = file;
      }
    } else if (fs::exists(single)) {
      files_.emplace("model.safetensors", SafetensorsFile(single));
      for (const std::string& name : files_.at("model.safetensors").names()) where_[name] = "model.safetensors";
    } else {
      throw InputError(dir_ + ": no model.safetensors or model.safetensors.index.json");
    }
    // Check every tensor up front: a missing or mis-shaped one is an error before any work.
    std::set<std::string> used;
    for (const auto& spec : tensor_specs(c)) {
      entry(spec);
      used.insert(spec.name);
    }
    // A tensor the engine would not read means the config describes another model (a bias, a
    // norm, an expert it does not know): refused, never silently dropped. The exceptions are
    // transformers' own: with tied embeddings it ignores a stored lm_head.weight, and older
    // checkpoints carry each layer's RoPE inv_freq buffer, which it recomputes from the config.
    std::vector<std::string> unused;
    for (const auto& [name, file] : where_) {
      if (used.count(name)) continue;
      if (c.tied_embeddings && name == "lm_head.weight") continue;
      if (ends_with(name, ".rotary_emb.inv_freq")) {
        ++ignored_inv_freq_;
        continue;
      }
      unused.push_back(name);
    }
    if (!unused.empty()) {
      const size_t shown = std::min<size_t>(unused.size(), 6);
      throw InputError(fmt::format("{}: {} tensor{} the model described by config.json does not use: {}{}", dir_, unused.size(),
                                   unused.size() == 1 ? "" : "s",
                                   fmt::join(unused.begin(), unused.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                                   unused.size() > shown ? fmt::format(" and {} more", unused.size() - shown) : ""));
    }
    tied_head_ignored_ = c.tied_embeddings && where_.count("lm_head.weight");
  }

  void read(const TensorSpec& spec, float* dst) const override { entry(spec).read(spec.name, dst); }
  std::string describe() const override {
    std::string d = "safetensors checkpoint " + dir_;
    if (tied_head_ignored_) d += " (its lm_head.weight ignored: tied embeddings, as transformers does)";
    if (ignored_inv_freq_ > 0)
      d += fmt::format(" ({} stored rotary_emb.inv_freq buffers ignored, as transformers does)", ignored_inv_freq_);
    return d;
  }

 private:
  // The file holding the tensor, its header entry checked against the config's shape.
  const SafetensorsFile& entry(const TensorSpec& spec) const {
    auto w = where_.find(spec.name);
    if (w == where_.end())
      throw InputError(
          fmt::format("{}: tensor '{}' is missing from the checkpoint, though config.json ({}) says the model has it", dir_,
                      spec.name, config_keys_of(spec.name)));
    const SafetensorsFile& f = files_.at(w->second);
    if (!f.contains(spec.name))
      throw InputError(fmt::format("{}: tensor '{}' is listed in the index but not in the file", f.path(), spec.name));
    const std::vector<int64_t> shape = f.shape(spec.name);
    if (shape != spec.shape)
      throw InputError(fmt::format("{}: tensor '{}': shape [{}], where config.json ({}) makes it [{}]", f.path(), spec.name,
                                   fmt::join(shape, ", "), config_keys_of(spec.name), fmt::join(spec.shape, ", ")));
    f.entry(spec.name, spec.shape);
    return f;
  }

  std::string dir_;
  std::map<std::string, SafetensorsFile> files_;
  std::map<std::string, std::string> where_;  // tensor -> file
  bool tied_head_ignored_ = false;
  int ignored_inv_freq_ = 0;
};

}  // namespace

std::unique_ptr<WeightSource> random_weights(const ModelConfig& c, uint64_t seed) {
  return std::make_unique<RandomWeights>(c, seed);
}

namespace {

// Reads through to the full model's source: the tensors of layers < L share its names.
class FirstLayers : public WeightSource {
 public:
  FirstLayers(const WeightSource& full, int layers) : full_(full), layers_(layers) {}
  void read(const TensorSpec& spec, float* dst) const override { full_.read(spec, dst); }
  std::optional<BlockRows> block_rows(const TensorSpec& spec) const override { return full_.block_rows(spec); }
  std::string describe() const override { return fmt::format("the first {} layers of {}", layers_, full_.describe()); }
  bool is_random() const override { return full_.is_random(); }
  uint64_t tensor_seed(const TensorSpec& spec) const override { return full_.tensor_seed(spec); }
  float tensor_scale(const TensorSpec& spec) const override { return full_.tensor_scale(spec); }

 private:
  const WeightSource& full_;
  int layers_;
};

}  // namespace

std::unique_ptr<WeightSource> first_layers(const WeightSource& full, int layers) {
  return std::make_unique<FirstLayers>(full, layers);
}

ModelConfig first_layers_config(const ModelConfig& c, int layers) {
  if (layers < 1 || layers >= c.layers)
    throw InputError(
        fmt::format("draft_layers: {} is not between 1 and {} (the target's layers minus one)", layers, c.layers - 1));
  ModelConfig d = c;
  d.layers = layers;
  d.name = fmt::format("{}:{}", c.name, layers);
  return d;
}

std::unique_ptr<WeightSource> safetensors_weights(const ModelConfig& c, const std::string& dir) {
  return std::make_unique<SafetensorsWeights>(c, data_path(dir));
}

void write_safetensors(const std::string& path, const std::vector<std::pair<TensorSpec, std::vector<float>>>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [spec, values] : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(values.size()) * 2;
    header[spec.name] = {{"dtype", "BF16"}, {"shape", spec.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  const std::string text = header.dump();
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xFF));
  out += text;
  for (const auto& [spec, values] : tensors)
    for (float v : values) {
      const uint16_t b = float_to_bf16_bits(v);
      out.push_back(static_cast<char>(b & 0xFF));
      out.push_back(static_cast<char>(b >> 8));
    }
  std::ofstream f(path, std::ios::binary);
  if (!f.write(out.data(), static_cast<std::streamsize>(out.size()))) throw std::runtime_error(path + ": cannot write");
}

}  // namespace ib::model
