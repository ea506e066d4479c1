#include "serve/completion_stream.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/json_input.h"

namespace ib::serve {
namespace {

// A reason quoting what a server sent: one line, bounded, printable.
std::string quoted(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 120)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? ' ' : c;
  return s.size() > 120 ? out + "..." : out;
}

std::optional<int> count_field(const nlohmann::json& usage, const char* key) {
  auto it = usage.find(key);
  if (it == usage.end() || !it->is_number_integer()) return std::nullopt;
  const auto v = it->get<int64_t>();
  if (v < 0 || v > (int64_t{1} << 30)) return std::nullopt;
  return static_cast<int>(v);
}

}  // namespace

void CompletionStream::fail(std::string why) {
  if (failure_.empty()) failure_ = std::move(why);
  done_ = false;
}

bool CompletionStream::feed(const char* data, size_t n, double now) {
  if (!failure_.empty()) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = data[i];
    if (c == '\n') {
      if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
      line(pending_, now);
      pending_.clear();
      if (!failure_.empty()) return false;
      continue;
    }
    if (done_) {  // bytes after [DONE] other than line ends
      if (c != '\r') fail("bytes after data: [DONE]");
      if (!failure_.empty()) return false;
      continue;
    }
    pending_ += c;
    if (pending_.size() > kMaxLine) {
      fail(fmt::format("an event line past {} bytes", kMaxLine));
      return false;
    }
  }
  return true;
}

void CompletionStream::line(const std::string& l, double now) {
  if (l.empty()) {  // an event ends
    if (!data_.empty()) {
      std::string d;
      d.swap(data_);
      event(d, now);
    }
    return;
  }
  if (done_) return;
  if (l[0] == ':') return;  // a comment (a keep-alive)
  const size_t colon = l.find(':');
  const std::string field = l.substr(0, colon);
  std::string value = colon == std::string::npos ? "" : l.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.erase(0, 1);
  if (field == "data") {
    if (!data_.empty()) data_ += '\n';
    data_ += value;
    if (data_.size() > kMaxLine) fail(fmt::format("an event past {} bytes", kMaxLine));
  } else if (field != "event" && field != "id" && field != "retry") {
    fail(fmt::format("not a server-sent event line: '{}'", quoted(l)));
  }
}

void CompletionStream::event(const std::string& data, double now) {
  if (done_) {
    fail("an event after data: [DONE]");
    return;
  }
  if (data == "[DONE]") {
    done_ = failure_.empty();
    return;
  }
  ++events_;
  nlohmann::json j;
  try {
    j = parse_json_bounded(data, "an event", 64);
  } catch (const std::exception&) {
    fail(fmt::format("a malformed event: '{}'", quoted(data)));
    return;
  }
  if (!j.is_object()) {
    fail(fmt::format("an event that is not a JSON object: '{}'", quoted(data)));
    return;
  }
  if (auto e = j.find("error"); e != j.end()) {
    const std::string msg =
        e->is_object() && e->contains("message") && (*e)["message"].is_string() ? (*e)["message"].get<std::string>() : e->dump();
    fail("the server sent an error event: " + quoted(msg));
    return;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (auto p = count_field(*u, "prompt_tokens")) prompt_tokens_ = p;
    if (auto c = count_field(*u, "completion_tokens")) completion_tokens_ = c;
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      if (auto c = count_field(*d, "cached_tokens")) cached_tokens_ = c;
  }
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array() || choices->empty()) return;  // a usage-only event
  const nlohmann::json& c = (*choices)[0];
  if (!c.is_object()) {
    fail(fmt::format("a choice that is not an object: '{}'", quoted(data)));
    return;
  }
  const nlohmann::json* text = nullptr;
  if (api_ == Api::Completions) {
    if (auto t = c.find("text"); t != c.end()) text = &*t;
  } else if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
    if (auto t = d->find("content"); t != d->end()) text = &*t;
  }
  const auto f = c.find("finish_reason");
  const bool closing = f != c.end() && f->is_string();
  if (closing) finish_reason_ = f->get<std::string>();
  if (text && !text->is_null()) {
    if (!text->is_string()) {
      fail(fmt::format("a choice whose text is not a string: '{}'", quoted(data)));
      return;
    }
    const std::string& s = text->get_ref<const std::string&>();
    if (text_.size() + s.size() > kMaxText) {
      fail(fmt::format("output past {} bytes", kMaxText));
      return;
    }
    text_ += s;
    // A chunk carrying a token counts even when its text is empty (bytes of a character not yet
    // complete, text held back for a stop string), as vLLM's client counts it; an empty closing
    // chunk (only the finish reason) carries none.
    if (!s.empty() || !closing) output_times_.push_back(now);
  }
}

void CompletionStream::finish(double now) {
  if (!failure_.empty()) return;
  // An event must end with an empty line; one left open when the body ended was cut, except a
  // last `data: [DONE]` whose line ends were left out.
  if (!pending_.empty() || !data_.empty()) {
    const bool bare_done =
        data_.empty() ? (pending_ == "data: [DONE]" || pending_ == "data:[DONE]") : (pending_.empty() && data_ == "[DONE]");
    if (!bare_done) {
      fail("the stream was cut inside an event");
      return;
    }
    pending_.clear();
    data_.clear();
    event("[DONE]", now);
  }
  if (failure_.empty() && !done_) fail("the stream ended without data: [DONE] (cut mid-stream)");
}

}  // namespace ib::serve
