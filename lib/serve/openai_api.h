// The OpenAI API as `infer-bench serve` speaks it (the subset vLLM's server and the `openai`
// client use for completions and chat): a request body parsed into what the engine needs, and the
// response objects and stream chunks written back. No I/O here: http_server.cpp carries them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/sample.h"
#include "serve/logits_processors.h"
#include "serve/tool_calls.h"

namespace ib::serve {

// A request the API refused: the HTTP status and OpenAI's error object's type and message.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the offending field, or ""
};

struct ChatMessage {
  std::string role, content;
  std::string fields_json;  // tool_calls, tool_call_id, name: model::ChatTurn's fields_json
};

// What a /v1/completions or /v1/chat/completions body asks for.
struct ApiRequest {
  bool chat = false;
  std::string model;
  // Completions: the prompts as texts, or as token ids (one of the two); a list of prompts gets
  // n choices each, prompt p's at indices p·n ... p·n + n − 1, as OpenAI's.
  std::vector<std::string> prompts;
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<ChatMessage> messages;  // chat
  int max_tokens = 16;                // OpenAI's default for completions; chat: up to the context
  bool max_tokens_given = false;
  model::SamplingParams sampling;  // temperature 1 and top_p 1 by default, as OpenAI's
  bool seed_given = false;
  bool stream = false;
  bool include_usage = false;               // stream_options.include_usage
  bool continuous_usage = false;            // stream_options.continuous_usage_stats (vLLM): the usage so far in every chunk
  std::vector<std::string> ignored_fields;  // fields this server does not know, ignored (the server logs them)
  std::vector<std::string> stop;            // stop sequences: the text ends before the first (OpenAI's `stop`)
  std::vector<int32_t> stop_token_ids;      // vLLM's: generation ends at any of these tokens (not in the text)
  bool include_stop_str = false;            // vLLM's include_stop_str_in_output
  int n = 1;                                // choices, each its own sequence (seed + i when a seed is given)
  LogitsProcessors processors;              // logit_bias, repetition/frequency/presence penalties
  int logprobs = -1;                        // completions' `logprobs` k, chat's `top_logprobs` with `logprobs: true`; -1: none
  bool ignore_eos = false;                  // vLLM's extension: generate max_tokens whatever
  // Completions: the prompt before the text, and with logprobs its tokens' log-probabilities
  // before the generated ones' (the first token's null), as OpenAI's `echo`; max_tokens 0 then
  // scores the prompt alone.
  bool echo = false;
  // response_format json_schema (its `schema`) or json_object ({"type": "object"}), as JSON text;
  // "" for text.
  std::string response_schema;
  std::string schema_field = "response_format";  // where response_schema came from (tool_choice: a forced call's)
  ToolRequest tools;                             // chat: tools, tool_choice, parallel_tool_calls
};

// Parses a body (`chat`: /v1/chat/completions). Wrong types, values out of range and what this
// server does not do (echo, suffix, best_of > n) are refused with the field named; nullopt and
// `err` set then. Unknown fields are listed in ignored_fields.
std::optional<ApiRequest> parse_api_request(const std::string& body, bool chat, ApiError& err);

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

// vLLM's /tokenize ({"model", "prompt"}) and /detokenize ({"model", "tokens"}) bodies.
struct TokenizeRequest {
  std::string model, prompt;
  std::vector<int32_t> tokens;
  bool add_special_tokens = true;  // /tokenize: the tokenizer's BOS etc. (false: as a chat template's text is encoded)
};
std::optional<TokenizeRequest> parse_tokenize_request(const std::string& body, bool tokenize, ApiError& err);
std::string tokenize_json(const std::vector<int32_t>& tokens, int max_model_len);
std::string detokenize_json(const std::string& text);

// The text a token sequence adds past what was already sent: `sent` characters of the decoded
// text are out; a trailing U+FFFD (a UTF-8 character cut between tokens) is held back until the
// next token completes it, unless `final`.
std::string text_delta(const std::string& decoded, size_t& sent, bool final);

// Stop sequences (bounded: at most kMaxStops of kMaxStopBytes each).
constexpr size_t kMaxStops = 16, kMaxStopBytes = 256;
constexpr int kMaxChoices = 16;  // `n` at most
constexpr int kMaxPrompts = 64;  // prompts × n at most
// Where a completion's text ends when a stop sequence occurs in it: before the earliest one (or
// after it, `include`); nullopt when none occurs.
std::optional<size_t> stop_cut(const std::string& text, const std::vector<std::string>& stops, bool include);
// How much of a text still being generated may be sent: all but what could be the start of a
// stop sequence, never inside a UTF-8 character.
size_t stop_safe_end(const std::string& text, const std::vector<std::string>& stops);

}  // namespace ib::serve
