#include "kinds/kvcache/engine_decode_keys.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/errors.h"
#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"
#include "model/model_choice.h"
#include "model/text_prompt.h"

namespace ib::kvcache {

ParamSet<EngineDecodeOptions> engine_decode_params(int default_prompt, int default_new_tokens) {
  using O = EngineDecodeOptions;
  return ParamSet<EngineDecodeOptions>()
      .add(&O::model, model::model_key("tiny"))
      .add(&O::weights, model::weights_key())
      .add(&O::prompt, key_spec("prompt", ParamType::Int, "random prompt tokens decoded before the measured steps",
                                Value(int64_t{default_prompt}), 1.0))
      .add(&O::new_tokens,
           key_spec("new_tokens", ParamType::Int, "measured steps: tokens the reference generates greedily (fed to both)",
                    Value(int64_t{default_new_tokens}), 1.0))
      .add(&O::text, key_spec("text", ParamType::String,
                              "random: a random prompt and the reference's greedy continuation; or a text file whose first "
                              "prompt + new_tokens tokens (BOS and the text, through `tokenizer`) are decoded instead, the "
                              "measured ones scored (perplexity)",
                              Value(std::string("random"))))
      .add(&O::tokenizer, model::tokenizer_key_spec());
}

std::optional<KeyProblem> check_engine_decode(const SpecKeyValues& values) {
  using O = EngineDecodeOptions;
  const ParamSet<O> set = engine_decode_params(1, 1);  // the defaults do not matter: `values` holds every key
  const SpecValues<O> v(set, values);
  const auto weights = v.field(&O::weights), texts = v.field(&O::text);
  if (auto problem = model::check_model_weights(v.field(&O::model), weights)) return problem;
  // The longest decode the sweep asks for must fit in the text.
  const auto prompts = v.field(&O::prompt).values, new_tokens = v.field(&O::new_tokens).values;
  const int64_t longest = (prompts.empty() ? 0 : *std::max_element(prompts.begin(), prompts.end())) +
                          (new_tokens.empty() ? 0 : *std::max_element(new_tokens.begin(), new_tokens.end()));
  for (const auto& text : texts.values) {
    if (text == "random") continue;
    try {
      const std::string body = model::read_prompt_file(texts.key, text);
      for (const auto& tok : v.field(&O::tokenizer).values)
        for (const auto& w : weights.values) {
          const auto t = model::prompt_tokenizer(tok, w);
          const size_t n = t->encode(body, true).size();
          if (static_cast<int64_t>(n) < longest)
            throw InputError(fmt::format("{}: {} is {} tokens with {}, the decode needs prompt + new_tokens = {}", texts.key,
                                         text, n, t->name(), longest));
        }
    } catch (const InputError& e) {
      return KeyProblem{{texts.key}, e.what()};
    }
  }
  return std::nullopt;
}

}  // namespace ib::kvcache
