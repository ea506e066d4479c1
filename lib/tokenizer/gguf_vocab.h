// A GGUF file's tokenizer (tokenizer.ggml.*) as the tokenizer.json that `tokenizers` would load
// for it: the BPE vocabulary and merges, the special tokens (token type control) as added tokens,
// and the pre-tokenizer that llama.cpp runs for the file's tokenizer.ggml.pre. One pipeline then
// encodes both formats.
#pragma once

#include <cstdint>
#include <string>

namespace ib::gguf {
class File;
}

namespace ib::tokenizer {

struct GgufTokenizer {
  std::string json;  // a tokenizer.json document
  int32_t bos = -1;  // tokenizer.ggml.bos_token_id, -1 when absent
  int32_t eos = -1;  // tokenizer.ggml.eos_token_id, -1 when absent
};

// tokenizer.ggml.model gpt2 (byte-level BPE) with tokenizer.ggml.pre gpt-2 / default, smollm,
// llama-bpe (Llama 3) or qwen2;
// anything else is an InputError naming the file and the key (llama's SentencePiece vocabulary
// with scores, and the other pre-tokenizers, are not read yet).
GgufTokenizer tokenizer_json_from_gguf(const gguf::File& f);

}  // namespace ib::tokenizer
