#include "serve/conversation_dataset.h"

#include <cctype>
#include <fstream>
#include <functional>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_lines.h"

namespace ib::serve {
namespace {

constexpr size_t kMaxConversationLine = 64u << 20;  // one conversation

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

// Reads a top-level JSON array one element at a time: each element is built as a value and
// handed to `each` (false: stop), so a ShareGPT file of 650 MB is never held whole. Elements
// nest at most kMaxDepth levels.
class ArrayElements {
 public:
  using json = nlohmann::json;
  static constexpr size_t kMaxDepth = 64;
  ArrayElements(std::string path, std::function<bool(const json&, size_t)> each)
      : path_(std::move(path)), each_(std::move(each)) {}

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(json(v)); }
  bool string(json::string_t& v) { return value(json(std::move(v))); }
  bool binary(json::binary_t&) { return value(json()); }
  bool start_object(size_t) { return open(json::object()); }
  bool start_array(size_t) {
    if (!top_) {  // the file's own array
      top_ = true;
      return true;
    }
    return open(json::array());
  }
  bool key(json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() {
    if (stack_.empty()) return true;  // the file's own array ends
    return close();
  }
  bool parse_error(size_t at, const std::string&, const nlohmann::detail::exception& e) {
    throw InputError(fmt::format("{}: not JSON at byte {} ({})", path_, at, e.what()));
  }

 private:
  bool top_ = false;
  std::string path_, key_;
  std::function<bool(const json&, size_t)> each_;
  json root_;
  std::vector<json*> stack_;  // the containers open in the current element, innermost last
  size_t index_ = 0, values_ = 0, bytes_ = 0;
  static constexpr size_t kMaxValues = 1u << 20;

  // `v` where it belongs: a whole element at the top, else into the innermost container. One
  // element is bounded as a JSON Lines line is: by its values and its strings' bytes.
  json* place(json v) {
    if (!top_) throw InputError(fmt::format("{}: a dataset is a JSON array or JSON Lines", path_));
    if (v.is_string()) bytes_ += v.get_ref<const std::string&>().size();
    if (++values_ > kMaxValues || bytes_ > kMaxConversationLine)
      throw InputError(fmt::format("{}: entry {} is larger than one conversation can be ({} values, {} of text at most)", path_,
                                   index_, kMaxValues, limit_text(kMaxConversationLine)));
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& c = *stack_.back();
    if (c.is_object()) return &(c[key_] = std::move(v));
    c.push_back(std::move(v));
    return &c.back();
  }
  bool value(json v) {
    const bool element = stack_.empty();
    place(std::move(v));
    return element ? next() : true;
  }
  // The element is whole: hand it on, and start the next one's bounds.
  bool next() {
    values_ = bytes_ = 0;
    return each_(root_, index_++);
  }
  bool open(json container) {
    if (stack_.size() >= kMaxDepth)
      throw InputError(fmt::format("{}: entry {}: JSON nested deeper than {} levels", path_, index_, kMaxDepth));
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return stack_.empty() ? next() : true;
  }
};

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
    std::ifstream file(path, std::ios::binary);
    ArrayElements sax(path, [&](const nlohmann::json& c, size_t i) { return take(c, fmt::format("{}: entry {}", path, i)); });
    nlohmann::json::sax_parse(file, &sax);
  } else {
    for_each_json_line(path, kMaxConversationLine,
                       [&](const nlohmann::json& v, size_t line) { return take(v, fmt::format("{}:{}", path, line)); });
  }
  if (skipped) *skipped = skip;
  if (out.empty()) throw InputError(fmt::format("{}: no conversation with a user turn the assistant answered", path));
  return out;
}

}  // namespace ib::serve
