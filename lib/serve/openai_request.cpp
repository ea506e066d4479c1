#include "serve/openai_request.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "serve/openai_response.h"

namespace ib::serve {

namespace {

using nlohmann::json;
// What a chat template reads keeps the client's key order (a template's `tojson` writes it as
// transformers' does): those parts are read again in order.
using ojson = nlohmann::ordered_json;

struct Refusal {
  ApiError e;
};
[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw Refusal{{400, "invalid_request_error", message, param}};
}

double number_field(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) refuse(name, fmt::format("'{}' must be a number", name));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    refuse(name, fmt::format("'{}' must be in [{}, {}], not {}", name, lo, hi, dump_json(v)));
  return x;
}

int64_t int_field(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) refuse(name, fmt::format("'{}' must be an integer", name));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) refuse(name, fmt::format("'{}' must be in [{}, {}], not {}", name, lo, hi, x));
  return x;
}

// A request body: a JSON object, or a refusal saying why not. Nesting is bounded as in a user's
// files (a value copied or dumped recurses one frame per level: a schema nested 10^5 deep
// overflowed a handler's stack); a number past a double's range is nlohmann's out_of_range, not a
// parse_error, and both are refusals of the body, not faults of the server.
json body_object(const std::string& body) {
  json j;
  try {
    j = parse_json_bounded(body, "the body");
  } catch (const InputError& e) {
    refuse("", e.what());
  } catch (const json::out_of_range&) {
    refuse("", "the body is not valid JSON: a number is out of range (past a double's)");
  } catch (const json::exception& e) {
    // nlohmann's reason without its "[json.exception.parse_error.101] " tag.
    std::string why = e.what();
    if (why.rfind("[json.exception.", 0) == 0 && why.find("] ") != std::string::npos) why = why.substr(why.find("] ") + 2);
    refuse("", fmt::format("the body is not valid JSON: {}", why));
  }
  if (!j.is_object()) refuse("", "the body must be a JSON object");
  return j;
}

// `tools`, `tool_choice` and `parallel_tool_calls` (chat), as OpenAI's API defines them.
ToolRequest tools_of(const json& j, std::vector<std::string>& ignored) {
  ToolRequest t;
  const bool given = j.contains("tools") && !j["tools"].is_null() && !(j["tools"].is_array() && j["tools"].empty());
  if (given) {
    const json& list = j["tools"];
    constexpr size_t kMaxTools = 128;  // OpenAI's bound
    if (!list.is_array() || list.size() > kMaxTools)
      refuse("tools", fmt::format("'tools' must be a list of at most {} functions", kMaxTools));
    for (size_t i = 0; i < list.size(); ++i) {
      const json& tool = list[i];
      if (!tool.is_object() || tool.value("type", json()) != "function" || !tool.contains("function") ||
          !tool["function"].is_object())
        refuse("tools", fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{...}}}}", i));
      const json& f = tool["function"];
      if (!f.contains("name") || !f["name"].is_string()) refuse("tools", fmt::format("tools[{}].function needs its 'name'", i));
      const std::string name = f["name"].get<std::string>();
      if (name.empty() || name.size() > 64 ||
          name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != std::string::npos)
        refuse("tools", fmt::format("tools[{}].function.name must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i));
      for (const Tool& other : t.tools)
        if (other.name == name) refuse("tools", fmt::format("two tools are named '{}'", name));
      Tool parsed{name, ""};
      if (f.contains("parameters") && !f["parameters"].is_null()) {
        if (!f["parameters"].is_object())
          refuse("tools", fmt::format("tools[{}].function.parameters must be a JSON Schema object", i));
        parsed.parameters = dump_json(f["parameters"]);
      }
      if (f.contains("description") && !f["description"].is_null() && !f["description"].is_string())
        refuse("tools", fmt::format("tools[{}].function.description must be a string", i));
      for (const auto& [k, v] : f.items())
        if (k != "name" && k != "parameters" && k != "description" && k != "strict")
          ignored.push_back(fmt::format("tools[{}].function.{}", i, k));
      t.tools.push_back(std::move(parsed));
    }
    t.choice = ToolChoice::Auto;  // OpenAI's default when tools are given
  }
  if (j.contains("tool_choice") && !j["tool_choice"].is_null()) {
    const json& c = j["tool_choice"];
    if (c == "none") {
      t.choice = ToolChoice::None;
    } else if (c == "auto" || c == "required") {
      t.choice = c == "auto" ? ToolChoice::Auto : ToolChoice::Required;
    } else if (c.is_object() && c.value("type", json()) == "function" && c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      t.choice = ToolChoice::Named;
      t.named = c["function"]["name"].get<std::string>();
      if (std::none_of(t.tools.begin(), t.tools.end(), [&](const Tool& x) { return x.name == t.named; }))
        refuse("tool_choice", fmt::format("tool_choice names '{}', which is not among the tools", t.named));
    } else {
      refuse("tool_choice",
             "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (t.choice != ToolChoice::None && !given) refuse("tool_choice", "'tool_choice' needs 'tools'");
  }
  if (j.contains("parallel_tool_calls") && !j["parallel_tool_calls"].is_null()) {
    if (!j["parallel_tool_calls"].is_boolean()) refuse("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    t.parallel = j["parallel_tool_calls"].get<bool>();
  }
  return t;
}

// A message's fields beside role and content that a chat template reads: an assistant turn's
// tool_calls (their arguments as objects where they parse, as vLLM passes them), a tool turn's
// tool_call_id, a name. As a JSON object's text, "" when none.
std::string message_fields(const ojson& m, const std::string& role) {
  ojson fields = ojson::object();
  if (m.contains("name") && !m["name"].is_null()) {
    if (!m["name"].is_string()) refuse("messages", "a message's 'name' must be a string");
    fields["name"] = m["name"];
  }
  if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
    if (role != "assistant") refuse("messages", "only an assistant message has 'tool_calls'");
    if (!m["tool_calls"].is_array()) refuse("messages", "'tool_calls' must be a list");
    ojson calls = ojson::array();
    for (const ojson& c : m["tool_calls"]) {
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
          !c["function"]["name"].is_string() || !c["function"].contains("arguments") || !c["function"]["arguments"].is_string())
        refuse("messages",
               "a tool call must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\" (a string)}}");
      ojson call = c;
      const std::string args = c["function"]["arguments"].get<std::string>();
      const ojson parsed = ib::parse_json_or_discarded<ojson>(args);
      if (!parsed.is_discarded() && parsed.is_object()) call["function"]["arguments"] = parsed;
      calls.push_back(std::move(call));
    }
    fields["tool_calls"] = std::move(calls);
  }
  if (role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
      refuse("messages", "a tool message needs its 'tool_call_id' (a string)");
    fields["tool_call_id"] = m["tool_call_id"];
  }
  return fields.empty() ? std::string() : fields.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

std::optional<ApiRequest> parse_api_request(const std::string& body, bool chat, ApiError& err) {
  try {
    const json j = body_object(body);
    ApiRequest r;
    r.chat = chat;
    r.sampling.temperature = 1.0f;  // OpenAI's defaults
    r.sampling.top_p = 1.0f;
    static const std::set<std::string> kCommon = {"model",
                                                  "max_tokens",
                                                  "temperature",
                                                  "top_p",
                                                  "top_k",
                                                  "seed",
                                                  "stream",
                                                  "stream_options",
                                                  "ignore_eos",
                                                  "user",
                                                  "n",
                                                  "frequency_penalty",
                                                  "presence_penalty",
                                                  "repetition_penalty",
                                                  "logit_bias",
                                                  "stop",
                                                  "stop_token_ids",
                                                  "include_stop_str_in_output",
                                                  "logprobs"};
    static const std::set<std::string> kCompletion = {"prompt", "echo", "best_of", "suffix", "response_format"};
    static const std::set<std::string> kChat = {"messages", "max_completion_tokens", "response_format",    "top_logprobs",
                                                "tools",    "tool_choice",           "parallel_tool_calls"};
    // A field this server does not know is ignored and named back (vLLM logs them): clients send
    // their vendors' extensions. The known ones that would change the output are refused below.
    for (const auto& [k, v] : j.items())
      if (!kCommon.count(k) && !(chat ? kChat : kCompletion).count(k)) r.ignored_fields.push_back(k);
    if (!j.contains("model") || !j["model"].is_string()) refuse("model", "'model' (a string) is required");
    r.model = j["model"].get<std::string>();
    // What this server does not do is refused, not ignored: a client relying on it would be misled.
    if (j.contains("n") && !j["n"].is_null()) r.n = static_cast<int>(int_field(j["n"], "n", 1, kMaxChoices));
    // best_of = n is n choices; more would need ranking by log-probability, which is not done.
    if (j.contains("best_of") && !j["best_of"].is_null() && j["best_of"] != json(r.n))
      refuse("best_of", fmt::format("'best_of' must equal n ({}): choices are not ranked", r.n));
    LogitsProcessors& lp = r.processors;
    if (j.contains("frequency_penalty") && !j["frequency_penalty"].is_null())
      lp.frequency_penalty = static_cast<float>(number_field(j["frequency_penalty"], "frequency_penalty", -2, 2));
    if (j.contains("presence_penalty") && !j["presence_penalty"].is_null())
      lp.presence_penalty = static_cast<float>(number_field(j["presence_penalty"], "presence_penalty", -2, 2));
    if (j.contains("repetition_penalty") && !j["repetition_penalty"].is_null())  // vLLM's
      lp.repetition_penalty = static_cast<float>(number_field(j["repetition_penalty"], "repetition_penalty", 1e-3, 2));
    if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
      const json& b = j["logit_bias"];
      if (!b.is_object() || b.size() > 300)
        refuse("logit_bias", "'logit_bias' must be an object of at most 300 token ids (as strings) to biases");
      for (const auto& [id, bias] : b.items()) {
        if (id.empty() || id.size() > 9 || id.find_first_not_of("0123456789") != std::string::npos)
          refuse("logit_bias", fmt::format("logit_bias key '{}' is not a token id", id));
        lp.logit_bias.emplace_back(std::stoi(id), static_cast<float>(number_field(bias, "logit_bias", -100, 100)));
      }
    }
    constexpr int kMaxLogprobs = 20;  // OpenAI's bound
    if (chat) {
      const bool wanted = j.contains("logprobs") && !j["logprobs"].is_null() && j["logprobs"] != false;
      if (wanted && !j["logprobs"].is_boolean()) refuse("logprobs", "'logprobs' must be a boolean for chat");
      if (wanted) r.logprobs = 0;
      if (j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
        if (!wanted) refuse("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r.logprobs = static_cast<int>(int_field(j["top_logprobs"], "top_logprobs", 0, kMaxLogprobs));
      }
    } else if (j.contains("logprobs") && !j["logprobs"].is_null()) {
      r.logprobs = static_cast<int>(int_field(j["logprobs"], "logprobs", 0, kMaxLogprobs));
    }
    // The body again with its keys in order, for what a chat template reads (its depth was bounded above).
    std::optional<ojson> in_order;
    auto ordered = [&]() -> const ojson& {
      if (!in_order) in_order = ib::parse_json<ojson>(body);
      return *in_order;
    };
    if (chat) r.tools = tools_of(j, r.ignored_fields);
    if (!r.tools.tools.empty()) r.tools.tools_json = ordered()["tools"].dump(-1, ' ', false, ojson::error_handler_t::replace);
    if (j.contains("suffix") && !j["suffix"].is_null() && j["suffix"] != "")
      refuse("suffix", "'suffix' (insertion) is not supported by this server");
    if (j.contains("echo") && !j["echo"].is_null()) {
      if (!j["echo"].is_boolean()) refuse("echo", "'echo' must be a boolean");
      r.echo = j["echo"].get<bool>();
      if (r.echo && chat) refuse("echo", "'echo' is a /v1/completions field");
    }
    if (j.contains("stop") && !j["stop"].is_null()) {
      const json& st = j["stop"];
      const json list = st.is_string() ? json::array({st}) : st;
      if (!list.is_array() || list.size() > kMaxStops)
        refuse("stop", fmt::format("'stop' must be a string or a list of at most {} strings", kMaxStops));
      for (const json& x : list) {
        if (!x.is_string() || x.get<std::string>().empty() || x.get<std::string>().size() > kMaxStopBytes)
          refuse("stop", fmt::format("each stop sequence must be a non-empty string of at most {} bytes", kMaxStopBytes));
        r.stop.push_back(x.get<std::string>());
      }
    }
    if (j.contains("stop_token_ids") && !j["stop_token_ids"].is_null()) {
      if (!j["stop_token_ids"].is_array() || j["stop_token_ids"].size() > 1024)
        refuse("stop_token_ids", "'stop_token_ids' must be a list of at most 1024 token ids");
      for (const json& t : j["stop_token_ids"])
        r.stop_token_ids.push_back(static_cast<int32_t>(int_field(t, "stop_token_ids", 0, INT32_MAX)));
    }
    if (j.contains("include_stop_str_in_output") && !j["include_stop_str_in_output"].is_null()) {
      if (!j["include_stop_str_in_output"].is_boolean())
        refuse("include_stop_str_in_output", "'include_stop_str_in_output' must be a boolean");
      r.include_stop_str = j["include_stop_str_in_output"].get<bool>();
    }
    if (j.contains("response_format") && !j["response_format"].is_null()) {
      const json& f = j["response_format"];
      if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
        refuse("response_format", "'response_format' must be an object with a 'type'");
      const std::string type = f["type"].get<std::string>();
      if (type == "json_object") {
        r.response_schema = R"({"type":"object"})";
      } else if (type == "json_schema") {
        if (!f.contains("json_schema") || !f["json_schema"].is_object())
          refuse("response_format", "response_format json_schema needs a 'json_schema' object");
        const json& js = f["json_schema"];
        for (const auto& [k, v] : js.items())
          if (k != "name" && k != "schema" && k != "strict" && k != "description")
            refuse("response_format", fmt::format("unknown field 'json_schema.{}'", k));
        if (!js.contains("schema") || !(js["schema"].is_object() || js["schema"].is_boolean()))
          refuse("response_format", "response_format json_schema needs its 'schema' (a JSON Schema object)");
        r.response_schema = dump_json(js["schema"]);
      } else if (type != "text") {
        refuse("response_format",
               fmt::format("response_format type '{}' is not supported (text, json_object, json_schema)", type));
      }
    }
    if (r.tools.constrained()) {  // a forced call: its output constrained as response_format's is
      if (!r.response_schema.empty())
        refuse("tool_choice", "a forced tool call and response_format both constrain the output: send one or the other");
      r.response_schema = tool_output_schema(r.tools);
      r.schema_field = "tool_choice";
    }
    if (chat) {
      if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
        refuse("messages", "'messages' must be a non-empty array");
      for (size_t i = 0; i < j["messages"].size(); ++i) {
        const json& m = j["messages"][i];
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
          refuse("messages", "each message needs a 'role' string");
        const std::string role = m["role"].get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
          refuse("messages", fmt::format("message role '{}' is not supported", role));
        for (const auto& [k, v] : m.items())
          if (k != "role" && k != "content" && k != "name" && k != "tool_calls" && k != "tool_call_id" && k != "refusal")
            refuse("messages", fmt::format("unknown message field '{}'", k));
        std::string fields = role == "tool" || m.contains("tool_calls") || m.contains("name")
                                 ? message_fields(ordered()["messages"][i], role)
                                 : std::string();
        // An assistant turn that only called tools has no content (null or absent).
        const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
        if (!m.contains("content") && !calls) refuse("messages", "a message needs its 'content'");
        const json content = m.contains("content") ? m["content"] : json();
        std::string text;
        if (content.is_null() && calls) {
        } else if (content.is_string()) {
          text = content.get<std::string>();
        } else if (content.is_array()) {  // content parts: the text ones, joined (this model reads nothing else)
          for (const json& part : content) {
            if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
                !part["text"].is_string())
              refuse("messages", "a content part must be {\"type\": \"text\", \"text\": \"...\"} (this model reads text only)");
            text += part["text"].get<std::string>();
          }
        } else {
          refuse("messages", "a message's 'content' must be a string or a list of text parts");
        }
        r.messages.push_back({role, std::move(text), std::move(fields)});
      }
    } else {
      if (!j.contains("prompt")) refuse("prompt", "'prompt' is required");
      const json& p = j["prompt"];
      auto ids = [](const json& list) {
        std::vector<int32_t> out;
        for (const json& t : list) out.push_back(static_cast<int32_t>(int_field(t, "prompt", 0, INT32_MAX)));
        return out;
      };
      if (p.is_string()) {
        r.prompts.push_back(p.get<std::string>());
      } else if (p.is_array() && !p.empty() && p[0].is_string()) {  // a list of texts
        for (const json& x : p) {
          if (!x.is_string()) refuse("prompt", "a list of prompts must be all texts or all lists of token ids");
          r.prompts.push_back(x.get<std::string>());
        }
      } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {  // one prompt of token ids
        r.prompt_ids.push_back(ids(p));
      } else if (p.is_array() && !p.empty() && p[0].is_array()) {  // a list of them
        for (const json& x : p) {
          if (!x.is_array()) refuse("prompt", "a list of prompts must be all texts or all lists of token ids");
          r.prompt_ids.push_back(ids(x));
        }
      } else {
        refuse("prompt", "'prompt' must be a text, a list of token ids, or a list of either");
      }
      for (const std::string& x : r.prompts)
        if (x.empty()) refuse("prompt", "a prompt is empty");
      for (const auto& x : r.prompt_ids)
        if (x.empty()) refuse("prompt", "a prompt is empty");
      const size_t count = r.prompts.size() + r.prompt_ids.size();
      if (count * static_cast<size_t>(r.n) > static_cast<size_t>(kMaxPrompts))
        refuse("prompt", fmt::format("{} prompts of n = {} choices: more than {} in one request", count, r.n, kMaxPrompts));
    }
    for (const char* k : {"max_tokens", "max_completion_tokens"})
      if (j.contains(k) && !j[k].is_null()) {
        r.max_tokens = static_cast<int>(int_field(j[k], k, 0, 1 << 20));
        r.max_tokens_given = true;
        // 0: the prompt scored and nothing generated (lm-eval's loglikelihood), with echo only.
        if (r.max_tokens == 0 && !r.echo) refuse(k, fmt::format("'{}' must be in [1, {}] (0 only with echo)", k, 1 << 20));
      }
    if (j.contains("temperature") && !j["temperature"].is_null())
      r.sampling.temperature = static_cast<float>(number_field(j["temperature"], "temperature", 0, 2));
    if (j.contains("top_p") && !j["top_p"].is_null())
      r.sampling.top_p = static_cast<float>(number_field(j["top_p"], "top_p", 1e-9, 1));
    if (j.contains("top_k") && !j["top_k"].is_null()) {
      const int64_t k = int_field(j["top_k"], "top_k", -1, 1 << 20);
      r.sampling.top_k = k < 0 ? 0 : static_cast<int>(k);  // vLLM: -1 (or 0) = all
    }
    if (j.contains("seed") && !j["seed"].is_null()) {
      r.sampling.seed = static_cast<uint64_t>(int_field(j["seed"], "seed", INT64_MIN, INT64_MAX));
      r.seed_given = true;
    }
    if (j.contains("stream") && !j["stream"].is_null()) {
      if (!j["stream"].is_boolean()) refuse("stream", "'stream' must be a boolean");
      r.stream = j["stream"].get<bool>();
    }
    if (j.contains("stream_options") && !j["stream_options"].is_null()) {
      const json& so = j["stream_options"];
      if (!so.is_object()) refuse("stream_options", "'stream_options' must be an object");
      for (const auto& [k, v] : so.items()) {
        if ((k == "include_usage" || k == "continuous_usage_stats") && !v.is_null() && !v.is_boolean())
          refuse("stream_options", fmt::format("stream_options.{} must be a boolean", k));
        if (k == "include_usage")
          r.include_usage = v.is_boolean() && v.get<bool>();
        else if (k == "continuous_usage_stats")  // vLLM's: the usage so far in every chunk (GuideLLM sends it)
          r.continuous_usage = v.is_boolean() && v.get<bool>();
        else
          r.ignored_fields.push_back("stream_options." + k);
      }
    }
    if (j.contains("ignore_eos") && !j["ignore_eos"].is_null()) {
      if (!j["ignore_eos"].is_boolean()) refuse("ignore_eos", "'ignore_eos' must be a boolean");
      r.ignore_eos = j["ignore_eos"].get<bool>();
    }
    if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string()) refuse("user", "'user' must be a string");
    return r;
  } catch (const Refusal& f) {
    err = f.e;
    return std::nullopt;
  }
}

std::optional<TokenizeRequest> parse_tokenize_request(const std::string& body, bool tokenize, ApiError& err) {
  try {
    const json j = body_object(body);
    const char* field = tokenize ? "prompt" : "tokens";
    TokenizeRequest t;
    for (const auto& [k, v] : j.items())
      if (k != "model" && k != field && !(tokenize && k == "add_special_tokens"))
        refuse(k, fmt::format("unknown field '{}' for {}", k, tokenize ? "/tokenize" : "/detokenize"));
    if (j.contains("add_special_tokens") && !j["add_special_tokens"].is_null()) {  // vLLM's, true by default
      if (!j["add_special_tokens"].is_boolean()) refuse("add_special_tokens", "'add_special_tokens' must be a boolean");
      t.add_special_tokens = j["add_special_tokens"].get<bool>();
    }
    if (!j.contains("model") || !j["model"].is_string()) refuse("model", "'model' (a string) is required");
    t.model = j["model"].get<std::string>();
    if (tokenize) {
      if (!j.contains("prompt") || !j["prompt"].is_string()) refuse("prompt", "'prompt' (a string) is required");
      t.prompt = j["prompt"].get<std::string>();
    } else {
      if (!j.contains("tokens") || !j["tokens"].is_array()) refuse("tokens", "'tokens' (a list of token ids) is required");
      for (const json& v : j["tokens"]) t.tokens.push_back(static_cast<int32_t>(int_field(v, "tokens", 0, INT32_MAX)));
    }
    return t;
  } catch (const Refusal& f) {
    err = f.e;
    return std::nullopt;
  }
}

}  // namespace ib::serve
