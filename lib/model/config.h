// Llama-family decoder shapes: the published presets and Hugging Face config.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ib::model {

struct ModelConfig {
  std::string name;
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 4;
  int head_dim = 16;       // hidden / heads for every preset
  int mlp = 172;           // SwiGLU intermediate size
  int vocab = 512;
  bool tied_embeddings = false;  // LM head = embedding matrix (Qwen2-0.5B)
  bool qkv_bias = false;         // q/k/v projections have a bias (Qwen2)
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  int sliding_window = 0;        // 0 = full attention (Mistral: 4096)
  int max_positions = 4096;

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
};

// llama2-7b, qwen2-0.5b, qwen2-7b, mistral-7b, tiny (2 layers, CPU tests), tiny-gqa, deep-narrow
// (32 layers of hidden 128: the depth of the 7B models at a size the CPU runs).
std::optional<ModelConfig> preset(const std::string& name);
std::vector<std::string> preset_names();

// Reads DIR/config.json (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM); throws
// InputError naming the file and the key that is missing or unsupported.
ModelConfig config_from_hf(const std::string& dir);

}  // namespace ib::model
