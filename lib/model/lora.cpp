#include "model/lora.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/data_dir.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "model/safetensors_file.h"
#include "numerics/dtype.h"
#include "numerics/random.h"

namespace ib::model {
namespace {

// PEFT's target_modules regex, matched as Python's re.fullmatch does, through PCRE2 (Perl syntax,
// as Python's) with bounds: nesting past 64 levels is refused at compile time, and a match past
// 100,000 backtracking steps is an error, not a hang. std::regex recursed once per nesting level
// (a deeply nested pattern overflowed the stack) and backtracked without bound.
class ModuleRegex {
 public:
  ModuleRegex(const std::string& pattern, std::string& why) {
    pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
    pcre2_set_parens_nest_limit(cc, 64);
    if (pattern.size() > 4096) {
      why = "longer than 4096 bytes";
    } else {
      int err = 0;
      PCRE2_SIZE at = 0;
      code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                            &err, &at, cc);
      if (!code_) why = fmt::format("{} at offset {}", message(err), at);
    }
    pcre2_compile_context_free(cc);
    if (!code_) return;
    match_ = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(match_, 100000);
    pcre2_set_depth_limit(match_, 1000);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~ModuleRegex() {
    pcre2_match_data_free(data_);
    pcre2_match_context_free(match_);
    pcre2_code_free(code_);
  }
  ModuleRegex(const ModuleRegex&) = delete;
  ModuleRegex& operator=(const ModuleRegex&) = delete;
  // Whether the whole of `s` matches; `why` set when the match gave up (its bounds).
  bool full_match(const std::string& s, std::string& why) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, data_, match_);
    if (rc >= 0) return true;
    if (rc != PCRE2_ERROR_NOMATCH) why = message(rc) + " (the pattern backtracks too much)";
    return false;
  }

 private:
  static std::string message(int code) {
    PCRE2_UCHAR buf[256];
    return pcre2_get_error_message(code, buf, sizeof buf) < 0 ? fmt::format("PCRE2 error {}", code)
                                                              : std::string(reinterpret_cast<const char*>(buf));
  }
  pcre2_code* code_ = nullptr;
  pcre2_match_context* match_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

constexpr const char* kModuleNames[kLoraModules] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
constexpr const char* kShortNames[kLoraModules] = {"q", "k", "v", "o", "gate", "up", "down"};

bool is_attention(LoraModule m) { return static_cast<int>(m) <= static_cast<int>(LoraModule::O); }

// The module's path inside the model, as PEFT matches target_modules against it.
std::string module_path(int layer, LoraModule m) {
  return fmt::format("model.layers.{}.{}.{}", layer, is_attention(m) ? "self_attn" : "mlp", module_name(m));
}

}  // namespace

const char* module_name(LoraModule m) { return kModuleNames[static_cast<int>(m)]; }

bool parse_module(const std::string& name, LoraModule* out) {
  for (int i = 0; i < kLoraModules; ++i)
    if (name == kModuleNames[i] || name == kShortNames[i]) {
      *out = static_cast<LoraModule>(i);
      return true;
    }
  return false;
}

std::vector<LoraModule> parse_modules(const std::string& list, const std::string& key) {
  std::vector<LoraModule> out;
  if (list == "all") {
    for (int i = 0; i < kLoraModules; ++i) out.push_back(static_cast<LoraModule>(i));
    return out;
  }
  size_t begin = 0;
  while (begin <= list.size()) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    LoraModule m{};
    if (!parse_module(name, &m))
      throw InputError(
          fmt::format("{}: '{}' is not a module (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, "
                      "their short names q ... down, or all)",
                      key, name));
    for (LoraModule seen : out)
      if (seen == m) throw InputError(fmt::format("{}: '{}' is listed twice", key, name));
    out.push_back(m);
    begin = end + 1;
  }
  return out;
}

std::string modules_label(const std::vector<LoraModule>& modules) {
  std::vector<std::string> names;
  for (LoraModule m : modules) names.push_back(module_name(m));
  return fmt::format("{}", fmt::join(names, ","));
}

std::array<int, 2> module_shape(const ModelConfig& c, LoraModule m) {
  switch (m) {
    case LoraModule::Q:
      return {c.q_dim(), c.hidden};
    case LoraModule::K:
    case LoraModule::V:
      return {c.kv_dim(), c.hidden};
    case LoraModule::O:
      return {c.hidden, c.q_dim()};
    case LoraModule::Gate:
    case LoraModule::Up:
      return {c.mlp, c.hidden};
    case LoraModule::Down:
      return {c.hidden, c.mlp};
  }
  return {0, 0};
}

std::string module_weight_name(int layer, LoraModule m) { return module_path(layer, m) + ".weight"; }

std::vector<LoraModule> LoraAdapter::modules() const {
  std::vector<LoraModule> out;
  for (int i = 0; i < kLoraModules; ++i)
    if (targets[static_cast<size_t>(i)]) out.push_back(static_cast<LoraModule>(i));
  return out;
}

int64_t LoraAdapter::parameters() const {
  int64_t n = 0;
  for (size_t l = 0; l < a.size(); ++l)
    for (int i = 0; i < kLoraModules; ++i) n += static_cast<int64_t>(a[l][i].size() + b[l][i].size());
  return n;
}

void check_adapter_fits(const ModelConfig& c, const LoraAdapter& ad) {
  if (ad.rank < 1) throw InputError(fmt::format("{}: rank {} (at least 1)", ad.name, ad.rank));
  if (static_cast<int>(ad.a.size()) != c.layers || static_cast<int>(ad.b.size()) != c.layers)
    throw InputError(fmt::format("{}: {} layers, the base model has {}", ad.name, ad.a.size(), c.layers));
  for (int l = 0; l < c.layers; ++l)
    for (LoraModule m : ad.modules()) {
      const auto [out, in] = module_shape(c, m);
      const size_t i = static_cast<size_t>(m);
      if (ad.a[static_cast<size_t>(l)][i].size() != static_cast<size_t>(ad.rank) * in ||
          ad.b[static_cast<size_t>(l)][i].size() != static_cast<size_t>(out) * ad.rank)
        throw InputError(fmt::format("{}: layer {} {}: A/B do not fit rank {} and the base shape [{}, {}]", ad.name, l,
                                     module_name(m), ad.rank, out, in));
    }
}

LoraAdapter load_peft_adapter(const ModelConfig& c, const std::string& dir_arg) {
  namespace fs = std::filesystem;
  const std::string dir = data_path(dir_arg);
  const std::string config_path = dir + "/adapter_config.json", weights_path = dir + "/adapter_model.safetensors";
  if (!fs::is_directory(dir))
    throw InputError(fmt::format("{}: not a directory (a PEFT adapter: adapter_config.json + adapter_model.safetensors)", dir));
  nlohmann::json j;
  try {
    j = parse_json_bounded(read_input_file(config_path, uint64_t{1} << 20), config_path);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", config_path, e.what()));
  }
  if (!j.is_object()) throw InputError(config_path + ": not a JSON object");
  auto key_error = [&](const std::string& key, const std::string& what) {
    return InputError(fmt::format("{}: {}: {}", config_path, key, what));
  };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  const std::string peft_type = has("peft_type") && j["peft_type"].is_string() ? j["peft_type"].get<std::string>() : "";
  if (peft_type != "LORA") throw key_error("peft_type", fmt::format("'{}', only LORA adapters are read", peft_type));
  LoraAdapter ad;
  ad.name = dir_arg;
  if (!has("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1 || j["r"].get<int64_t>() > 4096)
    throw key_error("r", "missing or not a rank between 1 and 4096");
  ad.rank = static_cast<int>(j["r"].get<int64_t>());
  if (!has("lora_alpha") || !j["lora_alpha"].is_number()) throw key_error("lora_alpha", "missing or not a number");
  ad.alpha = j["lora_alpha"].get<float>();
  ad.rslora = has("use_rslora") && j["use_rslora"].is_boolean() && j["use_rslora"].get<bool>();
  ad.scaling = ad.rslora ? ad.alpha / std::sqrt(static_cast<float>(ad.rank)) : ad.alpha / static_cast<float>(ad.rank);
  // What changes the arithmetic and is not read: refused by name, never ignored.
  auto refuse_true = [&](const char* key, const char* why) {
    if (has(key) && j[key].is_boolean() && j[key].get<bool>()) throw key_error(key, why);
  };
  refuse_true("fan_in_fan_out", "true (Conv1D-style [in, out] weights) is not supported: Llama's projections are [out, in]");
  refuse_true("use_dora", "DoRA adapters (a magnitude vector per weight) are not supported");
  refuse_true("lora_bias", "adapters with a bias on lora_B are not supported");
  refuse_true("use_qalora", "QA-LoRA adapters (pooled inputs) are not supported");
  if (has("exclude_modules")) throw key_error("exclude_modules", "is set; not supported");
  if (has("alora_invocation_tokens")) throw key_error("alora_invocation_tokens", "activated LoRA (aLoRA) is not supported");
  if (has("bias") && j["bias"] != "none") throw key_error("bias", "only \"none\" is supported");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (has(key) && !(j[key].is_object() && j[key].empty())) throw key_error(key, "per-module ranks or alphas are not supported");
  for (const char* key :
       {"modules_to_save", "layers_to_transform", "layer_replication", "trainable_token_indices", "target_parameters"})
    if (has(key) && !(j[key].is_array() && j[key].empty()) && !(j[key].is_object() && j[key].empty()))
      throw key_error(key, "is set; not supported (only LoRA on q/k/v/o/gate/up/down projections)");
  // target_modules: a list (a module matches an entry equal to its name or to a dotted suffix of
  // its path), "all-linear" (every projection; the LM head is never a target), or a regex that
  // must match the whole path, as PEFT decides.
  if (!has("target_modules")) throw key_error("target_modules", "missing");
  const nlohmann::json& tm = j["target_modules"];
  std::vector<std::string> listed;
  std::optional<ModuleRegex> pattern;
  bool all_linear = false;
  if (tm.is_array()) {
    for (const auto& e : tm) {
      if (!e.is_string()) throw key_error("target_modules", "an entry is not a string");
      listed.push_back(e.get<std::string>());
    }
  } else if (tm.is_string() && tm.get<std::string>() == "all-linear") {
    all_linear = true;
  } else if (tm.is_string()) {
    std::string why;
    pattern.emplace(tm.get<std::string>(), why);
    if (!why.empty())
      throw key_error("target_modules", fmt::format("'{}' is not a regular expression this reader takes: {}",
                                                    tm.get<std::string>().substr(0, 200), why));
  } else {
    throw key_error("target_modules", "neither a list of names nor a string");
  }
  auto matches = [](const std::string& path, const std::string& e) {
    return path == e || (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0 &&
                         path[path.size() - e.size() - 1] == '.');
  };
  auto targeted = [&](int layer, LoraModule m) {
    if (all_linear) return true;
    const std::string path = module_path(layer, m);
    if (pattern) {
      std::string why;
      const bool hit = pattern->full_match(path, why);
      if (!why.empty()) throw key_error("target_modules", fmt::format("matching '{}': {}", path, why));
      return hit;
    }
    for (const auto& e : listed)
      if (matches(path, e)) return true;
    return false;
  };
  for (const auto& e : listed) {  // an entry that names no projection of this model (lm_head, a typo) is refused
    bool any = false;
    for (int l = 0; l < c.layers && !any; ++l)
      for (int i = 0; i < kLoraModules && !any; ++i) any = matches(module_path(l, static_cast<LoraModule>(i)), e);
    if (!any)
      throw key_error("target_modules", fmt::format("'{}' names no projection of this model's layers (q_proj, k_proj, v_proj, "
                                                    "o_proj, gate_proj, up_proj, down_proj)",
                                                    e));
  }
  const SafetensorsFile file(weights_path);
  std::set<std::string> used;
  ad.a.resize(static_cast<size_t>(c.layers));
  ad.b.resize(static_cast<size_t>(c.layers));
  for (int l = 0; l < c.layers; ++l)
    for (int i = 0; i < kLoraModules; ++i) {
      const LoraModule m = static_cast<LoraModule>(i);
      if (!targeted(l, m)) continue;
      ad.targets[static_cast<size_t>(i)] = true;
      const auto [out, in] = module_shape(c, m);
      const std::string base = "base_model.model." + module_path(l, m);
      const std::string an = base + ".lora_A.weight", bn = base + ".lora_B.weight";
      if (!file.contains(an) || !file.contains(bn))
        throw InputError(fmt::format("{}: tensor '{}' is missing (target_modules selects {})", weights_path,
                                     file.contains(an) ? bn : an, module_path(l, m)));
      auto& av = ad.a[static_cast<size_t>(l)][static_cast<size_t>(i)];
      auto& bv = ad.b[static_cast<size_t>(l)][static_cast<size_t>(i)];
      file.entry(an, {ad.rank, in});
      file.entry(bn, {out, ad.rank});
      av.resize(static_cast<size_t>(ad.rank) * in);
      bv.resize(static_cast<size_t>(out) * ad.rank);
      file.read(an, av.data());
      file.read(bn, bv.data());
      used.insert(an);
      used.insert(bn);
    }
  if (used.empty()) throw key_error("target_modules", "selects no projection of this model");
  // The engine applies a targeted module in every layer: a regex selecting a module in some
  // layers only is refused (as layers_to_transform is), not half-applied.
  for (int l = 0; l < c.layers; ++l)
    for (int i = 0; i < kLoraModules; ++i)
      if (ad.targets[static_cast<size_t>(i)] && ad.a[static_cast<size_t>(l)][static_cast<size_t>(i)].empty())
        throw key_error("target_modules",
                        fmt::format("selects {} in some layers only (layer {} has none): not supported", kModuleNames[i], l));
  for (const std::string& name : file.names())
    if (!used.count(name))
      throw InputError(fmt::format("{}: tensor '{}' is not a LoRA A/B of a module target_modules selects in this {}-layer model",
                                   weights_path, name, c.layers));
  check_adapter_fits(c, ad);
  return ad;
}

LoraAdapter random_adapter(const ModelConfig& c, int rank, float alpha, const std::vector<LoraModule>& modules, uint64_t seed,
                           float strength) {
  if (rank < 1) throw InputError(fmt::format("rank: {} (at least 1)", rank));
  LoraAdapter ad;
  ad.name = fmt::format("random:{}", seed);
  ad.rank = rank;
  ad.alpha = alpha;
  ad.scaling = alpha / static_cast<float>(rank);
  ad.a.resize(static_cast<size_t>(c.layers));
  ad.b.resize(static_cast<size_t>(c.layers));
  // Ax has about |x|·sqrt(rank/3)/sqrt(in)·... per element: A uniform(±1/sqrt(in)) gives each of
  // its rank outputs variance |x|²/(3·in); B uniform(±bs) then gives each output variance
  // rank·bs²/3 · |x|²/(3·in). For scaling·that to be strength²·|x|²/in: bs = 3·strength/(scaling·sqrt(rank)).
  const float b_scale = 3.0f * strength / (ad.scaling * std::sqrt(static_cast<float>(rank)));
  for (LoraModule m : modules) {
    ad.targets[static_cast<size_t>(m)] = true;
    const auto [out, in] = module_shape(c, m);
    const float a_scale = 1.0f / std::sqrt(static_cast<float>(in));
    for (int l = 0; l < c.layers; ++l) {
      const uint64_t s = mix64(seed * 1315423911ull + static_cast<uint64_t>(l) * kLoraModules + static_cast<uint64_t>(m));
      auto& av = ad.a[static_cast<size_t>(l)][static_cast<size_t>(m)];
      auto& bv = ad.b[static_cast<size_t>(l)][static_cast<size_t>(m)];
      av.resize(static_cast<size_t>(rank) * in);
      bv.resize(static_cast<size_t>(out) * rank);
      for (size_t i = 0; i < av.size(); ++i) av[i] = round_to(DType::BF16, a_scale * random_uniform(s, i));
      for (size_t i = 0; i < bv.size(); ++i) bv[i] = round_to(DType::BF16, b_scale * random_uniform(mix64(s + 1), i));
    }
  }
  return ad;
}

namespace {

// W + scaling·B·A for the targeted projections; every other tensor read through.
class MergedWeights : public WeightSource {
 public:
  MergedWeights(const WeightSource& base, const ModelConfig& c, const LoraAdapter& a) : base_(base), c_(c), a_(a) {
    for (int l = 0; l < c.layers; ++l)
      for (LoraModule m : a.modules()) where_[module_weight_name(l, m)] = {l, m};
  }
  void read(const TensorSpec& spec, float* dst) const override {
    base_.read(spec, dst);
    auto w = where_.find(spec.name);
    if (w == where_.end()) return;
    const auto [l, m] = w->second;
    const auto [out, in] = module_shape(c_, m);
    const int r = a_.rank;
    const float* A = a_.a[static_cast<size_t>(l)][static_cast<size_t>(m)].data();
    const float* B = a_.b[static_cast<size_t>(l)][static_cast<size_t>(m)].data();
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < in; ++i) {
        double acc = 0;
        for (int k = 0; k < r; ++k)
          acc += static_cast<double>(B[static_cast<size_t>(o) * r + k]) * A[static_cast<size_t>(k) * in + i];
        dst[static_cast<size_t>(o) * in + i] += static_cast<float>(a_.scaling * acc);
      }
  }
  std::string describe() const override { return fmt::format("{} merged with LoRA {}", base_.describe(), a_.name); }
  std::optional<BlockRows> block_rows(const TensorSpec& spec) const override {
    if (where_.count(spec.name)) return std::nullopt;  // W + B·A is no longer the stored blocks
    return base_.block_rows(spec);
  }

 private:
  const WeightSource& base_;
  ModelConfig c_;
  const LoraAdapter& a_;
  std::map<std::string, std::pair<int, LoraModule>> where_;
};

}  // namespace

std::unique_ptr<WeightSource> merged_weights(const WeightSource& base, const ModelConfig& c, const LoraAdapter& a) {
  check_adapter_fits(c, a);
  return std::make_unique<MergedWeights>(base, c, a);
}

}  // namespace ib::model
