// Where a model's weights come from: deterministic random values (seeded; the same element on
// the CPU and the GPU) or a Hugging Face safetensors checkpoint. Tensors use the Hugging Face
// Llama/Qwen2 names and [out][in] row-major layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "numerics/packed_gemv.h"

namespace ib::model {

// A matrix as stored in block-quantized form: [out][in / 32] blocks of `type`, the rows in the
// engine's order (what read() dequantizes, row for row).
struct BlockRows {
  BlockType type = BlockType::Q8_0;
  std::vector<uint8_t> bytes;
};

struct TensorSpec {
  std::string name;            // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for matrices, [n] for norms and biases
  int64_t elems() const;
  bool is_norm() const;  // RMSNorm weights (random source: all ones)
};

// Every tensor the model reads, in a fixed order.
std::vector<TensorSpec> tensor_specs(const ModelConfig& c);

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Writes the tensor's values (as stored in bf16, converted to float) into dst[spec.elems()].
  virtual void read(const TensorSpec& spec, float* dst) const = 0;
  virtual std::string describe() const = 0;
  // The matrix's blocks when the source stores it in a block format the CPU engine's decode GEMV
  // streams as stored (GGUF Q8_0/Q4_0/Q4_1); nullopt otherwise, and for anything read() changes.
  virtual std::optional<BlockRows> block_rows(const TensorSpec&) const { return std::nullopt; }
  // Random source only: element i of a tensor is bf16(scale · random_uniform(seed, i)) with the
  // tensor's own seed and scale (norms are exactly 1), so a GPU fill reproduces it without a copy.
  virtual bool is_random() const { return false; }
  virtual uint64_t tensor_seed(const TensorSpec&) const { return 0; }
  virtual float tensor_scale(const TensorSpec&) const { return 0; }
};

// Scales chosen so that activations stay finite through 32 layers and next-token distributions
// are neither flat nor one-hot (tests check both): uniform(±sqrt(3/fan_in)) for projections,
// the residual-branch outputs (o_proj, down_proj) shrunk by 1/sqrt(2·layers), embeddings ±1, and
// the LM head scaled for logits of standard deviation ~3.
std::unique_ptr<WeightSource> random_weights(const ModelConfig& c, uint64_t seed);

// DIR/model.safetensors or DIR/model.safetensors.index.json + shards; bf16, fp16 or fp32
// tensors. A missing or mis-shaped tensor is an InputError naming it and the file.
std::unique_ptr<WeightSource> safetensors_weights(const ModelConfig& c, const std::string& dir);

// The first `layers` layers of a model whose weights `full` holds, with its embeddings, final
// norm and LM head: a self-speculative (early-exit) draft, as in Draft & Verify (Zhang et al.
// 2023) and LayerSkip (Elhoushi et al. 2024). Every tensor is read from `full` under its own name
// (random sources keep the full model's seeds and scales), so the draft's layer i is the target's
// layer i exactly. `full` must outlive the returned source; use it with first_layers_config.
std::unique_ptr<WeightSource> first_layers(const WeightSource& full, int layers);
// The configuration of that draft: `c` with `layers` layers, named "<name>:<layers>".
ModelConfig first_layers_config(const ModelConfig& c, int layers);

// Writes `tensors` (float values stored as bf16) to a single safetensors file (tests, tools).
void write_safetensors(const std::string& path, const std::vector<std::pair<TensorSpec, std::vector<float>>>& tensors);

}  // namespace ib::model
