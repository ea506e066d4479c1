// What a completion's tokens say as the OpenAI API writes them: the text without a final EOS or
// stop token and cut at a stop sequence, the tokens' log-probabilities with each token as text,
// and `echo`'s prompt before the text. One per server (its tokenizer and end-of-sequence ids).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/serve_request.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {

// A completion's answer from the tokens received so far: its text, whether a stop sequence ended
// it, and the tokens it took (those up to the stop sequence's end).
struct Answer {
  std::string text;
  bool stop_string = false;
  int64_t tokens = 0;
};

class AnswerText {
 public:
  AnswerText(std::shared_ptr<const tokenizer::Tokenizer> tok, std::vector<int32_t> eos_ids)
      : tok_(std::move(tok)), eos_ids_(std::move(eos_ids)) {}

  // `ended_at_stop_token`: the engine ended the request at one of its stop tokens (not text).
  Answer answer_of(const ApiRequest& r, std::vector<int32_t> tokens, bool ended_at_stop_token) const;
  // Log-probabilities with their tokens as text (each token decoded alone), at most `count`.
  std::vector<TokenLogprobText> logprob_texts(const std::vector<TokenLogprob>& l, int64_t count) const;
  // `echo`: prompt `p`'s text before the choice's, and its tokens' log-probabilities (`scored`, of
  // the tokens after the first; the first null) before the generated ones'. With max_tokens 0 the
  // generated token is dropped and the choice ends at "length".
  void echo_prompt(const ApiRequest& r, const std::vector<std::vector<int32_t>>& prompts, size_t p,
                   const std::vector<TokenLogprob>& scored, ChoiceText& t) const;

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  std::vector<int32_t> eos_ids_;
};

}  // namespace ib::serve
