// A request as the serving scheduler sees it: a prompt's tokens, how many tokens to generate, and
// when it arrived. Output lengths are fixed (vLLM's benchmark runs with ignore_eos), so the work a
// load asks for does not depend on what the model writes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "model/sample.h"
#include "serve/logits_processors.h"
#include "workload/request.h"

namespace ib::serve {

// A constraint on a request's tokens (constrained decoding: a server's response_format): each
// step it chooses the token from the step's logits among those it allows, and is told the token.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // With `left` tokens left (EOS included), the token among the allowed ones, drawn with `u`;
  // -1 when nothing is allowed.
  virtual int32_t choose(const float* logits, int vocab, const model::SamplingParams& p, float u, int left) = 0;
  // The token chosen; true when the output is complete (EOS, or nothing may follow).
  virtual bool accept(int32_t token) = 0;
  // A copy at this one's position that moves apart from it: speculative decoding drafts along it
  // (a draft cut where it leaves the language; a draft model's tokens chosen among those it
  // allows). nullptr where it cannot be copied: drafts are then proposed without it, and verified
  // under the constraint itself all the same.
  virtual std::unique_ptr<TokenConstraint> fork() const { return nullptr; }
};

// A load's request (its id, arrival, prompt, output tokens, class and adapter) and what a server's
// request asks beyond it.
struct Request : workload::Request {
  Request() = default;
  explicit Request(const workload::Request& load) : workload::Request(load) {}

  int32_t eos = -1;                  // a server's request ends at this token (it is the last emitted); -1: never
  std::vector<int32_t> stop_tokens;  // and at any of these (vLLM's stop_token_ids), emitted last too
  LogitsProcessors processors;       // logit_bias and penalties (host sampling)
  int logprobs = -1;                 // >= 0: each token's log-probability and this many most likely alternatives (-1: none)
  // The prompt's tokens' log-probabilities too (OpenAI's `echo` with logprobs, lm-eval's
  // loglikelihood): every prompt row's logits are read, and no prefix is taken from the cache.
  bool prompt_logprobs = false;
  // Its own sampling (a server's request: temperature, top-p, seed), drawn on the host from the
  // step's logits with the request's seed and token index, so that a request's tokens do not
  // depend on what it was batched with. Absent: the scheduler's sampling, on the backend.
  std::optional<model::SamplingParams> sampling;
  std::shared_ptr<TokenConstraint> constraint;  // chooses every token (drawn on the host) when set
};

// A token's log-probability under the model's distribution (the raw logits' log-softmax, as
// vLLM's default), and the most likely tokens with theirs, most likely first.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

// One output token of one request, as a step produced it.
struct Emitted {
  int64_t request = 0;
  int32_t token = 0;
  bool finished = false;                // the request's last token: its sequence was released
  bool stopped = false;                 // finished at its eos token (else at max_tokens)
  std::optional<TokenLogprob> logprob;  // when the request asked for logprobs
  // Speculative decoding: on the last token a row emitted in a step, the tokens it drafted for
  // that step and how many of them were kept.
  int drafted = 0, accepted = 0;
};

}  // namespace ib::serve
