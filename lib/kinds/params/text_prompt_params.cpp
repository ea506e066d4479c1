#include "kinds/params/text_prompt_params.h"

#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace ib::model {

std::vector<KeySpec> text_prompt_keys() {
  return {
      key_spec(
          "prompt_text", ParamType::String,
          "a text prompt, tokenized with `tokenizer` (BOS added as the tokenizer's post-processor does); replaces the random "
          "`prompt` tokens, whose count it sets",
          Value(std::string())),
      key_spec("prompt_file", ParamType::String, "a file whose whole text is the prompt (as prompt_text)", Value(std::string())),
      key_spec("prompts", ParamType::String,
               "a JSONL file, one {\"prompt\": text} or {\"messages\": [{\"role\", \"content\"}, ...]} per line; sequence b of a "
               "batch takes line b mod lines",
               Value(std::string())),
      key_spec("template", ParamType::String,
               "how `prompts` chat messages become text: auto (the checkpoint's own Jinja chat template, the assistant's turn "
               "opened), or a template rendered per message with {role} and {content} replaced, then joined",
               Value(std::string())),
      tokenizer_key_spec(),
  };
}

KeySpec tokenizer_key_spec() {
  return key_spec("tokenizer", ParamType::String,
                  "auto (the checkpoint's tokenizer.json), gpt2, llama2, deepseek-llm, or a tokenizer.json path",
                  Value(std::string("auto")));
}

const std::vector<std::string>& text_prompt_key_names() {
  static const std::vector<std::string> n = {"prompt_text", "prompt_file", "prompts", "template", "tokenizer"};
  return n;
}

std::optional<KeyProblem> check_text_prompts(const SpecKeyValues& values, const KeyValues<std::string>& tokenizers,
                                             const KeyValues<std::string>& weights_values,
                                             const KeyValues<std::string>& models_values) {
  const SpecValues<TextPromptSource> prompt_keys(kinds::text_prompt_params(/*with_tokenizer=*/false), values);
  const KeyValues<std::string> text = prompt_keys.field(&TextPromptSource::text),
                               file = prompt_keys.field(&TextPromptSource::file),
                               jsonl = prompt_keys.field(&TextPromptSource::jsonl);
  const std::vector<std::string>&texts = text.values, &files = file.values, &jsonls = jsonl.values, &toks = tokenizers.values,
        &weights = weights_values.values;
  auto any = [](const std::vector<std::string>& v) {
    for (const auto& s : v)
      if (!s.empty()) return true;
    return false;
  };
  const int sources = any(texts) + any(files) + any(jsonls);
  if (sources == 0) return std::nullopt;
  if (sources > 1)
    return KeyProblem{{text.key, file.key, jsonl.key}, fmt::format("give one of {}, {} and {}", text.key, file.key, jsonl.key)};
  try {
    for (const auto& f : files)
      if (!f.empty()) read_prompt_file(file.key, f);
    const auto templates = prompt_keys.field(&TextPromptSource::chat_template).values;
    for (const auto& f : jsonls)
      if (!f.empty())
        for (const auto& w : weights.empty() ? std::vector<std::string>{""} : weights)
          read_prompt_lines(f, templates.empty() ? std::string() : templates.front(), w);
  } catch (const InputError& e) {
    return KeyProblem{{any(files) ? file.key : jsonl.key}, e.what()};
  }
  const std::vector<std::string>& models = models_values.values;
  try {
    for (const auto& t : toks.empty() ? std::vector<std::string>{"auto"} : toks)
      for (const auto& w : weights.empty() ? std::vector<std::string>{"random"} : weights) {
        auto tok = prompt_tokenizer(t, w);
        // The tokenizer's ids must be ids of the model (a larger model vocabulary, padded, is fine).
        for (const auto& m : models) {
          int vocab = 0;
          if (m == "checkpoint" && w != "random")
            vocab = checkpoint_config(w).vocab;
          else if (auto c = preset(m))
            vocab = c->vocab;
          if (vocab > 0 && tok->vocab_size() > vocab)
            return KeyProblem{{tokenizers.key, models_values.key},
                              fmt::format("tokenizer {} has {} ids, past the {} token ids of model {}", tok->name(),
                                          tok->vocab_size(), vocab, m == "checkpoint" ? w : m)};
        }
      }
  } catch (const InputError& e) {
    return KeyProblem{{tokenizers.key}, e.what()};
  }
  return std::nullopt;
}

}  // namespace ib::model

namespace ib::kinds {

namespace {

ParamSet<model::TextPromptSource> make_text_prompt_params(bool with_tokenizer) {
  using S = model::TextPromptSource;
  // The keys' one declaration (name, doc, default) stays model::text_prompt_keys(), which the
  // kinds not yet typed list too; here each is bound to its field.
  const std::vector<KeySpec> keys = model::text_prompt_keys();
  const std::vector<std::string S::*> fields = {&S::text, &S::file, &S::jsonl, &S::chat_template, &S::tokenizer};
  if (keys.size() != fields.size()) throw std::logic_error("text_prompt_params: a text-prompt key without a field");
  ParamSet<S> s;
  for (size_t i = 0; i < keys.size(); ++i)
    if (with_tokenizer || fields[i] != &S::tokenizer) s.add(fields[i], keys[i]);
  return s;
}

}  // namespace

const ParamSet<model::TextPromptSource>& text_prompt_params(bool with_tokenizer) {
  static const ParamSet<model::TextPromptSource> with = make_text_prompt_params(true);
  static const ParamSet<model::TextPromptSource> without = make_text_prompt_params(false);
  return with_tokenizer ? with : without;
}

}  // namespace ib::kinds
