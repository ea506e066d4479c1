// The text-prompt keys (prompt_text, prompt_file, prompts, template, tokenizer) as a group of typed
// parameters, for the kinds whose engine runs take a prompt: add_group(&Keys::prompts, text_prompt_params()).
#pragma once

#include "core/params.h"
#include "model/text_prompt.h"

namespace ib::kinds {

// `with_tokenizer` false: the prompt sources only, for a kind whose tokenizer is a key of its own
// (constrain-generate's `vocab`, set into TextPromptSource::tokenizer by the kind).
const ParamSet<model::TextPromptSource>& text_prompt_params(bool with_tokenizer = true);

}  // namespace ib::kinds
