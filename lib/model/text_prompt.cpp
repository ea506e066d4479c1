#include "core/data_dir.h"
#include "model/text_prompt.h"

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

const std::string& text_of(const Point& p, const char* key) {
  static const std::string empty;
  return p.find(key) ? p.text(key) : empty;
}

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
      j = nlohmann::json::parse(line);
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

std::vector<KeySpec> text_prompt_keys() {
  return {
      key_spec(
          "prompt_text", ParamType::String,
          "a text prompt, tokenized with `tokenizer` (BOS added as the tokenizer's post-processor does); replaces the random "
          "`prompt` tokens, whose count it sets",
          Value(std::string())),
      key_spec("prompt_file", ParamType::String, "a file whose whole text is the prompt (as prompt_text)", Value(std::string())),
      key_spec("prompts", ParamType::String,
               "a JSONL file, one {\"prompt\": text} or {\"messages\": [{\"role\", \"content\"}, ...]} per line; sequence b of a "
               "batch takes line b mod lines",
               Value(std::string())),
      key_spec("template", ParamType::String,
               "how `prompts` chat messages become text: auto (the checkpoint's own Jinja chat template, the assistant's turn "
               "opened), or a template rendered per message with {role} and {content} replaced, then joined",
               Value(std::string())),
      tokenizer_key_spec(),
  };
}

KeySpec tokenizer_key_spec() {
  return key_spec("tokenizer", ParamType::String,
                  "auto (the checkpoint's tokenizer.json), gpt2, llama2, deepseek-llm, or a tokenizer.json path",
                  Value(std::string("auto")));
}

const std::vector<std::string>& text_prompt_key_names() {
  static const std::vector<std::string> n = {"prompt_text", "prompt_file", "prompts", "template", "tokenizer"};
  return n;
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

std::optional<TextPrompts> text_prompts(const Point& p, const std::string& weights, int model_vocab,
                                        const std::string& tokenizer_key) {
  TextPromptSource source;
  source.text = text_of(p, "prompt_text");
  source.file = text_of(p, "prompt_file");
  source.jsonl = text_of(p, "prompts");
  source.chat_template = text_of(p, "template");
  if (p.find(tokenizer_key)) source.tokenizer = p.text(tokenizer_key);
  return text_prompts(source, weights, model_vocab);
}

std::optional<KeyProblem> check_text_prompts(const std::map<std::string, std::vector<Value>>& values,
                                             const std::string& weights_key, const std::string& tokenizer_key,
                                             const std::string& model_key) {
  auto all = [&](const char* key) {
    std::vector<std::string> out;
    auto it = values.find(key);
    if (it != values.end())
      for (const Value& v : it->second) out.push_back(std::get<std::string>(v));
    return out;
  };
  const auto texts = all("prompt_text"), files = all("prompt_file"), jsonls = all("prompts"), toks = all(tokenizer_key.c_str()),
             weights = all(weights_key.c_str());
  auto any = [](const std::vector<std::string>& v) {
    for (const auto& s : v)
      if (!s.empty()) return true;
    return false;
  };
  const int sources = any(texts) + any(files) + any(jsonls);
  if (sources == 0) return std::nullopt;
  if (sources > 1)
    return KeyProblem{{"prompt_text", "prompt_file", "prompts"}, "give one of prompt_text, prompt_file and prompts"};
  try {
    for (const auto& f : files)
      if (!f.empty()) read_prompt_file("prompt_file", f);
    const auto templates = all("template");
    for (const auto& f : jsonls)
      if (!f.empty())
        for (const auto& w : weights.empty() ? std::vector<std::string>{""} : weights)
          read_prompt_lines(f, templates.empty() ? std::string() : templates.front(), w);
  } catch (const InputError& e) {
    return KeyProblem{{any(files) ? "prompt_file" : "prompts"}, e.what()};
  }
  const auto models = all(model_key.c_str());
  try {
    for (const auto& t : toks.empty() ? std::vector<std::string>{"auto"} : toks)
      for (const auto& w : weights.empty() ? std::vector<std::string>{"random"} : weights) {
        auto tok = prompt_tokenizer(t, w);
        // The tokenizer's ids must be ids of the model (a larger model vocabulary, padded, is fine).
        for (const auto& m : models) {
          int vocab = 0;
          if (m == "checkpoint" && w != "random")
            vocab = checkpoint_config(w).vocab;
          else if (auto c = preset(m))
            vocab = c->vocab;
          if (vocab > 0 && tok->vocab_size() > vocab)
            return KeyProblem{{tokenizer_key, model_key},
                              fmt::format("tokenizer {} has {} ids, past the {} token ids of model {}", tok->name(),
                                          tok->vocab_size(), vocab, m == "checkpoint" ? w : m)};
        }
      }
  } catch (const InputError& e) {
    return KeyProblem{{tokenizer_key}, e.what()};
  }
  return std::nullopt;
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
