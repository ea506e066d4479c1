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

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "constrain/vocab.h"
#include "core/errors.h"
#include "model/text_prompt.h"
#include "serve/http_connections.h"
#include "serve/openai_api.h"
#include "serve/schema_constraint.h"

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

  Impl(EngineLoop& l, std::shared_ptr<const tokenizer::Tokenizer> t, HttpOptions opt)
      : loop(l), tok(std::move(t)), o(std::move(opt)) {
    eos_ids = loop.config().eos_ids;
    if (eos_ids.empty() && tok->eos_id() >= 0) eos_ids.push_back(tok->eos_id());
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

  // The ids of a choice's tool calls: this prefix and the call's index. The salt, drawn when the
  // server starts, keeps ids apart across restarts (a client keys a conversation's results by them).
  std::string call_id_salt = fmt::format("{:08x}", std::random_device{}());
  std::string call_ids(int64_t serial, std::ptrdiff_t choice) const {
    return fmt::format("call_{}_{}_{}_", call_id_salt, serial, choice);
  }

  // A completion's answer from the tokens received so far: its text (without a final EOS or stop
  // token, cut at a stop sequence), whether a stop sequence ended it, and the tokens it took.
  struct Answer {
    std::string text;
    bool stop_string = false;
    int64_t tokens = 0;
  };
  Answer answer_of(const ApiRequest& r, std::vector<int32_t> tokens, bool ended_at_stop_token) const {
    Answer a;
    a.tokens = static_cast<int64_t>(tokens.size());
    if (ended_at_stop_token && !tokens.empty() &&
        (std::find(eos_ids.begin(), eos_ids.end(), tokens.back()) != eos_ids.end() ||
         std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), tokens.back()) != r.stop_token_ids.end()))
      tokens.pop_back();  // not text
    a.text = tok->decode(tokens, true);
    if (r.stop.empty()) return a;
    const std::optional<size_t> cut = stop_cut(a.text, r.stop, r.include_stop_str);
    if (!cut) return a;
    // The fewest tokens whose text holds the stop sequence: what the request took.
    size_t lo = 1, hi = tokens.size();
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (stop_cut(tok->decode(std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(mid)), true),
                   r.stop, false))
        hi = mid;
      else
        lo = mid + 1;
    }
    a.tokens = static_cast<int64_t>(lo);
    a.text.resize(*cut);
    a.stop_string = true;
    return a;
  }

  // `echo`: the choice's prompt before its text, and its tokens' log-probabilities before the
  // generated ones' (the first null); with max_tokens 0 the generated token is dropped.
  template <class Choice>
  void echo_prompt(const ApiRequest& r, const std::vector<std::vector<int32_t>>& prompts, size_t k, Choice& c,
                   ChoiceText& t) const {
    const size_t p = k / static_cast<size_t>(r.n);
    const std::vector<int32_t>& prompt_ids = prompts[p];
    const std::string prompt = p < r.prompt_ids.size() ? tok->decode(prompt_ids, false) : r.prompts[p - r.prompt_ids.size()];
    if (r.max_tokens == 0) {
      t.text.clear();
      t.logprobs.clear();
      t.finish_reason = "length";
      c.answer.tokens = 0;
    }
    t.text = prompt + t.text;
    if (r.logprobs < 0) return;
    std::vector<TokenLogprobText> scored;
    scored.push_back({tok->decode({prompt_ids[0]}, false), 0, {}, /*known=*/false});
    const std::vector<TokenLogprob> lps = c.stream->prompt_logprobs();
    for (TokenLogprobText& x : logprob_texts(lps, static_cast<int64_t>(lps.size()))) scored.push_back(std::move(x));
    scored.insert(scored.end(), std::make_move_iterator(t.logprobs.begin()), std::make_move_iterator(t.logprobs.end()));
    t.logprobs = std::move(scored);
  }

  // Log-probabilities with their tokens as text (each token decoded alone), at most `count`.
  std::vector<TokenLogprobText> logprob_texts(const std::vector<TokenLogprob>& l, int64_t count) const {
    std::vector<TokenLogprobText> out;
    auto text = [&](int32_t id) { return tok->decode({id}, false); };
    for (size_t i = 0; i < l.size() && static_cast<int64_t>(i) < count; ++i) {
      TokenLogprobText t;
      t.token = text(l[i].token);
      t.logprob = l[i].logprob;
      for (const auto& [id, lp] : l[i].top) t.top.emplace_back(text(id), lp);
      out.push_back(std::move(t));
    }
    return out;
  }

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
    q.adapter = *adapter;
    std::vector<std::vector<int32_t>> prompts;
    try {
      prompts = prompts_of(r);
      q.prompt = prompts[0];
    } catch (const InputError& e) {
      return send_error(res, {400, "invalid_request_error", e.what(), r.chat ? "messages" : "prompt"});
    }
    const int context = loop.config().max_positions;
    q.max_tokens = r.max_tokens;
    if (r.chat && !r.max_tokens_given) q.max_tokens = std::max(1, context - static_cast<int>(q.prompt.size()));
    if (o.max_tokens_limit > 0 && q.max_tokens > o.max_tokens_limit) {
      if (r.max_tokens_given)
        return send_error(res, {400, "invalid_request_error",
                                fmt::format("max_tokens {} is past this server's limit of {} (--max-tokens-limit)", q.max_tokens,
                                            o.max_tokens_limit),
                                "max_tokens"});
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
        return send_error(
            res, {400, "invalid_request_error",
                  fmt::format("logit_bias: token {} is past the vocabulary ({} tokens)", t, loop.config().vocab), "logit_bias"});
    q.sampling = r.sampling;
    std::shared_ptr<SchemaConstraint> schema;  // response_format's, compiled once for the n choices
    if (!r.response_schema.empty()) {
      if (!r.stop.empty() || !r.stop_token_ids.empty())
        return send_error(
            res, {400, "invalid_request_error",
                  fmt::format("stop sequences and stop_token_ids would cut {}'s document: send one or the other", r.schema_field),
                  r.stop.empty() ? "stop_token_ids" : "stop"});
      if (!vocab) return send_error(res, {400, "invalid_request_error", r.schema_field + ": " + vocab_problem, r.schema_field});
      try {
        auto c = compile(r.response_schema);
        if (q.max_tokens < c->min_tokens())
          return send_error(res, {400, "invalid_request_error",
                                  fmt::format("max_tokens {} is fewer than the shortest document of the schema takes ({})",
                                              q.max_tokens, c->min_tokens()),
                                  "max_tokens"});
        q.constraint = schema = std::move(c);
        q.eos = vocab->eos;  // the constraint allows EOS where the document is complete
      } catch (const InputError& e) {
        return send_error(res, {400, "invalid_request_error", e.what(), r.schema_field});
      }
    }
    const int64_t serial = next_id++;
    if (!r.seed_given) q.sampling->seed = 0x5eed0000ULL + static_cast<uint64_t>(serial);
    int64_t prompt_tokens = 0;
    for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
    // `n` choices of each prompt: each its own request of the engine (seed + i), batched with the
    // others; prompt p's choice i at index p·n + i.
    struct Choice {
      int64_t id = 0;
      std::shared_ptr<RequestStream> stream;
      std::vector<int32_t> tokens;
      size_t sent = 0;
      size_t tokens_sent = 0;  // streamed: tokens a chunk has been sent for
      bool first = true, ended = false;
      Answer answer;
      size_t logprobs_sent = 0, logprobs_offset = 0;  // streamed: tokens whose log-probabilities went out, their bytes
    };
    auto choices = std::make_shared<std::vector<Choice>>(prompts.size() * static_cast<size_t>(r.n));
    auto cancel_all = [this, choices] {
      for (const Choice& c : *choices)
        if (c.stream) loop.cancel(c.id);
    };
    for (size_t k = 0; k < choices->size(); ++k) {
      const size_t i = k % static_cast<size_t>(r.n);
      Request qi = q;
      qi.prompt = prompts[k / static_cast<size_t>(r.n)];
      qi.sampling->seed = q.sampling->seed + static_cast<uint64_t>(i);
      // Its own document of the schema compiled once (the masks' caches shared too).
      if (schema && k > 0) qi.constraint = std::make_shared<SchemaConstraint>(schema->compiled());
      Choice& c = (*choices)[k];
      try {
        c.stream = loop.submit(std::move(qi), &c.id);
      } catch (const InputError& e) {
        cancel_all();
        return send_error(res, {400, "invalid_request_error", e.what(), r.chat ? "messages" : "prompt"});
      }
      std::lock_guard<std::mutex> lock(ids_m);
      ids.insert(c.id);
    }
    std::shared_ptr<void> listed(nullptr, [this, choices](void*) {
      std::lock_guard<std::mutex> lock(ids_m);
      for (const Choice& c : *choices) ids.erase(c.id);
    });
    const std::string rid = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", serial);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    // The usage so far: the answers' tokens, and what speculation drafted and kept for them.
    auto usage = [choices, prompt_tokens] {
      Usage u{prompt_tokens, 0};
      for (const Choice& c : *choices) {
        u.completion_tokens += c.answer.tokens;
        if (!c.stream) continue;
        const auto [drafted, kept] = c.stream->speculation();
        u.draft_tokens += drafted;
        u.accepted_tokens += kept;
      }
      return u;
    };
    if (!r.stream) {
      std::vector<ChoiceText> out;
      for (Choice& c : *choices) {
        bool done = false;
        while (!(done = c.stream->wait(c.tokens.size(), c.tokens, 0.25))) {
          if (HttpConnections::client_gone()) {
            // Nobody would read the answer: its sequences go back to the engine now, not at the end.
            cancel_all();
            res.status = 499;  // nginx's "client closed request"; written to no one
            return;
          }
          if (!r.stop.empty() && answer_of(r, c.tokens, false).stop_string) break;
        }
        c.answer = answer_of(r, c.tokens, done && c.stream->stopped());
        if (!done) loop.cancel(c.id);  // a stop sequence ended it: the rest is not generated
        if (!c.answer.stop_string && !c.stream->error().empty()) {
          cancel_all();
          return send_error(res, engine_error(c.stream->error()));
        }
        const std::string ended = c.answer.stop_string || c.stream->stopped() ? "stop" : "length";
        ChoiceText t{c.answer.text, ended,
                     r.logprobs >= 0 ? logprob_texts(c.stream->logprobs(0), c.answer.tokens) : std::vector<TokenLogprobText>{}};
        if (r.echo) echo_prompt(r, prompts, static_cast<size_t>(&c - choices->data()), c, t);
        if (r.chat && r.tools.choice != ToolChoice::None) {  // the text read back as tool calls
          ToolOutput calls = read_tool_output(r.tools, c.answer.text, call_ids(serial, &c - choices->data()));
          t.finish_reason = tool_finish_reason(r.tools, calls, ended);
          t.text = std::move(calls.content);
          t.tool_calls = std::move(calls.calls);
          t.content_null = calls.content_null;
        }
        out.push_back(std::move(t));
      }
      res.set_content(completion_json(r, rid, created, o.model_name, out, usage()), "application/json");
      return;
    }
    // Streamed: each choice's new text as a chunk of its index, its finish reason when it ends;
    // then the usage and [DONE]. The provider waits in short slices so that a closed connection
    // is noticed between tokens.
    res.set_header("Cache-Control", "no-cache");
    auto finished = std::make_shared<bool>(false);
    const auto echoed = std::make_shared<const std::vector<std::vector<int32_t>>>(r.echo ? prompts : decltype(prompts){});
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, choices, r, rid, created, slot, listed, finished, usage, serial, echoed](size_t, httplib::DataSink& sink) {
          if (*finished) return false;
          bool waited = false, all_ended = true;
          std::string out;
          for (size_t i = 0; i < choices->size(); ++i) {
            Choice& c = (*choices)[i];
            if (c.ended) continue;
            const bool done = c.stream->wait(c.tokens.size(), c.tokens, waited ? 0.0 : 0.25);
            waited = true;
            const bool stopped = done && c.stream->stopped();
            c.answer = answer_of(r, c.tokens, stopped);
            const bool end = done || c.answer.stop_string;
            // Text that may yet turn out to start a stop sequence is held back until it does not.
            size_t limit = end || r.stop.empty() ? c.answer.text.size() : stop_safe_end(c.answer.text, r.stop);
            // With tools the model may choose: content until a call's tag (the calls are sent whole
            // at the end); required: all of it is the calls' array.
            const ToolChoice tools = r.chat ? r.tools.choice : ToolChoice::None;
            if (tools == ToolChoice::Auto) limit = std::min(limit, hermes_content_end(c.answer.text));
            if (tools == ToolChoice::Required) limit = 0;
            const std::string delta = text_delta(c.answer.text.substr(0, limit), c.sent, end);
            const int index = static_cast<int>(i);
            // The log-probabilities of the tokens received since the last chunk (of the answer's tokens).
            std::vector<TokenLogprobText> lps;
            if (r.logprobs >= 0) {
              std::vector<TokenLogprob> fresh = c.stream->logprobs(c.logprobs_sent);
              lps = logprob_texts(fresh, c.answer.tokens - static_cast<int64_t>(c.logprobs_sent));
            }
            // A chunk for every token that arrived, even one whose text is held back (a character's
            // bytes not yet complete, a stop string not yet ruled out), so a client times each
            // token as vLLM's server lets it; none before the first token (a client takes its
            // first chunk as the time to first token).
            if (!delta.empty() || c.tokens.size() > c.tokens_sent || (c.first && end) || !lps.empty()) {
              c.tokens_sent = c.tokens.size();
              const size_t generated_lps = lps.size();
              // echo: the prompt and its tokens' log-probabilities ahead of the first chunk's own;
              // with max_tokens 0 the one generated token is not shown (nor counted).
              ChoiceText shown{delta, "", std::move(lps)};
              if (r.echo && c.first) echo_prompt(r, *echoed, i, c, shown);
              if (r.echo && r.max_tokens == 0 && !c.first) shown = ChoiceText{};
              lps = std::move(shown.logprobs);
              const Usage so_far = usage();
              if (tools == ToolChoice::Named)  // the text is the call's arguments, streamed as they come
                out += tool_calls_chunk(
                    r, rid, created, o.model_name,
                    {{0, c.first ? call_ids(serial, static_cast<std::ptrdiff_t>(i)) + "0" : "", r.tools.named, shown.text}},
                    c.first, so_far, index, &lps, c.logprobs_offset);
              else if (tools == ToolChoice::Required)
                out += tool_calls_chunk(r, rid, created, o.model_name, {}, c.first, so_far, index, &lps, c.logprobs_offset);
              else
                out +=
                    stream_chunk(r, rid, created, o.model_name, shown.text, "", c.first, so_far, index, &lps, c.logprobs_offset);
              c.first = false;
              c.logprobs_sent += generated_lps;
              for (const TokenLogprobText& t : lps) c.logprobs_offset += t.token.size();
            }
            if (!end) {
              all_ended = false;
              continue;
            }
            c.ended = true;
            if (!done) loop.cancel(c.id);  // a stop sequence ended it: the rest is not generated
            if (!c.answer.stop_string && !c.stream->error().empty()) {
              out += "data: " + error_json(engine_error(c.stream->error())) + "\n\n";
              continue;
            }
            std::string ended = c.answer.stop_string || stopped ? "stop" : "length";
            if (r.echo && r.max_tokens == 0) ended = "length";  // the prompt scored, as unstreamed
            if (tools == ToolChoice::Auto || tools == ToolChoice::Required) {
              // The calls, whole, after what content was sent; a text that holds none is content.
              const ToolOutput calls = read_tool_output(r.tools, c.answer.text, call_ids(serial, static_cast<std::ptrdiff_t>(i)));
              const std::string& content = calls.calls.empty() ? c.answer.text : calls.content;
              const std::string rest = text_delta(content, c.sent, true);
              if (!rest.empty()) out += stream_chunk(r, rid, created, o.model_name, rest, "", false, usage(), index);
              std::vector<ToolCallDelta> whole;
              for (const ToolCall& t : calls.calls) whole.push_back({static_cast<int>(whole.size()), t.id, t.name, t.arguments});
              if (!whole.empty()) out += tool_calls_chunk(r, rid, created, o.model_name, whole, false, usage(), index);
              ended = tool_finish_reason(r.tools, calls, ended);
            }
            out += stream_chunk(r, rid, created, o.model_name, "", ended, false, usage(), index);
          }
          if (!sink.is_writable()) return false;
          if (all_ended) {
            if (r.include_usage) out += usage_chunk(r, rid, created, o.model_name, usage());
            out += "data: [DONE]\n\n";
            *finished = true;
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          if (*finished) sink.done();
          return true;
        },
        [cancel_all, finished](bool success) {
          if (!success || !*finished) cancel_all();  // the client went away: its sequences are returned
        });
  }

  std::string metrics() const {
    const EngineCounters c = loop.counters();
    std::string s;
    auto add = [&](const char* name, const char* type, const char* help, double v) {
      s += fmt::format("# HELP infer_bench_{} {}\n# TYPE infer_bench_{} {}\ninfer_bench_{}{{model_name=\"{}\"}} {}\n", name, help,
                       name, type, name, o.model_name, v);
    };
    add("requests_submitted_total", "counter", "requests the engine accepted", static_cast<double>(c.submitted));
    add("requests_finished_total", "counter", "requests that ended at EOS or max_tokens", static_cast<double>(c.finished));
    add("requests_cancelled_total", "counter", "requests whose client went away", static_cast<double>(c.cancelled));
    add("requests_failed_total", "counter", "requests the engine failed", static_cast<double>(c.failed));
    add("requests_refused_total", "counter", "requests answered with an error status", static_cast<double>(refused.load()));
    add("http_requests_total", "counter", "completion requests received", static_cast<double>(http_requests.load()));
    add("http_connections_total", "counter", "connections accepted", static_cast<double>(connections->accepted.load()));
    add("http_connections_cut_total", "counter", "connections closed for not sending a whole request by --receive-deadline",
        static_cast<double>(connections->cut.load()));
    add("prompt_tokens_total", "counter", "prompt tokens accepted", static_cast<double>(c.prompt_tokens));
    add("generation_tokens_total", "counter", "tokens generated", static_cast<double>(c.output_tokens));
    add("engine_steps_total", "counter", "forward passes of the scheduler", static_cast<double>(c.steps));
    add("num_requests_running", "gauge", "requests in the running batch", c.running);
    add("num_requests_waiting", "gauge", "requests queued", c.waiting);
    add("kv_reserved_tokens", "gauge", "KV-cache positions reserved by running requests", static_cast<double>(c.kv_reserved));
    if (c.kv_blocks_total > 0) {
      add("kv_blocks_used", "gauge", "paged KV blocks in use (running requests and cached prefixes)", c.kv_blocks_used);
      add("kv_blocks_total", "gauge", "paged KV blocks in the pool", c.kv_blocks_total);
      add("prefix_cache_entries", "gauge", "finished requests' sequences kept for prefix caching", c.cached_prefixes);
      add("prefix_cache_queries_total", "counter", "prompt tokens of admitted requests",
          static_cast<double>(c.prefix_query_tokens));
      add("prefix_cache_hits_total", "counter", "of those, found in the prefix cache", static_cast<double>(c.prefix_hit_tokens));
      add("num_preemptions_total", "counter", "running requests preempted for blocks (recomputed later)",
          static_cast<double>(c.preemptions));
    }
    add("spec_decode_draft_tokens_total", "counter", "tokens drafted by prompt lookup and verified (speculative decoding)",
        static_cast<double>(c.spec_drafted));
    add("spec_decode_accepted_tokens_total", "counter", "of those, kept", static_cast<double>(c.spec_accepted));
    // The same under vLLM's names, with its latency histograms, for dashboards made for vLLM.
    std::string label;
    for (char ch : o.model_name)
      label += ch == '"' || ch == '\\' ? std::string("\\") + ch : ch == '\n' ? "\\n" : std::string(1, ch);
    const std::string labels = fmt::format("model_name=\"{}\"", label);
    auto vllm = [&](const char* name, const char* type, const char* help, double v) {
      s += fmt::format("# HELP vllm:{} {}\n# TYPE vllm:{} {}\nvllm:{}{{{}}} {}\n", name, help, name, type, name, labels, v);
    };
    vllm("num_requests_running", "gauge", "requests in the running batch", c.running);
    vllm("num_requests_waiting", "gauge", "requests queued", c.waiting);
    vllm("prompt_tokens_total", "counter", "prompt tokens accepted", static_cast<double>(c.prompt_tokens));
    vllm("generation_tokens_total", "counter", "tokens generated", static_cast<double>(c.output_tokens));
    vllm("num_preemptions_total", "counter", "requests preempted", static_cast<double>(c.preemptions));
    vllm("spec_decode_num_draft_tokens_total", "counter", "draft tokens verified", static_cast<double>(c.spec_drafted));
    vllm("spec_decode_num_accepted_tokens_total", "counter", "of those, accepted", static_cast<double>(c.spec_accepted));
    if (c.kv_blocks_total > 0) {
      vllm("kv_cache_usage_perc", "gauge", "fraction of the paged KV blocks in use (1 = all)",
           static_cast<double>(c.kv_blocks_used) / c.kv_blocks_total);
      vllm("prefix_cache_queries_total", "counter", "prompt tokens looked up in the prefix cache",
           static_cast<double>(c.prefix_query_tokens));
      vllm("prefix_cache_hits_total", "counter", "of those, found", static_cast<double>(c.prefix_hit_tokens));
    }
    s += prometheus_histogram("vllm:time_to_first_token_seconds", "time from a request's arrival to its first token", labels,
                              c.ttft);
    s += prometheus_histogram("vllm:inter_token_latency_seconds", "time between a request's tokens", labels, c.itl);
    s += prometheus_histogram("vllm:time_per_output_token_seconds", "a request's time per token after its first", labels, c.tpot);
    s += prometheus_histogram("vllm:e2e_request_latency_seconds", "time from a request's arrival to its last token", labels,
                              c.e2e);
    s += prometheus_histogram("vllm:request_queue_time_seconds", "time a request waited before its first forward pass", labels,
                              c.queue);
    return s;
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
