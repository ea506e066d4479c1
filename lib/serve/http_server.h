// `infer-bench serve`: an OpenAI-compatible HTTP server on the engine loop (serve/engine_loop.h),
// through cpp-httplib: /v1/completions and /v1/chat/completions (streamed as server-sent events
// when asked), /v1/models, /health, and /metrics (Prometheus text). A client that goes away
// mid-stream cancels its request; a bad request is a 4xx with OpenAI's error object, whatever
// bytes it held; bodies, concurrency, reading time and origins are bounded (HttpOptions).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "constrain/json_schema.h"
#include "model/chat_template.h"
#include "serve/engine_loop.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() says which)
  std::string model_name;
  std::string tokenizer_json;  // the checkpoint's tokenizer.json: its tokens' bytes, for response_format
  // How response_format's schemas compile: the grammar (free values at any depth, recursive $ref),
  // one DFA (free values nested at most SchemaOptions::any_depth), or Auto (the DFA where it cuts
  // nothing off, else the grammar).
  constrain::SchemaPath schema_path = constrain::SchemaPath::Grammar;
  double schema_compile_seconds = 10;  // a schema's compile CPU budget: past it a 400 (0: none)
  // LoRA adapters resident in the engine, by the name a request's `model` gives (vLLM's
  // --lora-modules): name -> the engine's adapter id.
  std::vector<std::pair<std::string, int>> adapters;
  // A chat's messages become the prompt through the checkpoint's own Jinja template (GGUF
  // tokenizer.chat_template, tokenizer_config.json chat_template) when `jinja` is set; otherwise
  // through this simple one (each message, {role} and {content} replaced, joined), then the
  // generation prompt.
  std::shared_ptr<const model::ChatTemplate> jinja;
  std::string chat_template = "{role}: {content}\n";
  std::string generation_prompt = "assistant:";
  // tool_choice "auto" (the default with tools) reads the model's calls from its text with this
  // parser (vLLM's --tool-call-parser: "hermes"); "" refuses it. Forced calls need none.
  std::string tool_call_parser;

  // Limits: a client cannot make the server read, hold or generate without bound.
  int64_t max_body_bytes = 4 << 20;  // a larger body (by its Content-Length, or chunked past it): 413
  int max_concurrent = 256;          // completions in flight at once; one more: 429 with Retry-After
  int max_tokens_limit = 0;          // a request's max_tokens at most (0: the model's context)
  int threads = 128;                 // connections served at once; more wait in the listen backlog
  int read_timeout_s = 10;           // a client silent this long while sending its request is dropped
  // A request's line, headers and body must all arrive within this long of the connection
  // starting to wait for it, however the bytes trickle (one per read timeout held a thread); 0: none.
  double receive_deadline_s = 30;
  double shutdown_grace_s = 30;  // stop(): requests in flight may finish this long, then are cancelled
  // Browsers: an `Origin` not listed here is refused (403), so a page on another site cannot
  // drive a server on this machine; "*" allows any. A listed one gets CORS headers and preflights.
  std::vector<std::string> allowed_origins;
  // vLLM's --api-key: the /v1 routes need `Authorization: Bearer KEY` (401 without); "" for none.
  std::string api_key;
};

// Whether this binary has the HTTP server: cpp-httplib was found when it was built, and
// INFER_BENCH_HTTP was on (the device preset turns it off: Debian ships cpp-httplib as a shared
// library only, which the GPU machine the device binaries travel to does not have).
bool http_server_built();

class HttpServer {
 public:
  // Throws InputError when the binary was built without the HTTP server.
  HttpServer(EngineLoop& loop, std::shared_ptr<const tokenizer::Tokenizer> tokenizer, HttpOptions o);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int bind();     // the port it listens on; InputError naming host:port when it cannot bind
  void listen();  // serves until stop(); returns then
  // From any thread: no new completions (503); the ones in flight finish within the grace
  // period, or are cancelled then (a stream ends with an error event and [DONE]); then listen()
  // returns. Blocks until the requests in flight are answered or the grace period is over.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ib::serve
