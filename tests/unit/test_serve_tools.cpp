// Tool calling in `infer-bench serve` (serve/tool_calls.h, parsed by serve/openai_request.h): tools
// and tool_choice parsed and refused field by field, a forced call's schema run by the engine
// (every document read back as calls whose arguments hold their function's parameters), the
// hermes parser's reading of a model's text, and the messages and chunks as OpenAI writes them.
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/trained_model.h"
#include "constrain/validator.h"
#include "constrain/vocab.h"
#include "core/json_input.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "serve/engine_loop.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/schema_constraint.h"
#include "serve/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {
namespace {

using nlohmann::json;

const char* kToolsField = R"("tools": [
  {"type": "function", "function": {"name": "get_weather", "description": "now", "parameters": {"type": "object",
   "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}}, "required": ["unit", "city"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
   "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}},
  {"type": "function", "function": {"name": "ping"}}])";

std::string tool_chat_body(const std::string& extra) {
  return std::string(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )") + extra + "}";
}

ApiRequest parse_chat(const std::string& body) {
  ApiError e;
  auto r = parse_api_request(body, true, e);
  EXPECT_TRUE(r.has_value()) << e.message << "\n" << body;
  return r ? *r : ApiRequest{};
}

std::string refused_field(const std::string& body) {
  ApiError e;
  EXPECT_FALSE(parse_api_request(body, true, e).has_value()) << body;
  return e.param;
}

TEST(ServeTools, ToolsAndToolChoiceAreParsedAndRefusedWithTheFieldNamed) {
  const ApiRequest plain = parse_chat(tool_chat_body(R"("max_tokens": 3)"));
  EXPECT_EQ(plain.tools.choice, ToolChoice::None);
  EXPECT_TRUE(plain.response_schema.empty());

  const ApiRequest defaulted = parse_chat(tool_chat_body(kToolsField));
  EXPECT_EQ(defaulted.tools.choice, ToolChoice::Auto);  // OpenAI's default with tools
  ASSERT_EQ(defaulted.tools.tools.size(), 3u);
  EXPECT_TRUE(defaulted.response_schema.empty());
  // The tools reach the template in the client's key order ("type" before "function").
  EXPECT_EQ(defaulted.tools.tools_json.rfind(R"([{"type":"function","function":{"name":"get_weather","description")", 0), 0u)
      << defaulted.tools.tools_json;

  const ApiRequest named = parse_chat(
      tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_time"}})"));
  EXPECT_EQ(named.tools.choice, ToolChoice::Named);
  EXPECT_EQ(named.schema_field, "tool_choice");
  EXPECT_EQ(ib::parse_json<json>(named.response_schema)["required"], json::array({"zone"}));

  const ApiRequest required =
      parse_chat(tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": "required", "parallel_tool_calls": false)"));
  const json schema = ib::parse_json<json>(required.response_schema);
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  EXPECT_EQ(schema["items"]["anyOf"].size(), 3u);
  // A function without parameters takes none.
  EXPECT_EQ(schema["items"]["anyOf"][2]["properties"]["parameters"]["additionalProperties"], false);

  EXPECT_EQ(parse_chat(tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": "none")")).tools.choice, ToolChoice::None);
  EXPECT_EQ(refused_field(tool_chat_body(R"("tool_choice": "required")")), "tool_choice");  // no tools
  EXPECT_EQ(refused_field(tool_chat_body(std::string(kToolsField) +
                                         R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})")),
            "tool_choice");
  EXPECT_EQ(refused_field(tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": "sometimes")")), "tool_choice");
  EXPECT_EQ(refused_field(tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": "required",
      "response_format": {"type": "json_object"})")),
            "tool_choice");
  EXPECT_EQ(refused_field(tool_chat_body(R"("tools": [{"type": "function", "function": {"name": "a b"}}])")), "tools");
  EXPECT_EQ(refused_field(tool_chat_body(R"("tools": [{"type": "retrieval"}])")), "tools");
  EXPECT_EQ(refused_field(tool_chat_body(R"("tools": [{"type": "function", "function": {"name": "a"}},
      {"type": "function", "function": {"name": "a"}}])")),
            "tools");
  EXPECT_EQ(refused_field(tool_chat_body(R"("tools": [{"type": "function", "function": {"name": "a", "parameters": []}}])")),
            "tools");
  EXPECT_EQ(refused_field(tool_chat_body(std::string(kToolsField) + R"(, "parallel_tool_calls": "yes")")), "parallel_tool_calls");
}

TEST(ServeTools, AConversationsToolTurnsReachTheTemplate) {
  const ApiRequest r = parse_chat(R"({"model": "m", "messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"unit\": \"c\", \"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "-3"}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  // The arguments as an object (as vLLM passes them to a template), their keys in the client's order.
  EXPECT_EQ(
      r.messages[1].fields_json,
      R"({"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"unit":"c","city":"Oslo"}}}]})");
  EXPECT_EQ(r.messages[2].fields_json, R"({"tool_call_id":"c1"})");
  EXPECT_EQ(refused_field(R"({"model": "m", "messages": [{"role": "tool", "content": "x"}]})"), "messages");
  EXPECT_EQ(refused_field(R"({"model": "m", "messages": [{"role": "user", "content": "x", "tool_calls": []}]})"), "messages");
  EXPECT_EQ(refused_field(R"({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
      "arguments": {}}}]}]})"),
            "messages");  // arguments are a string in OpenAI's API
  EXPECT_EQ(refused_field(R"({"model": "m", "messages": [{"role": "assistant"}]})"), "messages");
}

TEST(ServeTools, TheHermesParserReadsCallsAfterTheContent) {
  ToolRequest auto_tools;
  auto_tools.choice = ToolChoice::Auto;
  const ToolOutput two = read_tool_output(
      auto_tools,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"ping\"}</tool_call>\n",
      "id_");
  EXPECT_EQ(two.content, "Let me check.\n");
  EXPECT_FALSE(two.content_null);
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[0].id, "id_0");
  EXPECT_EQ(two.calls[0].name, "get_weather");
  EXPECT_EQ(two.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(two.calls[1].arguments, "{}");
  EXPECT_EQ(tool_finish_reason(auto_tools, two, "stop"), "tool_calls");
  ToolRequest one_call = auto_tools;
  one_call.parallel = false;  // parallel_tool_calls: false keeps the first
  EXPECT_EQ(read_tool_output(one_call, "<tool_call>{\"name\": \"a\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>", "id_")
                .calls.size(),
            1u);
  EXPECT_EQ(tool_finish_reason(auto_tools, two, "length"), "length");
  // Cut by max_tokens inside the closing tag: "</tool" is not JSON, so the text stays content
  // (vLLM's); cut after the JSON, the open block is a call.
  const std::string cut_text = "<tool_call>{\"name\": \"ping\", \"arguments\": {}}</tool";
  const ToolOutput cut = read_tool_output(auto_tools, cut_text, "id_");
  EXPECT_EQ(cut.content, cut_text);
  EXPECT_TRUE(cut.calls.empty());
  const ToolOutput open = read_tool_output(auto_tools, "<tool_call>{\"name\": \"ping\", \"arguments\": {}}", "id_");
  EXPECT_EQ(open.calls.size(), 1u);
  // Not a call: the model's whole text is the content.
  for (const char* text : {"plain answer", "<tool_call>not json</tool_call>", "<tool_call>[1]</tool_call>",
                           "<tool_call>{\"name\": \"ping\"}</tool_call> and then more"}) {
    const ToolOutput t = read_tool_output(auto_tools, text, "id_");
    EXPECT_EQ(t.content, text);
    EXPECT_TRUE(t.calls.empty()) << text;
    EXPECT_EQ(tool_finish_reason(auto_tools, t, "stop"), "stop");
  }
  // A stream sends content up to a tag, and holds back an end that may be one's start.
  EXPECT_EQ(hermes_content_end("Hello <tool_call>{"), 6u);
  EXPECT_EQ(hermes_content_end("Hello <tool_"), 6u);
  EXPECT_EQ(hermes_content_end("Hello <"), 6u);
  EXPECT_EQ(hermes_content_end("a < b"), 5u);
  EXPECT_EQ(hermes_content_end("Hello"), 5u);
}

TEST(ServeTools, MessagesAndChunksCarryTheCallsAsOpenAiWritesThem) {
  const ApiRequest r = parse_chat(tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": "required")"));
  ChoiceText c{"", "tool_calls", {}, {{"call_1", "get_time", R"({"zone":"UTC"})"}}, true};
  const json whole = ib::parse_json<json>(completion_json(r, "chatcmpl-1", 5, "m", {c}, {3, 2}));
  const json& m = whole["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"zone":"UTC"})");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  const json first =
      ib::parse_json<json>(tool_calls_chunk(r, "c", 5, "m", {{0, "call_1", "get_time", "{\"zo"}}, true, {}, 0).substr(6));
  const json& d = first["choices"][0]["delta"];
  EXPECT_EQ(d["role"], "assistant");
  EXPECT_TRUE(d["content"].is_null());
  EXPECT_EQ(d["tool_calls"][0]["function"]["name"], "get_time");
  const json later = ib::parse_json<json>(tool_calls_chunk(r, "c", 5, "m", {{0, "", "", "ne\":1}"}}, false, {}, 0).substr(6));
  const json& call = later["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_FALSE(call.contains("id"));
  EXPECT_FALSE(call["function"].contains("name"));
  EXPECT_EQ(call["function"]["arguments"], "ne\":1}");
}

// The forced schemas run: every document the engine writes under them reads back as calls of the
// offered functions whose arguments hold each function's parameters (the validator's verdict).
TEST(ServeTools, ForcedCallsAreCallsOfTheOfferedFunctions) {
  const testing_support::TrainedModel m;
  auto engine = m.cpu_engine();
  const auto& tok = m.tok;
  const auto& vocab = m.vocab;
  SchedulerOptions o;
  o.max_seqs = 4;
  o.token_budget = 64;
  EngineLoop loop(*engine, o);
  const ApiRequest probe = parse_chat(tool_chat_body(kToolsField));
  using SchemaJson = constrain::SchemaValidator::json;
  std::map<std::string, SchemaJson> parameters;
  for (const Tool& t : probe.tools.tools)
    parameters[t.name] = t.parameters.empty() ? SchemaJson::object() : ib::parse_json<SchemaJson>(t.parameters);
  int calls = 0;
  for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "get_weather"}})"}) {
    const ApiRequest r = parse_chat(tool_chat_body(std::string(kToolsField) + R"(, "tool_choice": )" + choice));
    SCOPED_TRACE(choice);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 4; ++i) {
      Request q;
      q.prompt = tok->encode("call a tool: ");
      auto sc = std::make_shared<SchemaConstraint>(r.response_schema, vocab);
      q.max_tokens = sc->min_tokens() + 40;
      q.eos = vocab->eos;
      model::SamplingParams p;
      p.temperature = 1.0f;
      p.seed = 7 + static_cast<uint64_t>(i);
      q.sampling = p;
      q.constraint = sc;
      streams.push_back(loop.submit(std::move(q)));
    }
    for (auto& s : streams) {
      std::vector<int32_t> tokens;
      while (!s->wait(tokens.size(), tokens, 1.0)) {
      }
      ASSERT_TRUE(s->stopped());
      if (!tokens.empty() && tokens.back() == vocab->eos) tokens.pop_back();
      const std::string text = tok->decode(tokens, true);
      const ToolOutput out = read_tool_output(r.tools, text, "id_");
      ASSERT_FALSE(out.calls.empty()) << text;
      EXPECT_TRUE(out.content_null);
      for (const ToolCall& call : out.calls) {
        ASSERT_TRUE(parameters.count(call.name)) << call.name;
        const constrain::SchemaValidator validator(parameters[call.name]);
        EXPECT_TRUE(validator.valid(ib::parse_json<SchemaJson>(call.arguments))) << call.name << " " << call.arguments;
        ++calls;
      }
    }
  }
  EXPECT_GE(calls, 8);
}

}  // namespace
}  // namespace ib::serve
