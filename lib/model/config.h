// Llama-family decoder shapes: the published presets and Hugging Face config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ib::model {

// RoPE frequency scaling as transformers' modeling_rope_utils computes it (rope_type in
// `rope_parameters` of transformers 5, `rope_scaling` of 4.x). "default" leaves theta^(-2i/D).
struct RopeScaling {
  std::string type = "default";              // default | linear | llama3 | yarn
  double factor = 1.0;                       // linear, llama3, yarn
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  int original_max_positions = 0;            // llama3, yarn: the pretrained context
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn: the correction range in rotations
  bool truncate = true;                      // yarn: the correction range rounded to whole dimensions
  double attention_factor = 1.0;             // yarn: cos and sin are multiplied by it (resolved at load)
};

struct ModelConfig {
  std::string name;
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 4;
  int head_dim = 16;  // hidden / heads for every preset
  int mlp = 172;      // SwiGLU intermediate size
  int vocab = 512;
  bool tied_embeddings = false;  // LM head = embedding matrix (Qwen2-0.5B)
  bool qkv_bias = false;         // q/k/v projections have a bias (Qwen2; Llama attention_bias)
  bool o_bias = false;           // o_proj has a bias (Llama attention_bias)
  bool mlp_bias = false;         // gate/up/down have biases (Llama mlp_bias)
  bool qk_norm = false;          // per-head RMSNorm of q and k before RoPE (Qwen3 q_norm, k_norm)
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  float rms_eps = 1e-5f;
  int sliding_window = 0;          // 0 = full attention (Mistral: 4096); the window of every layer
                                   // unless layer_windows says otherwise
  std::vector<int> layer_windows;  // per layer (Qwen2 layer_types / max_window_layers); empty: sliding_window
  int max_positions = 4096;
  std::string model_type;  // a checkpoint's config.json model_type ("" for presets)
  // The checkpoint's end-of-sequence ids (generation_config.json over config.json's eos_token_id,
  // a list where given; GGUF's tokenizer.ggml.eos_token_id and eot_token_id): where generation
  // stops. Empty for presets and checkpoints that name none: the tokenizer's own guess then.
  std::vector<int32_t> eos_ids;
  std::vector<std::string> load_notes;  // what the loader decided that a user should see (tied lm_head dropped, ...)

  // The window of layer l: 0 = full attention.
  int window(int layer) const { return layer_windows.empty() ? sliding_window : layer_windows[static_cast<size_t>(layer)]; }
  bool any_window() const;
  // RoPE inverse frequencies [head_dim / 2] (theta and scaling applied) and the factor on cos/sin.
  std::vector<double> rope_inv_freq() const;
  double rope_attention_factor() const { return rope_scaling.type == "yarn" ? rope_scaling.attention_factor : 1.0; }

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  // Parameters, embeddings and LM head included (counted once when tied).
  int64_t parameters() const;
  // K and V of one token over every layer.
  int64_t kv_elems_per_token() const { return int64_t{2} * layers * kv_dim(); }
  // Matmul FLOPs of one token through the model (2 per weight, LM head included), plus
  // attention over `context` earlier tokens (4·head_dim per (query, key) pair per head per layer).
  double flops_per_token(int64_t context) const;
  std::string describe() const;  // "32 layers, hidden 4096, 32 heads (32 kv) × 128, MLP 11008, vocab 32000"
  // What ran, for a row's notes: rope theta and scaling, windows per layer, biases, norms.
  std::string describe_details() const;
};

// llama2-7b, llama3-8b, qwen2-0.5b, qwen2-7b, mistral-7b, tiny (2 layers, CPU tests), tiny-gqa, deep-narrow
// (32 layers of hidden 128: the depth of the 7B models at a size the CPU runs).
std::optional<ModelConfig> preset(const std::string& name);
std::vector<std::string> preset_names();

// Reads DIR/config.json exactly as transformers does (LlamaForCausalLM, Qwen2ForCausalLM,
// MistralForCausalLM, Qwen3ForCausalLM; the 4.x and 5.x layouts): rope_theta and RoPE scaling
// from rope_parameters or rope_scaling, Llama's attention_bias (q/k/v and o_proj) and mlp_bias,
// Qwen2/Qwen3 per-layer windows (layer_types, max_window_layers, use_sliding_window). Throws
// InputError naming the file and the key that is missing, unsupported or inconsistent (an
// architecture that is not the model_type, a rope type, a quantization or MoE config).
ModelConfig config_from_hf(const std::string& dir);
// The same from config.json's text; `path` names it in errors.
ModelConfig config_from_hf_json(const std::string& text, const std::string& path);

}  // namespace ib::model
