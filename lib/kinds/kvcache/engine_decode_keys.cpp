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

namespace {

// Every value of a string key in the sweep, or `fallback` when the sweep does not set it.
std::vector<std::string> strings_of(const std::map<std::string, std::vector<Value>>& values, const char* key,
                                    const char* fallback) {
  std::vector<std::string> out;
  if (auto it = values.find(key); it != values.end())
    for (const Value& v : it->second) out.push_back(std::get<std::string>(v));
  if (out.empty()) out.push_back(fallback);
  return out;
}

}  // namespace

std::optional<KeyProblem> check_engine_decode(const std::map<std::string, std::vector<Value>>& values) {
  if (auto problem = model::check_model_weights(values)) return problem;
  for (const auto& text : strings_of(values, "text", "random")) {
    if (text == "random") continue;
    // The longest decode the sweep asks for must fit in the text.
    int64_t longest = 0;
    for (const char* key : {"prompt", "new_tokens"}) {
      int64_t most = 0;
      if (auto it = values.find(key); it != values.end())
        for (const Value& v : it->second) most = std::max(most, std::get<int64_t>(v));
      longest += most;
    }
    try {
      const std::string body = model::read_prompt_file("text", text);
      for (const auto& tok : strings_of(values, "tokenizer", "auto"))
        for (const auto& w : strings_of(values, "weights", "random")) {
          const auto t = model::prompt_tokenizer(tok, w);
          const size_t n = t->encode(body, true).size();
          if (static_cast<int64_t>(n) < longest)
            throw InputError(fmt::format("text: {} is {} tokens with {}, the decode needs prompt + new_tokens = {}", text, n,
                                         t->name(), longest));
        }
    } catch (const InputError& e) {
      return KeyProblem{{"text"}, e.what()};
    }
  }
  return std::nullopt;
}

}  // namespace ib::kvcache
