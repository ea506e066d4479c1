// A GGUF file (llama.cpp's checkpoint format) as a checkpoint of this engine: its metadata read
// into a ModelConfig and its tensors, dequantized, served under the Hugging Face names the engine
// reads. What ggml's converter changed is undone: Llama's q/k rows, permuted for ggml's
// interleaved RoPE, are put back in transformers' rotate-half order.
#pragma once

#include <memory>
#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace ib::model {

// general.architecture llama, mistral or qwen2 (others refused by key), the shapes from
// <arch>.block_count, .embedding_length, .feed_forward_length, .attention.head_count(_kv),
// .rope.freq_base, .attention.layer_norm_rms_epsilon, .context_length, the vocabulary from
// tokenizer.ggml.tokens, tied embeddings when output.weight is absent, and the end-of-sequence id
// tokenizer.ggml.eos_token_id. Throws InputError naming the file and the key.
ModelConfig config_from_gguf(const std::string& path);

// Every tensor of tensor_specs(c) from the file, its shape and type checked; a tensor the engine
// would not read is refused (never silently dropped), as for safetensors.
std::unique_ptr<WeightSource> gguf_weights(const ModelConfig& c, const std::string& path);

// The ggml name of a Hugging Face tensor name ("model.layers.3.self_attn.q_proj.weight" ->
// "blk.3.attn_q.weight"); empty when there is none.
std::string gguf_tensor_name(const std::string& hf_name);

}  // namespace ib::model
