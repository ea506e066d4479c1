#include "model/gguf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "core/data_dir.h"
#include "core/errors.h"
#include "core/gguf_file.h"

namespace ib::model {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The architectures whose GGUF tensors are this engine's Llama-family layers. Llama and Mistral
// went through ggml's converter with q/k permuted for its interleaved ("normal") RoPE; Qwen2
// keeps transformers' rotate-half ("neox") order.
struct GgufArchitecture {
  const char* name;
  bool permuted_qk;
};
constexpr GgufArchitecture kGgufArchitectures[] = {{"llama", true}, {"mistral", true}, {"qwen2", false}};

const GgufArchitecture& architecture_of(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  for (const auto& a : kGgufArchitectures)
    if (arch == a.name) return a;
  throw InputError(fmt::format("{}: key 'general.architecture': '{}' is not supported (llama, mistral, qwen2)", f.path(), arch));
}

int positive_int(const gguf::File& f, const std::string& key, int64_t limit) {
  const int64_t v = f.get_int(key);
  if (v < 1 || v > limit) throw InputError(fmt::format("{}: key '{}': {} is not between 1 and {}", f.path(), key, v, limit));
  return static_cast<int>(v);
}

// Hugging Face layer-tensor suffix -> ggml's.
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.bias", "ffn_down.bias"},
};

}  // namespace

std::string gguf_tensor_name(const std::string& hf) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  if (!starts_with(hf, prefix)) return "";
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos) return "";
  const std::string layer = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [ours, theirs] : kLayerNames)
    if (rest == ours) return "blk." + layer + "." + theirs;
  return "";
}

ModelConfig config_from_gguf(const std::string& given_path) {
  const std::string path = data_path(given_path);
  const auto file = gguf::open_file(path);
  const gguf::File& f = *file;
  const GgufArchitecture& arch = architecture_of(f);
  const std::string a = arch.name;
  for (const char* refused : {".expert_count", ".ssm.conv_kernel", ".attention.q_lora_rank"})
    if (f.find(a + refused))
      throw InputError(
          fmt::format("{}: key '{}{}': not supported (mixture-of-experts and other non-Llama blocks)", path, a, refused));
  if (f.tensor("rope_freqs.weight"))
    throw InputError(fmt::format("{}: tensor 'rope_freqs.weight' (Llama 3 RoPE frequency factors) is not supported", path));

  ModelConfig c;
  c.model_type = a;
  c.name = given_path;
  c.layers = positive_int(f, a + ".block_count", 4096);
  c.hidden = positive_int(f, a + ".embedding_length", 1 << 20);
  c.heads = positive_int(f, a + ".attention.head_count", 1 << 14);
  c.kv_heads = f.find(a + ".attention.head_count_kv") ? positive_int(f, a + ".attention.head_count_kv", c.heads) : c.heads;
  if (c.heads % c.kv_heads != 0)
    throw InputError(
        fmt::format("{}: key '{}.attention.head_count_kv': {} does not divide the head count {}", path, a, c.kv_heads, c.heads));
  c.head_dim = f.find(a + ".attention.key_length") ? positive_int(f, a + ".attention.key_length", 1 << 14) : c.hidden / c.heads;
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    throw InputError(
        fmt::format("{}: key '{}.embedding_length': a head dimension of {} (RoPE needs an even one)", path, a, c.head_dim));
  if (auto v = f.opt_int(a + ".attention.value_length"); v && *v != c.head_dim)
    throw InputError(
        fmt::format("{}: key '{}.attention.value_length': {} differs from the key length {}", path, a, *v, c.head_dim));
  if (auto rot = f.opt_int(a + ".rope.dimension_count"); rot && *rot != c.head_dim)
    throw InputError(
        fmt::format("{}: key '{}.rope.dimension_count': {} (partial rotary embeddings are not supported; head "
                    "dimension {})",
                    path, a, *rot, c.head_dim));
  c.mlp = positive_int(f, a + ".feed_forward_length", 1 << 20);
  const gguf::TensorInfo* embd = f.tensor("token_embd.weight");
  if (!embd || embd->dims.size() != 2)
    throw InputError(fmt::format("{}: tensor 'token_embd.weight' is missing or not a matrix", path));
  c.vocab = static_cast<int>(std::min<int64_t>(embd->dims[1], 1 << 24));
  if (auto v = f.opt_int(a + ".vocab_size"); v && *v != c.vocab)
    throw InputError(fmt::format("{}: key '{}.vocab_size': {} differs from token_embd.weight's {} rows", path, a, *v, c.vocab));
  if (int64_t{c.heads} * c.head_dim > (int64_t{1} << 20) ||
      int64_t{std::max({c.hidden, c.mlp, c.vocab, c.heads * c.head_dim})} * std::max(c.hidden, c.mlp) > (int64_t{1} << 31) - 1)
    throw InputError(fmt::format("{}: the shapes are past what the engine indexes (a matrix of more than 2^31 elements)", path));
  c.tied_embeddings = f.tensor("output.weight") == nullptr;
  c.qkv_bias = f.tensor("blk.0.attn_q.bias") != nullptr;
  c.o_bias = f.tensor("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = f.tensor("blk.0.ffn_gate.bias") != nullptr;
  if (a == "qwen2" && !c.qkv_bias)
    throw InputError(fmt::format("{}: tensor 'blk.0.attn_q.bias' is missing (qwen2 has q/k/v biases)", path));
  c.qk_norm = f.tensor("blk.0.attn_q_norm.weight") != nullptr;
  c.rope_theta = static_cast<float>(f.opt_float(a + ".rope.freq_base").value_or(10000.0));
  c.rms_eps = static_cast<float>(f.get_float(a + ".attention.layer_norm_rms_epsilon"));
  c.max_positions = f.find(a + ".context_length") ? positive_int(f, a + ".context_length", 1 << 24) : 4096;
  if (auto type = f.opt_string(a + ".rope.scaling.type"); type && *type != "none") {
    if (*type != "linear")
      throw InputError(fmt::format("{}: key '{}.rope.scaling.type': '{}' is not supported (none, linear)", path, a, *type));
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = f.get_float(a + ".rope.scaling.factor");
    if (!(c.rope_scaling.factor >= 1.0))
      throw InputError(fmt::format("{}: key '{}.rope.scaling.factor': {} is not >= 1", path, a, c.rope_scaling.factor));
  }
  if (auto w = f.opt_int(a + ".attention.sliding_window"); w && *w > 0) c.sliding_window = static_cast<int>(*w);
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (auto id = f.opt_int(key)) {
      if (*id < 0 || *id >= c.vocab)
        throw InputError(fmt::format("{}: key '{}': id {} is not in the vocabulary", path, key, *id));
      if (std::find(c.eos_ids.begin(), c.eos_ids.end(), *id) == c.eos_ids.end()) c.eos_ids.push_back(static_cast<int32_t>(*id));
    }
  c.load_notes.push_back(fmt::format("GGUF v{} ({})", f.version(), f.opt_string("general.name").value_or(c.name)));
  return c;
}

namespace {

class GgufWeights : public WeightSource {
 public:
  GgufWeights(const ModelConfig& c, const std::string& path)
      : owner_(gguf::open_file(path)), file_(*owner_), permuted_qk_(architecture_of(file_).permuted_qk), c_(c) {
    std::set<std::string> used;
    for (const TensorSpec& spec : tensor_specs(c)) {
      const gguf::TensorInfo& t = info(spec);
      used.insert(t.name);
      types_.insert(*gguf::tensor_type_name(static_cast<uint32_t>(t.type)));
    }
    // ggml's converter writes nothing the engine would not read; anything else is another model.
    std::vector<std::string> unused;
    for (const gguf::TensorInfo& t : file_.tensors())
      if (!used.count(t.name)) unused.push_back(t.name);
    if (!unused.empty())
      throw InputError(fmt::format("{}: {} tensor{} the engine does not read (first: '{}')", file_.path(), unused.size(),
                                   unused.size() == 1 ? "" : "s", unused.front()));
  }

  void read(const TensorSpec& spec, float* dst) const override {
    const gguf::TensorInfo& t = info(spec);
    file_.read(t, dst);
    const int64_t cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
    if (const int heads = permuted_heads(spec)) unpermute_rows(reinterpret_cast<uint8_t*>(dst), spec.shape[0], cols * 4, heads);
  }

  std::optional<BlockRows> block_rows(const TensorSpec& spec) const override {
    const gguf::TensorInfo& t = info(spec);
    if (spec.shape.size() != 2) return std::nullopt;
    BlockRows b;
    switch (t.type) {
      case gguf::TensorType::Q8_0:
        b.type = BlockType::Q8_0;
        break;
      case gguf::TensorType::Q4_0:
        b.type = BlockType::Q4_0;
        break;
      case gguf::TensorType::Q4_1:
        b.type = BlockType::Q4_1;
        break;
      default:
        return std::nullopt;
    }
    b.bytes = file_.raw(t);
    if (const int heads = permuted_heads(spec))
      unpermute_rows(b.bytes.data(), spec.shape[0], spec.shape[1] / 32 * block_bytes(b.type), heads);
    return b;
  }

  std::string describe() const override { return fmt::format("GGUF checkpoint {} ({})", file_.path(), fmt::join(types_, ", ")); }

 private:
  const gguf::TensorInfo& info(const TensorSpec& spec) const {
    const std::string name = gguf_tensor_name(spec.name);
    const gguf::TensorInfo* t = name.empty() ? nullptr : file_.tensor(name);
    if (!t) throw InputError(fmt::format("{}: tensor '{}' (the engine's {}) is missing", file_.path(), name, spec.name));
    // ggml lists dimensions innermost first: a [out][in] matrix is {in, out}.
    std::vector<int64_t> want(spec.shape.rbegin(), spec.shape.rend());
    if (t->dims != want)
      throw InputError(fmt::format("{}: tensor '{}': shape [{}] where the config needs [{}]", file_.path(), name,
                                   fmt::join(t->dims, ", "), fmt::join(want, ", ")));
    return *t;
  }

  // The heads of a Q or K projection whose rows ggml's converter permuted, 0 for other tensors.
  int permuted_heads(const TensorSpec& spec) const {
    if (!permuted_qk_) return 0;
    if (spec.name.find("self_attn.q_proj.") != std::string::npos) return c_.heads;
    if (spec.name.find("self_attn.k_proj.") != std::string::npos) return c_.kv_heads;
    return 0;
  }

  // ggml's converter reorders each head's rows from [2][half] (rotate-half pairs i and i + half)
  // to [half][2] (adjacent pairs): row h·D + 2i + j of the file is row h·D + j·half + i of the
  // checkpoint transformers loads. Undone here, for weights and biases, dequantized or as
  // blocks alike (a row is `row_bytes` bytes).
  static void unpermute_rows(uint8_t* dst, int64_t rows, int64_t row_bytes, int heads) {
    const int64_t d = rows / heads, half = d / 2;
    std::vector<uint8_t> head(static_cast<size_t>(d * row_bytes));
    for (int64_t h = 0; h < heads; ++h) {
      uint8_t* base = dst + h * d * row_bytes;
      std::copy(base, base + d * row_bytes, head.begin());
      for (int64_t i = 0; i < half; ++i)
        for (int64_t j = 0; j < 2; ++j)
          std::copy_n(head.begin() + (2 * i + j) * row_bytes, row_bytes, base + (j * half + i) * row_bytes);
    }
  }

  std::shared_ptr<const gguf::File> owner_;  // shared with the config's and tokenizer's reads
  const gguf::File& file_;
  bool permuted_qk_;
  ModelConfig c_;
  std::set<std::string> types_;
};

}  // namespace

std::unique_ptr<WeightSource> gguf_weights(const ModelConfig& c, const std::string& path) {
  return std::make_unique<GgufWeights>(c, data_path(path));
}

}  // namespace ib::model
