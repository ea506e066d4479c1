// Tokenizer vocabularies as the bytes each token stands for: Hugging Face tokenizer.json
// (byte-level BPE, and SentencePiece with `▁` and <0xNN> byte fallback), gzip-compressed or not.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data_dir.h"

namespace ib::constrain {

struct Vocabulary {
  std::string name;
  std::vector<std::string> token_bytes;  // what each id decodes to ("" for special tokens)
  std::vector<uint8_t> special;          // added/control tokens: masks never allow them, but EOS
  int32_t eos = -1;                      // end of sequence: allowed where the constraint accepts
  size_t max_token_bytes = 0;
  int32_t size() const { return static_cast<int32_t>(token_bytes.size()); }
};

// "gpt2" (compiled in), "llama2", "deepseek-llm" (from the data folder), or a path to a
// tokenizer.json or tokenizer.json.gz, a GGUF checkpoint, or a Hugging Face checkpoint directory
// (its tokenizer.json). A checkpoint's own end of sequence (the GGUF's, or config.json /
// generation_config.json's first eos_token_id) is `eos`; otherwise an added token named like
// one. Throws std::runtime_error naming the file and problem.
// Named vocabularies are loaded once per process and shared.
std::shared_ptr<const Vocabulary> load_vocabulary(const std::string& name_or_path);
// The bytes the vocabulary has a single-byte (non-special) token for: the bytes a token budget can
// spell one token each (SmolLM2's vocabulary has none for most control bytes).
std::array<bool, 256> single_byte_tokens(const Vocabulary& vocab);

Vocabulary parse_tokenizer_json(const std::string& text, const std::string& name);

// Where named vocabularies live: $INFER_BENCH_DATA/tokenizers, else the source tree's data/.
inline std::string data_directory() { return ib::data_directory(); }

}  // namespace ib::constrain
