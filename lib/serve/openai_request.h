// A request of the OpenAI API as `infer-bench serve` reads it (the subset vLLM's server and the
// `openai` client use for completions and chat, and vLLM's /tokenize): a body parsed into what
// the engine needs, or refused with the field named. openai_response.h writes the answers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/sample.h"
#include "serve/logits_processors.h"
#include "serve/tool_calls.h"

namespace ib::serve {

// A request's bounds: at most kMaxStops stop sequences of kMaxStopBytes each.
constexpr size_t kMaxStops = 16, kMaxStopBytes = 256;
constexpr int kMaxChoices = 16;  // `n` at most
constexpr int kMaxPrompts = 64;  // prompts × n at most

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

// vLLM's /tokenize ({"model", "prompt"}) and /detokenize ({"model", "tokens"}) bodies.
struct TokenizeRequest {
  std::string model, prompt;
  std::vector<int32_t> tokens;
  bool add_special_tokens = true;  // /tokenize: the tokenizer's BOS etc. (false: as a chat template's text is encoded)
};
std::optional<TokenizeRequest> parse_tokenize_request(const std::string& body, bool tokenize, ApiError& err);

}  // namespace ib::serve
