#include "serve/http_server.h"

#include <malloc.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "constrain/vocab.h"
#include "core/errors.h"
#include "model/text_prompt.h"
#include "serve/answer_text.h"
#include "serve/completion_reply.h"
#include "serve/http_connections.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/schema_constraint.h"
#include "serve/server_metrics.h"
#include "serve/stream_text.h"

#if INFER_BENCH_HAVE_HTTP
#include <httplib.h>
#endif

namespace ib::serve {

#if INFER_BENCH_HAVE_HTTP

bool http_server_built() { return true; }

struct HttpServer::Impl {
  EngineLoop& loop;
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  HttpOptions o;
  httplib::Server svr;
  std::shared_ptr<const constrain::Vocabulary> vocab;  // the tokens as bytes, for response_format
  std::string vocab_problem;                           // why response_format cannot be served ("" if it can)
  std::atomic<int64_t> refused{0}, http_requests{0}, next_id{0};
  std::atomic<bool> draining{false};  // stop() was called: no new completions
  std::atomic<int> in_flight{0};      // completions being answered (a stream until its last write)
  std::atomic<int> listen_fd{-1};     // the listening socket, for its backlog (bind())
  std::shared_ptr<HttpConnectionCounters> connections = std::make_shared<HttpConnectionCounters>();
  std::mutex ids_m;
  std::set<int64_t> ids;  // the engine's ids of the completions in flight, cancelled past the grace period
  // Where a completion ends: the checkpoint's end-of-sequence ids (generation_config.json, the
  // GGUF's), as transformers' generate and llama.cpp stop; the tokenizer's guess when it names none.
  std::vector<int32_t> eos_ids;
  AnswerText answer_text;  // what a completion's tokens say, with these eos ids

  static std::vector<int32_t> end_of_sequence_ids(const EngineLoop& l, const tokenizer::Tokenizer& t) {
    std::vector<int32_t> ids = l.config().eos_ids;
    if (ids.empty() && t.eos_id() >= 0) ids.push_back(t.eos_id());
    return ids;
  }

  Impl(EngineLoop& l, std::shared_ptr<const tokenizer::Tokenizer> t, HttpOptions opt)
      : loop(l), tok(std::move(t)), o(std::move(opt)), eos_ids(end_of_sequence_ids(loop, *tok)), answer_text(tok, eos_ids) {
    // response_format needs every token's bytes (our constrain vocabulary of the same tokenizer.json).
    try {
      auto v = constrain::load_vocabulary(o.tokenizer_json);
      vocab_problem = constrain::budget_guarantee_problem(*v);
      if (vocab_problem.empty()) vocab = v;
    } catch (const std::exception& e) {
      vocab_problem = e.what();
    }
  }

  // A request's schema compiled, at most kMaxCompiles at once: a compile's memory is bounded by
  // the compiler's caps (500,000 DFA states: 0.4-1 GB for the schemas the #48 campaign drove
  // there), so this bounds what concurrent hostile schemas take together; the others wait. A
  // long compile's freed memory is given back before the next starts: glibc keeps it in the
  // handler thread's arena, and eight such schemas at once held 2.9 GB.
  static constexpr int kMaxCompiles = 2;
  std::mutex compile_m;
  std::condition_variable compile_cv;
  int compiling = 0;
  std::shared_ptr<SchemaConstraint> compile(const std::string& schema) {
    {
      std::unique_lock<std::mutex> lock(compile_m);
      compile_cv.wait(lock, [this] { return compiling < kMaxCompiles; });
      ++compiling;
    }
    std::shared_ptr<void> done(nullptr, [this](void*) {
      {
        std::lock_guard<std::mutex> lock(compile_m);
        --compiling;
      }
      compile_cv.notify_one();
    });
    const auto start = std::chrono::steady_clock::now();
    auto give_back = [&] {
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(50)) ::malloc_trim(0);
    };
    try {
      auto c = std::make_shared<SchemaConstraint>(schema, vocab, o.schema_path, o.schema_compile_seconds);
      give_back();
      return c;
    } catch (...) {
      give_back();
      throw;
    }
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    ++refused;
    res.status = e.status;
    res.set_content(error_json(e), "application/json");
  }

  // The base model (-1) or a resident adapter's id, for a request's `model`; nullopt if neither.
  std::optional<int> adapter_of(const std::string& model) const {
    if (model == o.model_name) return -1;
    for (const auto& [name, id] : o.adapters)
      if (name == model) return id;
    return std::nullopt;
  }

  ApiError unknown_model(const std::string& model) const {
    std::string have = "`" + o.model_name + "`";
    for (const auto& a : o.adapters) have += ", `" + a.first + "`";
    return {404, "not_found_error", fmt::format("The model `{}` does not exist (this server has {})", model, have), "model"};
  }

  // vLLM's /tokenize and /detokenize: {"model", "prompt"} -> {"tokens", "count", "max_model_len"};
  // {"model", "tokens"} -> {"prompt"}.
  void tokenize(const httplib::Request& req, httplib::Response& res, bool forward) {
    ApiError err;
    std::optional<TokenizeRequest> t = parse_tokenize_request(req.body, forward, err);
    if (!t) return send_error(res, err);
    if (!adapter_of(t->model)) return send_error(res, unknown_model(t->model));
    if (forward)
      res.set_content(tokenize_json(tok->encode(t->prompt, t->add_special_tokens), loop.config().max_positions),
                      "application/json");
    else
      res.set_content(detokenize_json(tok->decode(t->tokens, false)), "application/json");
  }

  // A request the engine ended without its answer: cancelled by a shutdown (503), or failed.
  ApiError engine_error(const std::string& why) const {
    if (draining && why == "cancelled")
      return {503, "service_unavailable", "the server shut down before this request finished", ""};
    return {500, "internal_error", fmt::format("the engine failed: {}", why), ""};
  }

  // The ids of a request's tool calls: this prefix, then the choice's and the call's index. The
  // salt, drawn when the server starts, keeps ids apart across restarts (a client keys a
  // conversation's results by them).
  std::string call_id_salt = fmt::format("{:08x}", std::random_device{}());

  // The prompts' tokens: a chat rendered through the template, or the completion's texts / ids.
  std::vector<std::vector<int32_t>> prompts_of(const ApiRequest& r) const {
    if (r.chat) {
      if (o.jinja) {
        // The template writes the special tokens as text (<|im_start|>); encoded without adding
        // more, as transformers' apply_chat_template(tokenize=True) does.
        std::vector<model::ChatTurn> turns;
        for (const ChatMessage& m : r.messages) turns.push_back({m.role, m.content, m.fields_json});
        return {tok->encode(o.jinja->render(turns, true, r.tools.tools_json), false)};
      }
      std::string text;
      for (const ChatMessage& m : r.messages) text += model::render_chat_message(o.chat_template, m.role, m.content);
      return {tok->encode(text + o.generation_prompt)};
    }
    std::vector<std::vector<int32_t>> out = r.prompt_ids;
    for (const std::string& p : r.prompts) out.push_back(tok->encode(p));
    return out;
  }

  // The engine's request for `r` (prompt 0's; the reply submits each prompt's n), with its
  // response_format's schema compiled; or why it is refused.
  std::optional<ApiError> engine_request(const ApiRequest& r, int adapter, std::vector<std::vector<int32_t>>& prompts, Request& q,
                                         std::shared_ptr<SchemaConstraint>& schema) {
    q.adapter = adapter;
    try {
      prompts = prompts_of(r);
      q.prompt = prompts[0];
    } catch (const InputError& e) {
      return ApiError{400, "invalid_request_error", e.what(), r.chat ? "messages" : "prompt"};
    }
    const int context = loop.config().max_positions;
    q.max_tokens = r.max_tokens;
    if (r.chat && !r.max_tokens_given) q.max_tokens = std::max(1, context - static_cast<int>(q.prompt.size()));
    if (o.max_tokens_limit > 0 && q.max_tokens > o.max_tokens_limit) {
      if (r.max_tokens_given)
        return ApiError{
            400, "invalid_request_error",
            fmt::format("max_tokens {} is past this server's limit of {} (--max-tokens-limit)", q.max_tokens, o.max_tokens_limit),
            "max_tokens"};
      q.max_tokens = o.max_tokens_limit;
    }
    q.eos = r.ignore_eos || eos_ids.empty() ? -1 : eos_ids.front();
    q.stop_tokens = r.stop_token_ids;
    if (!r.ignore_eos && eos_ids.size() > 1) q.stop_tokens.insert(q.stop_tokens.end(), eos_ids.begin() + 1, eos_ids.end());
    q.logprobs = r.logprobs;
    q.prompt_logprobs = r.echo && r.logprobs >= 0;
    if (r.echo && r.max_tokens == 0) q.max_tokens = 1;  // the prompt scored: its one token is dropped
    q.processors = r.processors;
    for (const auto& [t, bias] : r.processors.logit_bias)
      if (t >= loop.config().vocab)
        return ApiError{400, "invalid_request_error",
                        fmt::format("logit_bias: token {} is past the vocabulary ({} tokens)", t, loop.config().vocab),
                        "logit_bias"};
    q.sampling = r.sampling;
    if (!r.response_schema.empty()) {
      if (!r.stop.empty() || !r.stop_token_ids.empty())
        return ApiError{
            400, "invalid_request_error",
            fmt::format("stop sequences and stop_token_ids would cut {}'s document: send one or the other", r.schema_field),
            r.stop.empty() ? "stop_token_ids" : "stop"};
      if (!vocab) return ApiError{400, "invalid_request_error", r.schema_field + ": " + vocab_problem, r.schema_field};
      try {
        auto c = compile(r.response_schema);
        if (q.max_tokens < c->min_tokens())
          return ApiError{400, "invalid_request_error",
                          fmt::format("max_tokens {} is fewer than the shortest document of the schema takes ({})", q.max_tokens,
                                      c->min_tokens()),
                          "max_tokens"};
        q.constraint = schema = std::move(c);
        q.eos = vocab->eos;  // the constraint allows EOS where the document is complete
      } catch (const InputError& e) {
        return ApiError{400, "invalid_request_error", e.what(), r.schema_field};
      }
    }
    return std::nullopt;
  }

  void completions(const httplib::Request& req, httplib::Response& res, bool chat) {
    ++http_requests;
    if (draining) return send_error(res, {503, "service_unavailable", "the server is shutting down", ""});
    // A slot of the concurrency limit, held until the answer's last byte (a stream's provider
    // keeps a copy): the deleter runs for the null pointer too.
    if (++in_flight > o.max_concurrent) {
      --in_flight;
      res.set_header("Retry-After", "1");
      return send_error(res, {429, "rate_limit_error",
                              fmt::format("{} requests are in flight, this server's limit (--max-concurrent-requests); retry",
                                          o.max_concurrent),
                              ""});
    }
    std::shared_ptr<void> slot(nullptr, [this](void*) { --in_flight; });
    ApiError err;
    std::optional<ApiRequest> parsed = parse_api_request(req.body, chat, err);
    if (!parsed) return send_error(res, err);
    const ApiRequest r = *parsed;
    if (!r.ignored_fields.empty()) {
      std::string names;
      for (const std::string& f : r.ignored_fields) names += (names.empty() ? "" : ", ") + f;
      std::fprintf(stderr, "infer-bench serve: warning: fields ignored (not known to this server): %s\n",
                   dump_json(nlohmann::json(names)).c_str());
    }
    const std::optional<int> adapter = adapter_of(r.model);
    if (!adapter) return send_error(res, unknown_model(r.model));
    if (r.tools.choice == ToolChoice::Auto && o.tool_call_parser.empty())
      return send_error(res, {400, "invalid_request_error",
                              "tool_choice \"auto\" (the default with tools) needs a tool-call parser: start the server with "
                              "--enable-auto-tool-choice --tool-call-parser hermes, or send tool_choice \"required\", "
                              "a function or \"none\"",
                              "tool_choice"});
    Request q;
    std::vector<std::vector<int32_t>> prompts;
    std::shared_ptr<SchemaConstraint> schema;  // response_format's, compiled once for the n choices
    if (std::optional<ApiError> refusal = engine_request(r, *adapter, prompts, q, schema)) return send_error(res, *refusal);
    const int64_t serial = next_id++;
    if (!r.seed_given) q.sampling->seed = 0x5eed0000ULL + static_cast<uint64_t>(serial);
    CompletionReply::Server server{loop, answer_text, o.model_name, fmt::format("call_{}_{}_", call_id_salt, serial),
                                   [this](const std::string& why) { return engine_error(why); }};
    auto reply =
        std::make_shared<CompletionReply>(server, r, std::move(prompts), fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", serial),
                                          static_cast<int64_t>(std::time(nullptr)));
    try {
      reply->submit(q, schema);
    } catch (const InputError& e) {
      return send_error(res, {400, "invalid_request_error", e.what(), r.chat ? "messages" : "prompt"});
    }
    // Listed until the reply is dropped: stop() cancels what is still listed past its grace period.
    std::shared_ptr<void> listed(nullptr, [this, submitted = reply->ids()](void*) {
      std::lock_guard<std::mutex> lock(ids_m);
      for (int64_t id : submitted) ids.erase(id);
    });
    {
      std::lock_guard<std::mutex> lock(ids_m);
      for (int64_t id : reply->ids()) ids.insert(id);
    }
    if (!r.stream) {
      auto answer = reply->whole([] { return HttpConnections::client_gone(); });
      if (std::holds_alternative<CompletionReply::ClientGone>(answer))
        res.status = 499;  // nginx's "client closed request"; written to no one
      else if (const ApiError* e = std::get_if<ApiError>(&answer))
        send_error(res, *e);
      else
        res.set_content(std::get<std::string>(answer), "application/json");
      return;
    }
    // Streamed: the chunks as the choices' tokens arrive, then the usage and [DONE].
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [reply, slot, listed](size_t, httplib::DataSink& sink) {
          if (reply->finished()) return false;
          const std::string out = reply->next_events();
          if (!sink.is_writable()) return false;
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (reply->finished()) sink.done();
          return true;
        },
        [reply](bool success) {
          if (!success || !reply->finished()) reply->cancel_all();  // the client went away: its sequences are returned
        });
  }

  std::string metrics() const {
    const HttpCounters h{http_requests.load(), refused.load(), connections->accepted.load(), connections->cut.load()};
    return prometheus_metrics(loop.counters(), h, o.model_name);
  }

  bool origin_allowed(const std::string& origin) const {
    return std::any_of(o.allowed_origins.begin(), o.allowed_origins.end(),
                       [&](const std::string& a) { return a == "*" || a == origin; });
  }

  // Before a body is read: what no handler should see. A browser page of another site (its
  // Origin, or a Host that is not this loopback server's name: DNS rebinding), a body that is
  // not JSON or is larger than the limit or has no length (chunked: httplib does not bound it),
  // or a compressed one (a decompression bomb).
  httplib::Server::HandlerResponse screen(const httplib::Request& req, httplib::Response& res) {
    // Without a body the request has arrived whole; one with a body has when its handler runs.
    if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) HttpConnections::request_received();
    auto refuse = [&](int status, const char* type, const std::string& message) {
      send_error(res, {status, type, message, ""});
      // The body of a request refused here is never read: left on a kept-alive connection, it
      // would be parsed as the client's next request (a 400 for the request after a 401). The
      // client is told to open a new connection.
      if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.has_header("Origin")) {
      const std::string origin = req.get_header_value("Origin");
      if (!origin_allowed(origin))
        return refuse(403, "permission_error",
                      "requests from a browser page of another origin are refused (--allowed-origins lists the ones to serve)");
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
    }
    if (loopback_only() && req.has_header("Host")) {
      std::string host = req.get_header_value("Host");
      if (host.size() && host[0] == '[')
        host = host.substr(0, host.find(']') + 1);
      else
        host = host.substr(0, host.find(':'));
      if (host != "localhost" && host != "127.0.0.1" && host != "[::1]")
        return refuse(403, "permission_error", "this server listens on the loopback only: its Host must be localhost");
    }
    if (!o.api_key.empty() && req.method != "OPTIONS" && (req.path.rfind("/v1/", 0) == 0 || req.path == "/reset_prefix_cache")) {
      const std::string given = req.get_header_value("Authorization"), want = "Bearer " + o.api_key;
      unsigned diff = given.size() == want.size() ? 0u : 1u;  // compared in a time independent of where they differ
      for (size_t i = 0; i < std::min(given.size(), want.size()); ++i)
        diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(want[i]);
      if (diff != 0)
        return refuse(401, "authentication_error", "a valid API key is needed: Authorization: Bearer <key> (--api-key)");
    }
    if (req.method != "POST") return httplib::Server::HandlerResponse::Unhandled;
    if (req.has_header("Content-Encoding") && req.get_header_value("Content-Encoding") != "identity")
      return refuse(415, "invalid_request_error", "compressed bodies are not accepted (send the JSON as it is)");
    if (req.has_header("Transfer-Encoding"))
      return refuse(411, "invalid_request_error", "a body needs its Content-Length (chunked bodies are not accepted)");
    // A bodiless POST has no type to check (vLLM's clients reset the prefix cache with one; a
    // bodiless completion is refused by its route as no JSON).
    if (req.get_header_value<uint64_t>("Content-Length") == 0) return httplib::Server::HandlerResponse::Unhandled;
    std::string type = req.get_header_value("Content-Type");
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (type.compare(0, 16, "application/json") != 0)
      return refuse(415, "invalid_request_error",
                    "the body must be sent as Content-Type: application/json (curl: -H 'Content-Type: application/json')");
    if (req.get_header_value<uint64_t>("Content-Length") > static_cast<uint64_t>(o.max_body_bytes))
      return refuse(413, "invalid_request_error",
                    fmt::format("the body is larger than this server's limit of {} bytes (--max-body-bytes)", o.max_body_bytes));
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // A route's handler runs once its request's body has been read: the receive deadline is met.
  template <class Handler>
  static auto arrived(Handler h) {
    return [h](const httplib::Request& q, httplib::Response& r) {
      HttpConnections::request_received();
      h(q, r);
    };
  }

  bool loopback_only() const { return o.host == "127.0.0.1" || o.host == "localhost" || o.host == "::1"; }

  void routes() {
    svr.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
    // Each streamed token is a small write: with Nagle's algorithm on, one waits for the client's
    // ACK of the last (up to its delayed-ACK 40 ms) and the client times the wait as latency.
    svr.set_tcp_nodelay(true);
    svr.set_read_timeout(o.read_timeout_s, 0);
    svr.set_write_timeout(o.read_timeout_s, 0);
    svr.set_keep_alive_timeout(std::min(5, o.read_timeout_s));
    svr.new_task_queue = [threads = o.threads, deadline = o.receive_deadline_s, counters = connections] {
      // Idle again: the memory requests freed goes back to the system. glibc keeps freed memory
      // in each thread's arena; after a burst of large bodies or schema compiles the resident
      // size stayed at its peak (3.1 GB after the #48 campaign) though nothing used it.
      return new HttpConnections(threads, deadline, counters, [] { ::malloc_trim(0); });
    };
    // Called once an answer is written, whatever it was: the connection waits for its next request.
    svr.set_logger([](const httplib::Request&, const httplib::Response&) { HttpConnections::answer_written(); });
    // The listening socket, for a real backlog (httplib listens with 5: bursts of clients were reset).
    svr.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = static_cast<int>(sock);
    });
    svr.set_pre_routing_handler([this](const httplib::Request& q, httplib::Response& r) { return screen(q, r); });
    svr.Options(".*", arrived([this](const httplib::Request& q, httplib::Response& r) {
                  // A CORS preflight of an allowed origin (screen() refused the others).
                  r.status = 204;
                  if (q.has_header("Origin")) {
                    r.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                    r.set_header("Access-Control-Allow-Headers", "Content-Type, Authorization");
                    r.set_header("Access-Control-Max-Age", "600");
                  }
                }));
    svr.Post("/v1/completions", arrived([this](const httplib::Request& q, httplib::Response& r) { completions(q, r, false); }));
    svr.Post("/v1/chat/completions",
             arrived([this](const httplib::Request& q, httplib::Response& r) { completions(q, r, true); }));
    svr.Get("/v1/models", arrived([this](const httplib::Request&, httplib::Response& r) {
              std::vector<std::string> adapters;
              for (const auto& a : o.adapters) adapters.push_back(a.first);
              r.set_content(
                  models_json(o.model_name, static_cast<int64_t>(std::time(nullptr)), loop.config().max_positions, adapters),
                  "application/json");
            }));
    svr.Post("/tokenize", arrived([this](const httplib::Request& q, httplib::Response& r) { tokenize(q, r, true); }));
    svr.Post("/detokenize", arrived([this](const httplib::Request& q, httplib::Response& r) { tokenize(q, r, false); }));
    // vLLM's: the prefix cache released (a benchmark's cold runs; a test counting idle blocks).
    svr.Post("/reset_prefix_cache", arrived([this](const httplib::Request&, httplib::Response& r) {
               loop.reset_prefix_cache();
               r.set_content("", "text/plain");
             }));
    svr.Get("/health", arrived([](const httplib::Request&, httplib::Response& r) { r.set_content("", "text/plain"); }));
    svr.Get("/metrics", arrived([this](const httplib::Request&, httplib::Response& r) {
              r.set_content(metrics(), "text/plain; version=0.0.4");
            }));
    svr.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
      // Called for every status >= 400; ours have their body already. The rest are httplib's:
      // an unrouted request, or a request it refused before any handler (its size, its syntax).
      HttpConnections::request_received();
      if (!r.body.empty()) return;
      if (r.status == 404)
        send_error(r, {404, "not_found_error", fmt::format("no route {} {}", q.method, q.path), ""});
      else if (r.status == 413)
        send_error(
            r,
            {413, "invalid_request_error",
             fmt::format("the request is larger than this server's limit of {} bytes (--max-body-bytes)", o.max_body_bytes), ""});
      else
        send_error(r, {r.status, "invalid_request_error", fmt::format("the request was refused (HTTP {})", r.status), ""});
    });
    svr.set_exception_handler([this](const httplib::Request& q, httplib::Response& r, std::exception_ptr ep) {
      // A fault of ours: logged with its reason, answered without it (a library's text may hold
      // the request's bytes and says nothing a client can act on).
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      std::fprintf(stderr, "infer-bench serve: internal error on %s %s: %s\n", q.method.c_str(),
                   dump_json(nlohmann::json(q.path)).c_str(), dump_json(nlohmann::json(what)).c_str());
      send_error(r, {500, "internal_error", "the server failed on this request (its log says why)", ""});
    });
  }
};

HttpServer::HttpServer(EngineLoop& loop, std::shared_ptr<const tokenizer::Tokenizer> tokenizer, HttpOptions o)
    : impl_(std::make_unique<Impl>(loop, std::move(tokenizer), std::move(o))) {
  impl_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& s = impl_->svr;
  const int port = impl_->o.port == 0 ? s.bind_to_any_port(impl_->o.host)
                                      : (s.bind_to_port(impl_->o.host, impl_->o.port) ? impl_->o.port : -1);
  if (port <= 0)
    throw InputError(
        fmt::format("serve: cannot listen on {}:{} (in use, or not an address of this machine)", impl_->o.host, impl_->o.port));
  // listen() again on a listening socket sets its backlog (Linux), capped by net.core.somaxconn.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, 4096);
  return port;
}

void HttpServer::listen() { impl_->svr.listen_after_bind(); }

void HttpServer::stop() {
  Impl& s = *impl_;
  s.draining = true;
  using clock = std::chrono::steady_clock;
  const auto grace =
      clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(s.o.shutdown_grace_s));
  while (s.in_flight > 0 && clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (s.in_flight > 0) {
    std::set<int64_t> ids;
    {
      std::lock_guard<std::mutex> lock(s.ids_m);
      ids = s.ids;
    }
    for (int64_t id : ids) s.loop.cancel(id);  // each answer ends with its error (a stream: an event, then [DONE])
    const auto last = clock::now() + std::chrono::seconds(2);
    while (s.in_flight > 0 && clock::now() < last) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  s.svr.stop();
}

#else

bool http_server_built() { return false; }

struct HttpServer::Impl {};

HttpServer::HttpServer(EngineLoop&, std::shared_ptr<const tokenizer::Tokenizer>, HttpOptions) {
  throw InputError(
      "serve: this binary was built without the HTTP server (cpp-httplib, Debian's libcpp-httplib-dev, not found, or "
      "INFER_BENCH_HTTP=OFF as in the device preset)");
}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { return -1; }
void HttpServer::listen() {}
void HttpServer::stop() {}

#endif

}  // namespace ib::serve
