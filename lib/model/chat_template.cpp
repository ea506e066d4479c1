#include "model/chat_template.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include <fmt/format.h>
#include <minja/minja.hpp>
#include <nlohmann/json.hpp>

#include "core/data_dir.h"
#include "core/errors.h"
#include "core/gguf_file.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "model/checkpoint.h"

namespace ib::model {

namespace {
// minja's messages span lines (the template around the fault); errors here are one line.
std::string one_line(std::string what) {
  for (char& ch : what)
    if (ch == '\n') ch = ' ';
  return what;
}
}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token, std::string origin)
    : source_(std::move(source)), bos_(std::move(bos_token)), eos_(std::move(eos_token)), origin_(std::move(origin)) {
  try {
    root_ = minja::Parser::parse(source_, {/* trim_blocks */ true, /* lstrip_blocks */ true, /* keep_trailing_newline */ false});
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: the chat template does not parse: {}", origin_, one_line(e.what())));
  }
}

std::string ChatTemplate::render(const std::vector<ChatTurn>& messages, bool add_generation_prompt,
                                 const std::string& tools_json) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    nlohmann::ordered_json message = {{"role", m.role}, {"content", m.content}};
    if (!m.fields_json.empty()) {
      const auto fields = ib::parse_json<nlohmann::ordered_json>(m.fields_json);
      for (const auto& [k, v] : fields.items()) message[k] = v;
    }
    list.push_back(std::move(message));
  }
  nlohmann::ordered_json variables = {
      {"messages", list}, {"add_generation_prompt", add_generation_prompt}, {"bos_token", bos_}, {"eos_token", eos_}};
  if (!tools_json.empty()) variables["tools"] = ib::parse_json<nlohmann::ordered_json>(tools_json);
  try {
    auto context = minja::Context::make(minja::Value(variables));
    // transformers defines strftime_now for templates that date their system prompt.
    context->set("strftime_now", minja::Value::callable([](const std::shared_ptr<minja::Context>&, minja::ArgumentsValue& args) {
                   args.expectArgs("strftime_now", {1, 1}, {0, 0});
                   const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                   std::tm local{};
                   localtime_r(&now, &local);
                   std::ostringstream ss;
                   ss << std::put_time(&local, args.args[0].get<std::string>().c_str());
                   return minja::Value(ss.str());
                 }));
    return root_->render(context);
  } catch (const std::exception& e) {
    throw InputError(fmt::format("{}: the chat template failed: {}", origin_, one_line(e.what())));
  }
}

namespace {

std::string token_text(const nlohmann::json& j) {  // "bos_token": "<s>" or {"content": "<s>", ...}
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

std::optional<ChatTemplate> checkpoint_chat_template(const std::string& checkpoint) {
  const std::string path = data_path(checkpoint);
  if (is_gguf_checkpoint(path)) {
    const auto file = gguf::open_file(path);
    const gguf::File& f = *file;
    const auto source = f.opt_string("tokenizer.chat_template");
    if (!source) return std::nullopt;
    auto token = [&](const char* key) {
      const auto id = f.opt_int(key);
      const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
      return id && *id >= 0 && *id < static_cast<int64_t>(tokens.size()) ? tokens[static_cast<size_t>(*id)] : std::string();
    };
    return ChatTemplate(*source, token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id"),
                        path + ": tokenizer.chat_template");
  }
  const std::string file = (std::filesystem::path(path) / "tokenizer_config.json").string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  nlohmann::json j;
  try {
    j = parse_json_bounded(read_input_file(file, 64 << 20), file);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(file + ": not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null()) return std::nullopt;
  const nlohmann::json& t = j["chat_template"];
  std::string source;
  if (t.is_string()) {
    source = t.get<std::string>();
  } else if (t.is_array()) {  // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        source = e["template"].get<std::string>();
    if (source.empty()) throw InputError(file + ": chat_template: a list without a \"default\" template");
  } else {
    throw InputError(file + ": chat_template: expected a string or a list of named templates");
  }
  return ChatTemplate(source, j.contains("bos_token") ? token_text(j["bos_token"]) : "",
                      j.contains("eos_token") ? token_text(j["eos_token"]) : "", file + ": chat_template");
}

}  // namespace ib::model
