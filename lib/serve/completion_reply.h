// One completion request in flight: its choices (n of each prompt, each its own request of the
// engine, batched with the others) as the engine loop answers them, read into the OpenAI
// response whole, or into a stream's events as their tokens arrive. Shared by the handler and a
// stream's provider, which outlives the handler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "serve/answer_text.h"
#include "serve/engine_loop.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/schema_constraint.h"

namespace ib::serve {

class CompletionReply {
 public:
  // What the reply needs of its server: the engine loop, how tokens read as text, the model's
  // name, the prefix of its tool calls' ids, and the error for a request the engine ended
  // without its answer ("cancelled" at shutdown, or the engine's failure).
  struct Server {
    EngineLoop& loop;
    const AnswerText& text;
    std::string model_name;
    std::string call_id_prefix;
    std::function<ApiError(const std::string& why)> engine_error;
  };
  CompletionReply(Server server, ApiRequest r, std::vector<std::vector<int32_t>> prompts, std::string id, int64_t created);

  // Submits prompt p's choice i as `q` with that prompt and seed + i (a schema's own document of
  // the one compiled). An engine's refusal (InputError) cancels those submitted and is rethrown.
  void submit(const Request& q, const std::shared_ptr<SchemaConstraint>& schema);
  std::vector<int64_t> ids() const;  // the engine's ids of the choices submitted
  void cancel_all();                 // every choice's sequence goes back to the engine

  // The usage so far: the answers' tokens, and what speculation drafted and kept for them.
  Usage usage() const;

  // Not streamed: every choice waited for (polling `client_gone` between tokens) and the response
  // body; ClientGone when nobody would read it (the choices are cancelled then); an ApiError
  // when the engine failed one.
  struct ClientGone {};
  std::variant<std::string, ApiError, ClientGone> whole(const std::function<bool()>& client_gone);

  // Streamed: the events of what arrived since the last call, waiting up to 0.25 s for the first
  // choice's next token so that a closed connection is noticed between tokens; then the usage and
  // [DONE] once every choice has ended (finished() is true after those).
  std::string next_events();
  bool finished() const { return finished_; }

 private:
  struct Choice {
    int64_t id = 0;
    std::shared_ptr<RequestStream> stream;
    std::vector<int32_t> tokens;
    size_t sent = 0;         // characters of the text sent
    size_t tokens_sent = 0;  // tokens a chunk has been sent for
    bool first = true, ended = false;
    Answer answer;
    size_t logprobs_sent = 0, logprobs_offset = 0;  // tokens whose log-probabilities went out, their bytes
  };
  std::string call_ids(size_t choice) const;
  std::string choice_events(size_t i, bool wait, bool& ended);

  Server s_;
  const ApiRequest r_;
  const std::vector<std::vector<int32_t>> prompts_;
  const std::string id_;
  const int64_t created_;
  int64_t prompt_tokens_ = 0;
  std::vector<Choice> choices_;
  bool finished_ = false;
};

}  // namespace ib::serve
