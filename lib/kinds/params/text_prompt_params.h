// The text-prompt keys (prompt_text, prompt_file, prompts, template, tokenizer) as a group of typed
// parameters, for the kinds whose engine runs take a prompt: add_group(&Keys::prompts, text_prompt_params()).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/params.h"
#include "core/registry.h"
#include "core/value.h"
#include "model/text_prompt.h"

namespace ib::model {

// The keys, to add to a kind's keys and to the variants that take prompt tokens.
std::vector<KeySpec> text_prompt_keys();
const std::vector<std::string>& text_prompt_key_names();
// The `tokenizer` key alone (auto: the checkpoint's tokenizer.json), for kinds with keys of their own.
KeySpec tokenizer_key_spec();  // {"prompt_text", "prompt_file", "prompts", "template", "tokenizer"}
// Spec-time check of those keys over every value (KindInfo::check's `values`): files exist and
// parse, the tokenizer loads and its ids fit the model's vocabulary, one prompt source at most.
// The kind's own keys of the tokenizer (the group's, or one of the kind's), the model (a preset or
// checkpoint) and its weights, as its SpecValues reads them.
std::optional<KeyProblem> check_text_prompts(const SpecKeyValues& values, const KeyValues<std::string>& tokenizers,
                                             const KeyValues<std::string>& weights, const KeyValues<std::string>& models);

}  // namespace ib::model

namespace ib::kinds {

// `with_tokenizer` false: the prompt sources only, for a kind whose tokenizer is a key of its own
// (constrain-generate's `vocab`, set into TextPromptSource::tokenizer by the kind).
const ParamSet<model::TextPromptSource>& text_prompt_params(bool with_tokenizer = true);

}  // namespace ib::kinds
