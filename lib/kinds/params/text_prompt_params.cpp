#include "kinds/params/text_prompt_params.h"

#include <stdexcept>

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
