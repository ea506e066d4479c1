// The text-prompt keys (prompt_text, prompt_file, prompts, template, tokenizer) as a group of typed
// parameters, for the kinds whose engine runs take a prompt: add_group(&Keys::prompts, text_prompt_params()).
#pragma once

#include "core/params.h"
#include "model/text_prompt.h"

namespace ib::kinds {

const ParamSet<model::TextPromptSource>& text_prompt_params();

}  // namespace ib::kinds
