// infer-bench serve: an OpenAI-compatible HTTP server on the engine (lib/serve/http_server.h),
// bound to 127.0.0.1 unless told otherwise. Ctrl-C stops accepting, lets the requests in flight
// finish, and exits.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "core/backend.h"
#include "core/errors.h"
#include "core/input_file.h"
#include "core/interrupt.h"
#include "core/json_input.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "model/engine_studies.h"
#include "model/lora.h"
#include "model/model_choice.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "tokenizer/tokenizer.h"

namespace ib::app {
namespace {

struct ServeOptions {
  std::string model;
  std::string name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string backend = "auto";
  std::string cpu_matmul = "blas";
  int max_seqs = 16;
  int token_budget = 512;
  int long_prefill = 0;
  int64_t kv_tokens = 0;
  int kv_blocks = 0;
  int block_size = 16;
  bool prefix_caching = false;
  std::string preemption_mode = "recompute";
  double swap_space_gib = 4;  // vLLM's --swap-space
  bool no_chunked_prefill = false;
  std::string speculative_config;  // vLLM's --speculative-config JSON
  serve::HttpOptions http;         // limits and origins (host, port and the model's names are set in serve())
  std::string chat_template = "auto";
  std::string generation_prompt = "assistant:";
  bool auto_tool_choice = false;  // vLLM's --enable-auto-tool-choice (implied by a parser here)
  std::vector<std::string> lora;  // NAME=DIR, each a PEFT adapter a request names by `model`
};

// vLLM's --speculative-config: prompt lookup {"method": "ngram", "num_speculative_tokens": K,
// "prompt_lookup_max": N, "prompt_lookup_min": M}, or a draft model {"model": PATH,
// "num_speculative_tokens": K} (method "draft_model", or none). Returns the draft model's path.
std::string apply_speculative_config(const std::string& text, serve::SchedulerOptions& so) {
  const std::string flag = "serve: --speculative-config";
  nlohmann::json j;
  try {
    j = ib::parse_json<nlohmann::json>(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", flag, e.what()));
  }
  if (!j.is_object()) throw InputError(flag + ": a JSON object, e.g. {\"method\": \"ngram\", \"num_speculative_tokens\": 4}");
  auto count = [&](const char* key, int lo, int hi) {
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      throw InputError(fmt::format("{}: '{}' must be an integer in [{}, {}]", flag, key, lo, hi));
    return v.get<int>();
  };
  std::string method, draft;
  for (const auto& [k, v] : j.items()) {
    if (k == "method") {
      if (v != "ngram" && v != "draft_model")
        throw InputError(fmt::format("{}: method {} is not served (\"ngram\": prompt lookup; \"draft_model\" with \"model\")",
                                     flag, v.dump()));
      method = v.get<std::string>();
    } else if (k == "num_speculative_tokens") {
      so.spec_tokens = count("num_speculative_tokens", 1, 64);
    } else if (k == "prompt_lookup_max") {
      so.spec_ngram_max = count("prompt_lookup_max", 1, 64);
    } else if (k == "prompt_lookup_min") {
      so.spec_ngram_min = count("prompt_lookup_min", 1, 64);
    } else if (k == "model") {
      if (!v.is_string() || v.get<std::string>().empty())
        throw InputError(flag + ": 'model' must be a draft model's path (a checkpoint directory or a GGUF file)");
      draft = v.get<std::string>();
    } else {
      throw InputError(fmt::format(
          "{}: unknown key '{}' (method, model, num_speculative_tokens, prompt_lookup_max, prompt_lookup_min)", flag, k));
    }
  }
  if (method.empty()) method = draft.empty() ? "" : "draft_model";
  if (method.empty() || !j.contains("num_speculative_tokens"))
    throw InputError(flag + ": needs \"num_speculative_tokens\" and \"method\": \"ngram\" or a draft \"model\"");
  if (method == "draft_model" && draft.empty()) throw InputError(flag + ": method \"draft_model\" needs \"model\": PATH");
  if (method == "ngram" && !draft.empty()) throw InputError(flag + ": \"model\" is for method \"draft_model\", not \"ngram\"");
  if (so.spec_ngram_min > so.spec_ngram_max)
    throw InputError(
        fmt::format("{}: prompt_lookup_min {} is above prompt_lookup_max {}", flag, so.spec_ngram_min, so.spec_ngram_max));
  return draft;
}

int serve(const ServeOptions& s) {
  if (!serve::http_server_built())
    throw InputError(
        "serve: this binary was built without the HTTP server (cpp-httplib, Debian's libcpp-httplib-dev, not found, or "
        "INFER_BENCH_HTTP=OFF as in the device preset)");
  const bool gguf = model::is_gguf_checkpoint(s.model);
  if (!gguf && !std::filesystem::is_directory(s.model))
    throw InputError(fmt::format(
        "serve: '{}' is neither a checkpoint directory (config.json, *.safetensors, tokenizer.json) nor a GGUF file", s.model));
  model::ModelChoice m = model::choose_model("checkpoint", s.model, 0, "MODEL", "MODEL");
  auto tok = tokenizer::Tokenizer::load(s.model);
  const Backend backend = resolve_backend(s.backend);
  std::unique_ptr<model::Model> engine;
  if (backend == Backend::Cuda) {
    model::EngineOptions o;
    o.max_batch = s.max_seqs;
    o.max_prefill = std::max(s.token_budget, 16);
    engine = model::make_cuda_model(m.config, *m.weights, o, nullptr);
  } else {
    engine = model::make_cpu_model(m.config, *m.weights, model::parse_cpu_matmul(s.cpu_matmul));
  }
  if (s.kv_blocks > 0 || s.prefix_caching) {
    if ((s.block_size & (s.block_size - 1)) != 0)
      throw InputError(fmt::format("serve: --block-size {} is not a power of two (8, 16, 32, ...)", s.block_size));
    if (s.kv_tokens > 0) throw InputError("serve: --kv-tokens bounds contiguous caches; with --kv-blocks the pool bounds them");
    // Unset: as many blocks as --max-seqs requests of the model's whole context take.
    const int64_t per_request = (m.config.max_positions + s.block_size - 1) / s.block_size;
    const int64_t blocks = s.kv_blocks > 0 ? s.kv_blocks : std::min<int64_t>(int64_t{s.max_seqs} * per_request, 1 << 30);
    try {
      engine->enable_paged_kv(static_cast<int>(blocks), s.block_size);
    } catch (const std::runtime_error& e) {  // no paged cache in this engine, or a pool that does not fit
      throw InputError(
          fmt::format("serve: --kv-blocks {} of {} tokens: {} ({} engine)", blocks, s.block_size, e.what(), to_string(backend)));
    }
  }
  // LoRA adapters, resident before the first request: a request's `model` picks one by name.
  std::vector<std::pair<std::string, int>> adapters;
  for (const std::string& spec : s.lora) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw InputError(fmt::format("serve: --lora '{}': expected NAME=DIR (a PEFT adapter directory)", spec));
    const std::string name = spec.substr(0, eq), dir = spec.substr(eq + 1);
    for (const auto& a : adapters)
      if (a.first == name) throw InputError(fmt::format("serve: --lora '{}': the name is given twice", name));
    model::LoraAdapter a = model::load_peft_adapter(m.config, dir);
    try {
      adapters.emplace_back(name, model::lora_adapters(*engine).add_adapter(a));
    } catch (const InputError&) {
      throw;
    } catch (const std::runtime_error& e) {  // an engine without LoRA support
      throw InputError(fmt::format("serve: --lora '{}': {} ({} engine)", name, e.what(), to_string(backend)));
    }
  }
  serve::SchedulerOptions so;
  so.max_seqs = s.max_seqs;
  so.token_budget = s.token_budget;
  so.long_prefill = s.long_prefill;
  so.kv_tokens = s.kv_tokens;
  so.chunked_prefill = !s.no_chunked_prefill;
  so.prefix_caching = s.prefix_caching;
  if (s.preemption_mode == "swap") {
    if (s.kv_blocks == 0 && !s.prefix_caching)
      throw InputError("serve: --preemption-mode swap: preemption happens on the paged KV cache (give --kv-blocks)");
    so.preemption = serve::Preemption::Swap;
  }
  so.swap_space = static_cast<int64_t>(s.swap_space_gib * static_cast<double>(int64_t{1} << 30));
  // A draft model: loaded as the model is (same backend and products); its vocabulary is checked
  // against the model's by the scheduler.
  std::unique_ptr<model::Model> draft_engine;
  std::optional<model::ModelChoice> draft_choice;
  if (!s.speculative_config.empty()) {
    const std::string draft = apply_speculative_config(s.speculative_config, so);
    if (!draft.empty()) {
      if (!model::is_gguf_checkpoint(draft) && !std::filesystem::is_directory(draft))
        throw InputError(fmt::format(
            "serve: --speculative-config: draft model '{}' is neither a checkpoint directory nor a GGUF file", draft));
      draft_choice = model::choose_model("checkpoint", draft, 0, "--speculative-config model", "--speculative-config model");
      if (backend == Backend::Cuda) {
        model::EngineOptions o;
        o.max_batch = s.max_seqs;
        o.max_prefill = std::max(s.token_budget, 16);
        draft_engine = model::make_cuda_model(draft_choice->config, *draft_choice->weights, o, nullptr);
      } else {
        draft_engine = model::make_cpu_model(draft_choice->config, *draft_choice->weights, model::parse_cpu_matmul(s.cpu_matmul));
      }
      so.draft_model = draft_engine.get();
    }
  }
  serve::EngineLoop loop(*engine, so);
  serve::HttpOptions ho = s.http;
  ho.host = s.host;
  ho.port = s.port;
  ho.model_name = s.name.empty() ? std::filesystem::path(s.model).lexically_normal().filename().string() : s.name;
  if (ho.model_name.empty()) ho.model_name = std::filesystem::weakly_canonical(s.model).filename().string();
  ho.tokenizer_json = gguf ? s.model : (std::filesystem::path(s.model) / "tokenizer.json").string();
  ho.adapters = adapters;
  // auto: the checkpoint's own Jinja template, as transformers and llama.cpp would use it; a file
  // (.jinja): that Jinja template; else the simple {role}/{content} form.
  std::string chat_origin = "the simple template";
  if (s.chat_template == "auto") {
    if (auto t = model::checkpoint_chat_template(s.model)) {
      chat_origin = t->origin();
      ho.jinja = std::make_shared<const model::ChatTemplate>(std::move(*t));
    } else {
      ho.chat_template = "{role}: {content}\n";
      chat_origin = "the simple template (the checkpoint has none)";
    }
  } else if (std::filesystem::path(s.chat_template).extension() == ".jinja") {
    const std::string source = read_input_file(s.chat_template, 1 << 20);
    ho.jinja = std::make_shared<const model::ChatTemplate>(source, "", "", s.chat_template);
    chat_origin = s.chat_template;
  } else {
    ho.chat_template = s.chat_template;
  }
  ho.generation_prompt = s.generation_prompt;
  if (s.auto_tool_choice && ho.tool_call_parser.empty())
    throw InputError("serve: --enable-auto-tool-choice needs --tool-call-parser (hermes): how the model's calls are read");
  serve::HttpServer server(loop, tok, ho);
  const int port = server.bind();
  std::fprintf(stderr, "infer-bench serve: %s (%s, %s engine, %d layers, %zu LoRA adapters) on http://%s:%d/v1\n",
               ho.model_name.c_str(), s.model.c_str(), to_string(backend), m.config.layers, adapters.size(), s.host.c_str(),
               port);
  std::fprintf(stderr, "infer-bench serve: chat requests through %s\n", chat_origin.c_str());
  std::fflush(stderr);
  install_interrupt_handler();
  bool done = false;
  std::thread watcher([&] {
    while (!done && !interrupted()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    server.stop();
  });
  server.listen();  // returns after stop(), once the requests in flight have been answered
  done = true;
  watcher.join();
  loop.stop();
  loop.join();
  const serve::EngineCounters c = loop.counters();
  std::fprintf(stderr, "infer-bench serve: stopped; %lld requests finished, %lld cancelled, %lld tokens generated\n",
               static_cast<long long>(c.finished), static_cast<long long>(c.cancelled), static_cast<long long>(c.output_tokens));
  return interrupted() ? 130 : 0;
}

}  // namespace

void register_serve(Cli& cli) {
  static ServeOptions s;
  auto* sub = cli.app.add_subcommand(
      "serve",
      "An OpenAI-compatible server on the engine: /v1/completions, /v1/chat/completions (streaming), /v1/models, /metrics");
  sub->add_option("model", s.model, "checkpoint directory (config.json, *.safetensors, tokenizer.json)")->required();
  sub->add_option("--served-model-name", s.name, "the model's name in the API (default: the directory's name)");
  sub->add_option("--host", s.host, "address to bind (default 127.0.0.1: this machine only)");
  sub->add_option("--port", s.port, "port (0: any free one; the address is printed on stderr)")->check(CLI::Range(0, 65535));
  sub->add_option("--backend", s.backend, "auto (CUDA when a GPU is usable), cuda or cpu");
  sub->add_option("--cpu-matmul", s.cpu_matmul,
                  "the CPU engine's products (the decode kind's cpu_matmul): blas, int8 (a GGUF's Q8_0/Q4_0/Q4_1 weights "
                  "on int8 activations, as llama.cpp), packed or reference")
      ->check(CLI::IsMember(model::cpu_matmul_names()));
  sub->add_option("--max-seqs", s.max_seqs, "requests running at once (vLLM's --max-num-seqs)")->check(CLI::Range(1, 4096));
  sub->add_option("--token-budget", s.token_budget, "tokens per forward pass (vLLM's --max-num-batched-tokens)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--long-prefill", s.long_prefill,
                  "chunked prefill: prompt tokens one request runs per step at most (0: the budget)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--kv-tokens", s.kv_tokens, "KV-cache positions over all running requests (0: no bound but --max-seqs)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  sub->add_option("--kv-blocks", s.kv_blocks,
                  "paged KV: a pool of this many blocks, taken as sequences grow (admission by free blocks, preemption "
                  "when they run out); 0 with --enable-prefix-caching: --max-seqs requests of the whole context")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--preemption-mode", s.preemption_mode,
                  "paged KV: a preempted request's K/V is dropped and prefilled again (recompute, vLLM's default) or "
                  "copied to host memory and back (swap)")
      ->check(CLI::IsMember({"recompute", "swap"}));
  sub->add_option("--swap-space", s.swap_space_gib,
                  "--preemption-mode swap: GiB of host memory for preempted requests' K/V (past it they recompute)")
      ->check(CLI::Range(0.0, 1024.0));
  sub->add_option("--block-size", s.block_size, "paged KV: tokens per block (vLLM's --block-size)")->check(CLI::Range(1, 1024));
  sub->add_flag("--enable-prefix-caching", s.prefix_caching,
                "keep finished requests' KV blocks; a prompt that starts with one shares them (paged KV)");
  sub->add_flag("--no-chunked-prefill", s.no_chunked_prefill, "whole prompts only (a prompt past --token-budget is refused)");
  sub->add_option("--speculative-config", s.speculative_config,
                  "speculative decoding, vLLM's JSON: prompt lookup '{\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                  "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}' (defaults 4 and 2), or a draft model "
                  "'{\"model\": PATH, \"num_speculative_tokens\": 4}' (its greedy tokens; the model's vocabulary); each decoding "
                  "request drafts and verifies in the batch (one with a response_format under its schema), its output unchanged");
  sub->add_option("--lora", s.lora,
                  "NAME=DIR: a PEFT LoRA adapter resident beside the model, served when a request's model is NAME "
                  "(vLLM's --lora-modules; repeatable)");
  serve::HttpOptions& h = s.http;
  sub->add_option("--max-body-bytes", h.max_body_bytes, "a request body larger than this is refused with 413")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  sub->add_option("--max-concurrent-requests", h.max_concurrent,
                  "completions in flight at once; one more is refused with 429 and Retry-After")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--schema-path", h.schema_path,
                  "how response_format schemas compile: grammar (free values at any depth, recursive $ref), dfa (one "
                  "automaton: free values nested at most 2 levels), auto (the DFA where it cuts nothing off, else the grammar)")
      ->transform(
          CLI::CheckedTransformer(std::map<std::string, constrain::SchemaPath>{{"grammar", constrain::SchemaPath::Grammar},
                                                                               {"dfa", constrain::SchemaPath::Dfa},
                                                                               {"auto", constrain::SchemaPath::Auto}},
                                  CLI::ignore_case));
  sub->add_option("--schema-compile-seconds", h.schema_compile_seconds,
                  "CPU seconds a response_format schema's compile may take: past it the request is refused with 400 (0: "
                  "no budget)")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--max-tokens-limit", h.max_tokens_limit,
                  "a request's max_tokens at most (a larger one is refused with 400; 0: the model's context)")
      ->check(CLI::Range(0, 1 << 30));
  sub->add_option("--http-threads", h.threads, "connections served at once (more wait in the listen backlog)")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--read-timeout", h.read_timeout_s, "seconds a client may stay silent while sending its request")
      ->check(CLI::Range(1, 3600));
  sub->add_option("--receive-deadline", h.receive_deadline_s,
                  "seconds a client has to send a whole request (line, headers, body) from when its connection starts "
                  "waiting for it; slower ones are cut (0: no deadline)")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--shutdown-grace", h.shutdown_grace_s,
                  "seconds requests in flight may take to finish after Ctrl-C before they are cancelled")
      ->check(CLI::Range(0.0, 3600.0));
  sub->add_option("--api-key", h.api_key, "the /v1 routes need Authorization: Bearer KEY (vLLM's --api-key)");
  sub->add_option("--allowed-origins", h.allowed_origins,
                  "browser origins served (CORS), e.g. http://localhost:3000, or * for any; others are refused with 403");
  sub->add_option("--chat-template", s.chat_template,
                  "auto (the checkpoint's own Jinja template: GGUF tokenizer.chat_template or tokenizer_config.json's; "
                  "else \"{role}: {content}\\n\"), a Jinja FILE.jinja, or a chat message as text with {role} and "
                  "{content} replaced");
  sub->add_flag("--enable-auto-tool-choice", s.auto_tool_choice,
                "tool_choice \"auto\": the model chooses whether to call, its calls read by --tool-call-parser (vLLM's "
                "flag; the parser alone implies it)");
  sub->add_option("--tool-call-parser", h.tool_call_parser,
                  "how calls are read from the model's text under tool_choice \"auto\": hermes (<tool_call>{\"name\", "
                  "\"arguments\"}</tool_call>, Qwen's and Hermes' format). Forced calls (required, a named function) are "
                  "constrained and need none")
      ->check(CLI::IsMember({"hermes"}));
  sub->add_option("--generation-prompt", s.generation_prompt,
                  "with a {role}/{content} template: text after the messages, before the reply (default \"assistant:\")");
  sub->callback([&cli] { cli.action = [] { return serve(s); }; });
}

}  // namespace ib::app
