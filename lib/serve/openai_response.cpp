#include "serve/openai_response.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ib::serve {

using nlohmann::json;

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string error_json(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.status}}}};
  return dump_json(j);
}

namespace {

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  if (u.draft_tokens > 0) j["spec_decode"] = {{"num_draft_tokens", u.draft_tokens}, {"num_accepted_tokens", u.accepted_tokens}};
  return j;
}

json finish(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }

}  // namespace

json logprobs_json(const ApiRequest& r, const std::vector<TokenLogprobText>& tokens, size_t offset) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(c);
    return b;
  };
  if (r.chat) {
    json content = json::array();
    for (const TokenLogprobText& t : tokens) {
      json top = json::array();
      for (const auto& [tok, lp] : t.top) top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes(tok)}});
      content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes(t.token)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprobText& t : tokens) {
    toks.push_back(t.token);
    lps.push_back(t.known ? json(t.logprob) : json(nullptr));
    json top = json::object();
    for (const auto& [tok, lp] : t.top) top[tok] = lp;
    tops.push_back(t.known ? top : json(nullptr));
    offsets.push_back(offset);
    offset += t.token.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::string completion_json(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                            const std::vector<ChoiceText>& choices, const Usage& u) {
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    json choice = {{"index", i},
                   {"finish_reason", finish(choices[i].finish_reason)},
                   {"logprobs", r.logprobs >= 0 ? logprobs_json(r, choices[i].logprobs) : json(nullptr)}};
    if (r.chat) {
      const ChoiceText& c = choices[i];
      choice["message"] = {{"role", "assistant"}, {"content", c.content_null ? json(nullptr) : json(c.text)}};
      if (!c.tool_calls.empty()) {
        json calls = json::array();
        for (const ToolCall& t : c.tool_calls)
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        choice["message"]["tool_calls"] = std::move(calls);
      }
    } else
      choice["text"] = choices[i].text;
    list.push_back(std::move(choice));
  }
  json j = {{"id", id},           {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created}, {"model", model},
            {"choices", list},    {"usage", usage_json(u)}};
  return dump_json(j);
}

std::string completion_json(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                            const std::string& text, const std::string& finish_reason, const Usage& u) {
  return completion_json(r, id, created, model, std::vector<ChoiceText>{{text, finish_reason}}, u);
}

namespace {

// A stream's event around one choice's chunk.
std::string chunk_event(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model, json choice,
                        const Usage& so_far) {
  json j = {{"id", id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({std::move(choice)})}};
  if (r.continuous_usage)
    j["usage"] = usage_json(so_far);
  else if (r.include_usage)
    j["usage"] = nullptr;
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace

std::string stream_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                         const std::string& text, const std::string& finish_reason, bool first, const Usage& so_far, int index,
                         const std::vector<TokenLogprobText>* logprobs, size_t offset) {
  json choice = {{"index", index},
                 {"finish_reason", finish(finish_reason)},
                 {"logprobs", logprobs && r.logprobs >= 0 ? logprobs_json(r, *logprobs, offset) : json(nullptr)}};
  if (r.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  return chunk_event(r, id, created, model, std::move(choice), so_far);
}

std::string tool_calls_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
                             const std::vector<ToolCallDelta>& calls, bool first, const Usage& so_far, int index,
                             const std::vector<TokenLogprobText>* logprobs, size_t offset) {
  json delta = json::object();
  if (first) {
    delta["role"] = "assistant";
    delta["content"] = nullptr;
  }
  json list = json::array();
  for (const ToolCallDelta& c : calls) {
    json call = {{"index", c.index}};
    json function = {{"arguments", c.arguments}};
    if (!c.id.empty()) {
      call["id"] = c.id;
      call["type"] = "function";
      function["name"] = c.name;
    }
    call["function"] = std::move(function);
    list.push_back(std::move(call));
  }
  if (!list.empty()) delta["tool_calls"] = std::move(list);
  json choice = {{"index", index},
                 {"finish_reason", nullptr},
                 {"logprobs", logprobs && r.logprobs >= 0 ? logprobs_json(r, *logprobs, offset) : json(nullptr)},
                 {"delta", std::move(delta)}};
  return chunk_event(r, id, created, model, std::move(choice), so_far);
}

std::string usage_chunk(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model, const Usage& u) {
  json j = {{"id", id},
            {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array()},
            {"usage", usage_json(u)}};
  return "data: " + dump_json(j) + "\n\n";
}

std::string models_json(const std::string& model, int64_t created, int max_model_len, const std::vector<std::string>& adapters) {
  json data = json::array();
  auto entry = [&](const std::string& id, json parent) {
    return json{{"id", id},
                {"object", "model"},
                {"created", created},
                {"owned_by", "infer-bench"},
                {"root", id},
                {"parent", parent},
                {"max_model_len", max_model_len}};
  };
  data.push_back(entry(model, nullptr));
  for (const std::string& a : adapters) data.push_back(entry(a, model));
  return dump_json(json({{"object", "list"}, {"data", data}}));
}

std::string tokenize_json(const std::vector<int32_t>& tokens, int max_model_len) {
  return dump_json(json({{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", max_model_len}}));
}

std::string detokenize_json(const std::string& text) { return dump_json(json({{"prompt", text}})); }

}  // namespace ib::serve
