#include "model/text_prompt.h"
#include "core/data_dir.h"
#include "core/json_input.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "model/config.h"

namespace ib::model {

namespace {

constexpr size_t kMaxPromptBytes = size_t{16} << 20;  // a prompt file or JSONL past this is refused
constexpr size_t kMaxPrompts = 100000;

}  // namespace

std::string read_prompt_file(const std::string& key, const std::string& given) {
  namespace fs = std::filesystem;
  const std::string path = data_path(given);
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw InputError(fmt::format("{}: '{}' is not a readable file", key, path));
  if (fs::file_size(path, ec) > kMaxPromptBytes)
    throw InputError(fmt::format("{}: '{}' is larger than {} MiB", key, path, kMaxPromptBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in && !in.eof()) throw InputError(fmt::format("{}: '{}' cannot be read", key, path));
  return s.str();
}

std::string render_chat_message(const std::string& tmpl, const std::string& role, const std::string& content) {
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl.compare(i, 6, "{role}") == 0) {
      out += role;
      i += 6;
    } else if (tmpl.compare(i, 9, "{content}") == 0) {
      out += content;
      i += 9;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

// The JSONL lines of `prompts`: {"prompt": text} or {"messages": [{"role", "content"}, ...]}.
std::vector<std::string> read_prompt_lines(const std::string& path, const std::string& tmpl, const std::string& weights) {
  const std::string text = read_prompt_file("prompts", path);
  std::optional<ChatTemplate> jinja;
  if (tmpl == "auto") {
    if (weights.empty() || weights == "random")
      throw InputError("template: auto needs a checkpoint (weights: a GGUF file or a directory with tokenizer_config.json)");
    jinja = checkpoint_chat_template(weights);
    if (!jinja) throw InputError(fmt::format("template: auto: the checkpoint {} has no chat template", weights));
  }
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = ib::parse_json<nlohmann::json>(line);
    } catch (const std::exception& e) {
      throw InputError(fmt::format("{}:{}: prompts: not JSON ({})", path, n, e.what()));
    }
    if (!j.is_object())
      throw InputError(fmt::format("{}:{}: prompts: expected an object with \"prompt\" or \"messages\"", path, n));
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string()) throw InputError(fmt::format("{}:{}: prompts: /prompt is not a string", path, n));
      out.push_back(j["prompt"].get<std::string>());
    } else if (j.contains("messages")) {
      const auto& m = j["messages"];
      if (!m.is_array() || m.empty()) throw InputError(fmt::format("{}:{}: prompts: /messages is not a non-empty list", path, n));
      if (tmpl.empty())
        throw InputError(
            fmt::format("{}:{}: prompts: chat messages need a `template` (e.g. \"{{role}}: {{content}}\\n\")", path, n));
      std::string rendered;
      std::vector<ChatTurn> turns;
      for (size_t i = 0; i < m.size(); ++i) {
        const auto& msg = m[i];
        if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string() || !msg.contains("content") ||
            !msg["content"].is_string())
          throw InputError(fmt::format("{}:{}: prompts: /messages/{} needs string \"role\" and \"content\"", path, n, i));
        if (jinja)
          turns.push_back({msg["role"].get<std::string>(), msg["content"].get<std::string>()});
        else
          rendered += render_chat_message(tmpl, msg["role"].get<std::string>(), msg["content"].get<std::string>());
      }
      if (jinja) {
        try {
          rendered = jinja->render(turns, true);
        } catch (const InputError& e) {
          throw InputError(fmt::format("{}:{}: prompts: {}", path, n, e.what()));
        }
      }
      out.push_back(rendered);
    } else {
      throw InputError(fmt::format("{}:{}: prompts: expected \"prompt\" or \"messages\"", path, n));
    }
    if (out.size() > kMaxPrompts) throw InputError(fmt::format("{}: prompts: more than {} lines", path, kMaxPrompts));
  }
  if (out.empty()) throw InputError(fmt::format("{}: prompts: no prompt in the file", path));
  return out;
}

std::shared_ptr<const tokenizer::Tokenizer> prompt_tokenizer(const std::string& name, const std::string& weights) {
  if (name == "auto") {
    if (weights.empty() || weights == "random")
      throw InputError(
          "tokenizer: auto needs a checkpoint (weights: DIR with tokenizer.json, or a GGUF file); a preset with random "
          "weights needs a named tokenizer (gpt2, llama2, deepseek-llm or a tokenizer.json path)");
    if (!is_gguf_checkpoint(weights) && !std::filesystem::exists(data_path(weights) + "/tokenizer.json"))
      throw InputError(fmt::format("tokenizer: auto: {}/tokenizer.json does not exist (name one with tokenizer:)", weights));
    return tokenizer::Tokenizer::load(weights);
  }
  return tokenizer::Tokenizer::load(name);
}

std::optional<TextPrompts> text_prompts(const TextPromptSource& source, const std::string& weights, int model_vocab) {
  const int given = !source.text.empty() + !source.file.empty() + !source.jsonl.empty();
  if (given == 0) return std::nullopt;
  if (given > 1) throw InputError("prompt_text, prompt_file, prompts: give one of them");
  TextPrompts t;
  if (!source.text.empty())
    t.texts = {source.text};
  else if (!source.file.empty())
    t.texts = {read_prompt_file("prompt_file", source.file)};
  else
    t.texts = read_prompt_lines(source.jsonl, source.chat_template, weights);
  t.tokenizer = prompt_tokenizer(source.tokenizer, weights);
  for (const auto& s : t.texts) {
    std::vector<int32_t> ids = t.tokenizer->encode(s, source.chat_template != "auto");
    if (ids.empty()) throw InputError(fmt::format("prompt: '{}' encodes to no tokens", short_text(s)));
    for (int32_t id : ids)
      if (id < 0 || id >= model_vocab)
        throw InputError(fmt::format("tokenizer: {} gives token id {} for '{}', past the model's vocabulary of {}",
                                     t.tokenizer->name(), id, short_text(s), model_vocab));
    t.tokens.push_back(std::move(ids));
  }
  return t;
}

std::string short_text(const std::string& text, size_t width) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80 && ++chars > width) {
      out += "…";
      break;
    }
    if (c == '\n')
      out += "⏎";
    else if (c == '\r' || c == '\t')
      out += ' ';
    else if (c == '|')
      out += "¦";  // a Markdown table cell
    else
      out += static_cast<char>(c);
  }
  return out;
}

}  // namespace ib::model
