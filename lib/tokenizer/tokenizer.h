// Hugging Face tokenizer.json: encode and decode exactly as the `tokenizers` library does, for BPE
// models (byte-level like GPT-2 and DeepSeek, SentencePiece-style like Llama 2).
//
// The pipeline is the library's: added tokens are split out first, the rest goes through the
// normalizer, the pre-tokenizer and the BPE model, and the post-processor adds the special tokens.
// What is supported and what is refused is listed in tokenizer.cpp; everything refused is an
// ib::InputError naming the file and the JSON pointer of the offending value.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ib::tokenizer {

namespace detail {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // "gpt2", "llama2", "deepseek-llm" (data/tokenizers/<name>.tokenizer.json.gz under
  // ib::constrain::data_directory(); gpt2 falls back to the copy compiled into the binary), a path
  // to tokenizer.json or tokenizer.json.gz, or a checkpoint directory holding tokenizer.json.
  // Loaded once per process per resolved path and shared; safe to use from several threads.
  // Throws ib::InputError naming the file and the JSON pointer / key of the problem.
  static std::shared_ptr<const Tokenizer> load(const std::string& name_or_path);
  static Tokenizer from_json(const std::string& json_text, const std::string& source_name);

  // Text that is not valid UTF-8 is read as Python's bytes.decode(errors="replace") would.
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = true) const;
  // Ids that are not in the vocabulary are skipped (as `tokenizers` does); bytes that do not form
  // valid UTF-8 become U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const;  // max id + 1 over model vocab and added tokens
  std::optional<int32_t> token_to_id(const std::string& token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  int32_t bos_id() const;  // -1 when none (from the post-processor / special added tokens)
  int32_t eos_id() const;  // -1 when none
  const std::string& name() const;

  // Added tokens with `special: true` (what decode(skip_special_tokens=true) drops).
  bool is_special(int32_t id) const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  explicit Tokenizer(std::unique_ptr<detail::TokenizerImpl> impl);
  std::unique_ptr<detail::TokenizerImpl> impl_;
};

}  // namespace ib::tokenizer
