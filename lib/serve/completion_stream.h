// A streamed OpenAI-compatible completion as a client reads it: server-sent events (`data: {...}`
// lines, an empty line between events, `data: [DONE]` at the end) fed in whatever pieces the
// socket delivers, each chunk's text and time kept. It is the other end of our server and of any
// vLLM, SGLang or llama.cpp endpoint, so it trusts nothing: a line, an event and the whole stream
// are bounded, a malformed event or an error event ends the stream with the reason, and a stream
// that stops before [DONE] is reported as cut, not as complete.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ib::serve {

class CompletionStream {
 public:
  enum class Api { Completions, Chat };
  explicit CompletionStream(Api api) : api_(api) {}

  // Bytes of the response body, received at `now` (seconds on the caller's clock). False once the
  // stream has failed (failure() says why): the caller stops reading.
  bool feed(const char* data, size_t n, double now);
  // The body ended (the connection closed or the response completed): an event still buffered is
  // read, and a stream without [DONE] fails as cut.
  void finish(double now);

  bool done() const { return done_; }  // [DONE] seen and nothing failed
  const std::string& failure() const { return failure_; }

  // The times of the chunks that carried output: a completion's `text`, a chat's `delta.content`,
  // even empty (a token whose bytes do not yet complete a character), but not an empty closing
  // chunk (only its finish_reason) nor a chat's role-only first chunk; and the text.
  const std::vector<double>& output_times() const { return output_times_; }
  const std::string& text() const { return text_; }
  size_t events() const { return events_; }                            // data events read, [DONE] excluded
  std::optional<int> prompt_tokens() const { return prompt_tokens_; }  // the last `usage` event's
  std::optional<int> completion_tokens() const { return completion_tokens_; }
  // usage.prompt_tokens_details.cached_tokens (OpenAI's field; llama.cpp always, vLLM when asked):
  // the prompt tokens the server found in its cache.
  std::optional<int> cached_tokens() const { return cached_tokens_; }
  const std::string& finish_reason() const { return finish_reason_; }

  static constexpr size_t kMaxLine = 1 << 20;  // one event's data; a chunk of one token is < 1 KB
  static constexpr size_t kMaxText = 64 << 20;

 private:
  void fail(std::string why);
  void line(const std::string& l, double now);
  void event(const std::string& data, double now);

  Api api_;
  std::string pending_;  // bytes after the last newline
  std::string data_;     // the current event's data lines
  bool done_ = false;
  std::string failure_;
  std::vector<double> output_times_;
  std::string text_;
  size_t events_ = 0;
  std::optional<int> prompt_tokens_, completion_tokens_, cached_tokens_;
  std::string finish_reason_;
};

}  // namespace ib::serve
