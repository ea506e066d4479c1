// The answers of the OpenAI API as `infer-bench serve` writes them: response objects, stream
// chunks (server-sent events), errors, the model list and vLLM's /tokenize answers. No I/O here:
// http_server.cpp carries them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "serve/openai_request.h"
#include "serve/tool_calls.h"

namespace ib::serve {

// The error object as OpenAI writes it: {"error": {"message", "type", "param", "code"}}.
std::string error_json(const ApiError& e);
// JSON text of a response: a string that is not UTF-8 (a path's bytes echoed in an error, a
// decoded text cut inside a character) has its bad bytes replaced by U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  // Speculative decoding: the request's drafted tokens and those kept, written as usage's
  // "spec_decode" {"num_draft_tokens", "num_accepted_tokens"} (vLLM's metric names) when any
  // were drafted.
  int64_t draft_tokens = 0, accepted_tokens = 0;
};

// A whole (non-streamed) response.
// A generated token as text with its log-probability, and the most likely alternatives.
struct TokenLogprobText {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
  bool known = true;  // false: a prompt's first token (echo), written with null log-probabilities
};
// A choice's text and finish reason ("stop", "length"), and its tokens' log-probabilities when
// the request asked for them.
struct ChoiceText {
  std::string text, finish_reason;
  std::vector<TokenLogprobText> logprobs;
  std::vector<ToolCall> tool_calls;  // chat: the message's tool_calls; `text` is its content then
  bool content_null = false;         // chat: `content: null` (a message of tool calls only)
};
// The `logprobs` object of a choice or chunk as OpenAI writes it: chat {"content": [{"token",
// "logprob", "bytes", "top_logprobs"}]}; completions {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"} (offsets from `offset`, the bytes of the choice's text before these tokens).
nlohmann::json logprobs_json(const ApiRequest& r, const std::vector<TokenLogprobText>& tokens, size_t offset = 0);
std::string completion_json(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                            const std::vector<ChoiceText>& choices, const Usage& u);
std::string completion_json(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                            const std::string& text, const std::string& finish_reason, const Usage& u);
// One chunk of a stream, as an SSE event "data: {...}\n\n"; `finish_reason` "" until the last.
// For chat, `first` carries the assistant role. With continuous_usage, `so_far` is its usage.
std::string stream_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                         const std::string& text, const std::string& finish_reason, bool first, const Usage& so_far = {},
                         int index = 0, const std::vector<TokenLogprobText>* logprobs = nullptr, size_t offset = 0);
// A chat chunk whose delta carries tool calls (no content): a call's first delta has its id, type
// and name, later ones pieces of its arguments (id "" leaves those out), as OpenAI streams them.
// `first` carries the role and `content: null`.
struct ToolCallDelta {
  int index = 0;  // the call's index in the message
  std::string id, name, arguments;
};
std::string tool_calls_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                             const std::vector<ToolCallDelta>& calls, bool first, const Usage& so_far, int index,
                             const std::vector<TokenLogprobText>* logprobs = nullptr, size_t offset = 0);
// The usage chunk of stream_options.include_usage (no choices), as an SSE event.
std::string usage_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model, const Usage& u);

// GET /v1/models: the model this server has, then its LoRA adapters (with the model as parent).
std::string models_json(const std::string& model, int64_t created, int max_model_len,
                        const std::vector<std::string>& adapters = {});

std::string tokenize_json(const std::vector<int32_t>& tokens, int max_model_len);
std::string detokenize_json(const std::string& text);

}  // namespace ib::serve
