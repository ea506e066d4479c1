// Text prompts for the kinds that run the engine: `prompt_text`, `prompt_file` or `prompts`
// (JSONL of {"prompt": ...} or of chat {"messages": [...]} rendered with `template`), tokenized
// with the checkpoint's own tokenizer.json (`tokenizer: auto`) or a named one; generated ids
// decoded back to text for the results.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ib::model {

struct TextPrompts {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::vector<std::string> texts;            // as rendered (chat messages through the template)
  std::vector<std::vector<int32_t>> tokens;  // encoded with the tokenizer's special tokens (BOS), except
                                             // chats through a Jinja template: it writes them itself
  // Prompt b of a batch of n: line b mod lines.
  const std::vector<int32_t>& for_sequence(size_t b) const { return tokens[b % tokens.size()]; }
};

// Where a text prompt comes from (the keys prompt_text, prompt_file, prompts, template, tokenizer):
// at most one of text, file and jsonl; none means random prompt tokens.
struct TextPromptSource {
  std::string text, file, jsonl;
  std::string chat_template;       // `template`: how jsonl's chat messages become text
  std::string tokenizer = "auto";  // auto: the checkpoint's tokenizer.json
};
// The source's prompts, or nullopt when it names none (random prompt tokens then). `weights` is the
// model's weights key ("random" or a checkpoint directory: `tokenizer: auto` reads
// DIR/tokenizer.json). Throws InputError naming the key when a prompt cannot be read or tokenized,
// or when a token id is not below `model_vocab`.
std::optional<TextPrompts> text_prompts(const TextPromptSource& source, const std::string& weights, int model_vocab);

// The pieces, for kinds with prompts of their own shape (prefix: a system prompt and queries).
// A text file (at most 16 MiB) named in errors by `key`; the JSONL lines of `prompts` (chat
// messages rendered with `tmpl`); `name` ("auto": weights' tokenizer.json) loaded.
std::string read_prompt_file(const std::string& key, const std::string& path);
// One chat message through a template: {role} and {content} replaced, the rest as written.
std::string render_chat_message(const std::string& tmpl, const std::string& role, const std::string& content);
// `tmpl` "auto": the checkpoint's own Jinja chat template (`weights`: a GGUF file or a directory
// with tokenizer_config.json), the assistant's turn opened, as apply_chat_template does.
std::vector<std::string> read_prompt_lines(const std::string& path, const std::string& tmpl, const std::string& weights = "");
std::shared_ptr<const tokenizer::Tokenizer> prompt_tokenizer(const std::string& name, const std::string& weights);

// "'Once upon a time' → ' there was a'": a short, one-line view of a prompt and its continuation
// for a row's note (each side cut to `width` characters, newlines shown as ⏎).
std::string short_text(const std::string& text, size_t width = 40);

}  // namespace ib::model
