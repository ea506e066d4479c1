// Tool calling as OpenAI's chat API and vLLM's server offer it: a request's `tools` and
// `tool_choice`, the JSON Schema a forced call's output is constrained to, and a generated text
// read back as the message's `tool_calls`. No I/O here: openai_request.cpp parses the request and
// writes the message, http_server.cpp runs it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ib::serve {

// A function the request offers: its name and its parameters' JSON Schema (as JSON text).
struct Tool {
  std::string name;
  std::string parameters;
};

// `tool_choice`: none (text only), auto (the model chooses; read back by a tool-call parser),
// required (one or more calls, constrained), named (that function, constrained).
enum class ToolChoice { None, Auto, Required, Named };

struct ToolRequest {
  std::vector<Tool> tools;
  std::string tools_json;  // the request's `tools` array as JSON text: the chat template's `tools`
  ToolChoice choice = ToolChoice::None;
  std::string named;     // ToolChoice::Named: the function
  bool parallel = true;  // parallel_tool_calls: false allows one call at most
  bool constrained() const { return choice == ToolChoice::Named || choice == ToolChoice::Required; }
};

struct ToolCall {
  std::string id, name;
  std::string arguments;  // JSON text, as OpenAI's API carries it
};

// The schema a constrained choice's output must hold: Named, the function's parameters (the
// output is the call's arguments); Required, a non-empty array of {"name", "parameters"} objects,
// one branch per function (at most one item without parallel calls), as vLLM's server builds it.
std::string tool_output_schema(const ToolRequest& r);

// A message's text read back: the content that is not a call, and the calls.
struct ToolOutput {
  std::string content;
  bool content_null = false;  // no content beside the calls (OpenAI writes `content: null`)
  std::vector<ToolCall> calls;
};

// Named: the whole text is the function's arguments. Required: the array of the schema above.
// Auto with the hermes parser: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks
// (the last may be unclosed, cut by max_tokens) after the content; a block that is not such an
// object leaves the whole text as content (vLLM's). Call ids are `id_prefix` + the call's index.
ToolOutput read_tool_output(const ToolRequest& r, const std::string& text, const std::string& id_prefix);

// The hermes format's opening tag: a stream holds back text that may be its start.
inline constexpr const char* kHermesToolCallTag = "<tool_call>";
// How much of a text still being generated is content for sure under the hermes parser: up to
// its first tag, or all but an end that may be a tag's start.
size_t hermes_content_end(const std::string& text);
// The finish reason of a choice whose message is `out` (ended "stop" or "length"): "tool_calls"
// when the model chose to call (auto, required), as OpenAI's; a named function's call is "stop".
std::string tool_finish_reason(const ToolRequest& r, const ToolOutput& out, const std::string& ended);

}  // namespace ib::serve
