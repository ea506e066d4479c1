#include "serve/conversation_dataset.h"

#include <cctype>
#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "core/json_lines.h"

namespace ib::serve {
namespace {

constexpr size_t kMaxConversationLine = 64u << 20;      // one conversation
constexpr uint64_t kMaxConversationArray = 256u << 20;  // a whole-file JSON array

// The first user turn and the assistant turn right after it, from one conversation object; false
// when it has none. `where` names the file and line (or entry) for an error.
bool first_exchange(const nlohmann::json& c, const std::string& where, Conversation& out) {
  if (!c.is_object()) throw InputError(fmt::format("{}: a conversation is a JSON object", where));
  const bool sharegpt = c.contains("conversations");
  const char* list_key = sharegpt ? "conversations" : "messages";
  if (!c.contains(list_key))
    throw InputError(fmt::format("{}: a conversation has `conversations` (ShareGPT's) or `messages` (OpenAI's)", where));
  const nlohmann::json& turns = c[list_key];
  if (!turns.is_array()) throw InputError(fmt::format("{}: {} is a list of turns", where, list_key));
  const char* who_key = sharegpt ? "from" : "role";
  const char* text_key = sharegpt ? "value" : "content";
  for (size_t i = 0; i + 1 < turns.size(); ++i) {
    auto role = [&](size_t k) -> std::string {
      const nlohmann::json& t = turns[k];
      if (!t.is_object() || !t.contains(who_key) || !t[who_key].is_string())
        throw InputError(fmt::format("{}: {}[{}] has no `{}`", where, list_key, k, who_key));
      return t[who_key].get<std::string>();
    };
    auto text = [&](size_t k) -> std::string {
      const nlohmann::json& t = turns[k];
      if (!t.contains(text_key) || !t[text_key].is_string())
        throw InputError(fmt::format("{}: {}[{}].{} is not text", where, list_key, k, text_key));
      return t[text_key].get<std::string>();
    };
    const std::string a = role(i);
    if (a != "human" && a != "user") continue;
    const std::string b = role(i + 1);
    if (b != "gpt" && b != "assistant" && b != "chatgpt") continue;
    out.prompt = text(i);
    out.reply = text(i + 1);
    return !out.prompt.empty() && !out.reply.empty();
  }
  return false;
}

}  // namespace

std::vector<Conversation> read_conversations(const std::string& path, size_t limit, size_t* skipped) {
  std::vector<Conversation> out;
  size_t skip = 0;
  auto take = [&](const nlohmann::json& c, const std::string& where) {
    Conversation conv;
    if (first_exchange(c, where, conv))
      out.push_back(std::move(conv));
    else
      ++skip;
    return out.size() < limit;
  };
  // A JSON array (ShareGPT's own files, often pretty-printed over many lines) or JSON Lines: told
  // apart by the file's first byte that is not white space.
  regular_file_size(path);
  std::ifstream in(path, std::ios::binary);
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  in.close();
  if (first == '[') {
    nlohmann::json all;
    try {
      all = parse_json_bounded(read_input_file(path, kMaxConversationArray), path, 64);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not JSON ({})", path, e.what()));
    }
    for (size_t i = 0; i < all.size() && out.size() < limit; ++i) take(all[i], fmt::format("{}: entry {}", path, i));
  } else {
    for_each_json_line(path, kMaxConversationLine,
                       [&](const nlohmann::json& v, size_t line) { return take(v, fmt::format("{}:{}", path, line)); });
  }
  if (skipped) *skipped = skip;
  if (out.empty()) throw InputError(fmt::format("{}: no conversation with a user turn the assistant answered", path));
  return out;
}

}  // namespace ib::serve
