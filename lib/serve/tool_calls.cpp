#include "serve/tool_calls.h"
#include "core/json_input.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace ib::serve {

namespace {

using ojson = nlohmann::ordered_json;

std::string dump_ordered(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// A function offered without parameters takes none (OpenAI: "omitting parameters defines a
// function with an empty parameter list").
ojson tool_parameters(const Tool& t) {
  if (t.parameters.empty()) return {{"type", "object"}, {"properties", ojson::object()}, {"additionalProperties", false}};
  return ib::parse_json<ojson>(t.parameters);
}

ToolCall tool_call_of(const std::string& id_prefix, size_t index, std::string name, std::string arguments) {
  return {id_prefix + std::to_string(index), std::move(name), std::move(arguments)};
}

bool only_space(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

ToolOutput content_only(const std::string& text) { return {text, false, {}}; }

// hermes: <tool_call>{"name": "f", "arguments": {...}}</tool_call>, repeated; the last may be open.
ToolOutput read_hermes_calls(const std::string& text, const std::string& id_prefix) {
  static const std::string kOpen = kHermesToolCallTag, kClose = "</tool_call>";
  const size_t first = text.find(kOpen);
  if (first == std::string::npos) return content_only(text);
  ToolOutput out;
  out.content = text.substr(0, first);
  out.content_null = out.content.empty();
  size_t at = first;
  while (at != std::string::npos) {
    const size_t body = at + kOpen.size();
    const size_t close = text.find(kClose, body);
    const std::string block = text.substr(body, close == std::string::npos ? std::string::npos : close - body);
    try {
      const ojson j = ib::parse_json<ojson>(block);
      if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return content_only(text);
      const ojson args = j.contains("arguments") ? j["arguments"] : ojson::object();
      out.calls.push_back(tool_call_of(id_prefix, out.calls.size(), j["name"].get<std::string>(), dump_ordered(args)));
    } catch (const ojson::exception&) {
      return content_only(text);  // not a call after all: the model's text, whole
    }
    if (close == std::string::npos) break;
    const size_t next = text.find(kOpen, close + kClose.size());
    // Text between or after the calls is not content OpenAI's message has a place for; only
    // whitespace is expected there.
    if (next == std::string::npos && !only_space(text.substr(close + kClose.size()))) return content_only(text);
    at = next;
  }
  return out;
}

}  // namespace

std::string tool_output_schema(const ToolRequest& r) {
  if (r.choice == ToolChoice::Named) {
    for (const Tool& t : r.tools)
      if (t.name == r.named) return dump_ordered(tool_parameters(t));
    return {};
  }
  if (r.choice != ToolChoice::Required) return {};
  ojson branches = ojson::array();
  for (const Tool& t : r.tools)
    branches.push_back({{"type", "object"},
                        {"properties", {{"name", {{"type", "string"}, {"enum", {t.name}}}}, {"parameters", tool_parameters(t)}}},
                        {"required", {"name", "parameters"}},
                        {"additionalProperties", false}});
  ojson schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", branches}}}};
  if (!r.parallel) schema["maxItems"] = 1;
  return dump_ordered(schema);
}

ToolOutput read_tool_output(const ToolRequest& r, const std::string& text, const std::string& id_prefix) {
  switch (r.choice) {
    case ToolChoice::None:
      return content_only(text);
    case ToolChoice::Named:
      return {"", true, {tool_call_of(id_prefix, 0, r.named, text)}};
    case ToolChoice::Required: {
      ToolOutput out{"", true, {}};
      try {
        const ojson list = ib::parse_json<ojson>(text);
        if (!list.is_array()) return content_only(text);
        for (const ojson& item : list) {
          if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) return content_only(text);
          out.calls.push_back(tool_call_of(id_prefix, out.calls.size(), item["name"].get<std::string>(),
                                           dump_ordered(item.contains("parameters") ? item["parameters"] : ojson::object())));
        }
      } catch (const ojson::exception&) {
        return content_only(text);  // cut by max_tokens: the partial document is what there is
      }
      return out;
    }
    case ToolChoice::Auto: {
      ToolOutput out = read_hermes_calls(text, id_prefix);
      if (!r.parallel && out.calls.size() > 1) out.calls.resize(1);  // parallel_tool_calls: false
      return out;
    }
  }
  return content_only(text);
}

size_t hermes_content_end(const std::string& text) {
  const std::string tag = kHermesToolCallTag;
  const size_t at = text.find(tag);
  if (at != std::string::npos) return at;
  for (size_t keep = std::min(text.size(), tag.size() - 1); keep > 0; --keep)
    if (text.compare(text.size() - keep, keep, tag, 0, keep) == 0) return text.size() - keep;
  return text.size();
}

std::string tool_finish_reason(const ToolRequest& r, const ToolOutput& out, const std::string& ended) {
  return !out.calls.empty() && r.choice != ToolChoice::Named && ended == "stop" ? "tool_calls" : ended;
}

}  // namespace ib::serve
