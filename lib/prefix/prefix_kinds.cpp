// The `prefix` experiment kinds (§8.4, prefix caching):
//   prefix-system-prompt  the chapter's agent case: TTFT of a request behind a warm cache
//   prefix-mixed          a server's mixed load replayed in arrival order: hit rate, TTFT p50/p99,
//                         memory held, evictions, over a capacity sweep
//   prefix-cost           API prompt-caching prices applied to the hits of the same workloads
// Variants: none (every request fully prefilled), block_hash (vLLM's automatic prefix caching),
// radix (SGLang's RadixAttention), on the engine of the backend (CPU: cpu_*). prefix-cost is host
// arithmetic over the caches' bookkeeping (no engine): its variants are host variants.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/registry.h"
#include "core/stats.h"
#include "core/units.h"
#include "model/decode_variants.h"
#include "model/text_prompt.h"
#include "prefix/prefix_server.h"
#include "prefix/workload.h"

namespace ib::prefix {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }


double median_of(const std::vector<double>& v) { return v.empty() ? 0.0 : summarize(v).median; }
double percentile_of(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, q);
}

constexpr int64_t kUnbounded = int64_t{1} << 40;

// ---- keys ----

std::vector<KeySpec> model_keys() {
  std::vector<std::string> models = model::preset_names();
  models.push_back("checkpoint");
  return {enum_key("model", "engine preset (random weights unless `weights`), or checkpoint (weights: DIR)", "tiny", models),
          key_spec("weights", ParamType::String, "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
                   Value(std::string("random"))),
          model::matmul_key()};
}

KeySpec block_size_key() {
  return key_spec("block_size", ParamType::Int, "tokens per cached block (block_hash; vLLM's default 16)", Value(int64_t{16}), 1.0, 1024.0);
}

std::vector<KeySpec> system_prompt_keys(bool for_cost) {
  std::vector<KeySpec> k = {
      key_spec("system_prompt", ParamType::Int, for_cost ? "shared system prompt tokens (workload system-prompt)" : "shared system prompt tokens",
               Value(int64_t{2000}), 0.0),
      key_spec("query_min", ParamType::Int, "fewest tokens of a request's own query", Value(int64_t{7}), 1.0),
      key_spec("query_max", ParamType::Int, "most tokens of a request's own query", Value(int64_t{10}), 1.0),
  };
  return k;
}

std::vector<KeySpec> mixed_keys() {
  return {
      key_spec("requests", ParamType::Int, "requests in the trace", Value(int64_t{200}), 1.0),
      key_spec("tenants", ParamType::Int, "tenants, each with its own system prompt and few-shot examples", Value(int64_t{4}), 1.0, 1000.0),
      key_spec("mean_system_prompt", ParamType::Int, "mean system prompt tokens (tenant t's: 0.5 … 1.5 × this, spread evenly)",
               Value(int64_t{1000}), 1.0),
      key_spec("user_tokens", ParamType::Int, "mean tokens of a user message or question (0.5 … 1.5 × this)", Value(int64_t{40}), 1.0),
      key_spec("reply_tokens", ParamType::Int, "mean tokens of an assistant reply carried into the next chat turn (not decoded)",
               Value(int64_t{120}), 1.0),
      key_spec("max_turns", ParamType::Int, "turns of a chat", Value(int64_t{6}), 1.0),
      key_spec("fewshot_tokens", ParamType::Int, "a tenant's few-shot examples (after its system prompt)", Value(int64_t{600}), 0.0),
      key_spec("chat_share", ParamType::Float, "fraction of requests that are chat turns", Value(0.5), 0.0, 1.0),
      key_spec("fewshot_share", ParamType::Float, "fraction of requests that are few-shot prompts (the rest: system prompt + question)",
               Value(0.25), 0.0, 1.0),
  };
}

// Spec-time checks across the workload keys a kind has: every query_min at most every query_max;
// chat_share + fewshot_share at most 1 wherever a mixed workload reads them.
std::optional<KeyProblem> check_workload_keys(const std::map<std::string, std::vector<Value>>& values) {
  auto all = [&](const char* key) {
    auto it = values.find(key);
    return it == values.end() ? std::vector<Value>{} : it->second;
  };
  for (const Value& lo : all("query_min"))
    for (const Value& hi : all("query_max"))
      if (std::get<int64_t>(lo) > std::get<int64_t>(hi))
        return KeyProblem{{"query_max", "query_min"},
                          fmt::format("query_max {} is below query_min {}", std::get<int64_t>(hi), std::get<int64_t>(lo))};
  const auto workloads = all("workload");
  const bool mixed = workloads.empty() || std::any_of(workloads.begin(), workloads.end(),
                                                      [](const Value& w) { return std::get<std::string>(w) == "mixed"; });
  if (mixed)
    for (const Value& chat : all("chat_share"))
      for (const Value& fewshot : all("fewshot_share"))
        if (std::get<double>(chat) + std::get<double>(fewshot) > 1.0 + 1e-9)
          return KeyProblem{{"fewshot_share", "chat_share"}, fmt::format("chat_share {} + fewshot_share {} exceeds 1", format_number(std::get<double>(chat)),
                                                                         format_number(std::get<double>(fewshot)))};
  return std::nullopt;
}

MixedOptions mixed_options(const Point& p) {
  MixedOptions o;
  o.requests = static_cast<int>(p.integer("requests"));
  o.tenants = static_cast<int>(p.integer("tenants"));
  o.system_prompt = static_cast<int>(p.integer("mean_system_prompt"));
  o.user_tokens = static_cast<int>(p.integer("user_tokens"));
  o.reply_tokens = static_cast<int>(p.integer("reply_tokens"));
  o.max_turns = static_cast<int>(p.integer("max_turns"));
  o.fewshot_tokens = static_cast<int>(p.integer("fewshot_tokens"));
  o.chat_share = p.number("chat_share");
  o.fewshot_share = p.number("fewshot_share");
  if (o.chat_share + o.fewshot_share > 1.0 + 1e-9) throw InputError("chat_share + fewshot_share must not exceed 1");
  return o;
}

const char* kind_label(CacheKind k) {
  switch (k) {
    case CacheKind::None: return "every request fully prefilled (the baseline)";
    case CacheKind::BlockHash: return "vLLM-style automatic prefix caching: chained 128-bit block hashes, ref counts, LRU free queue";
    case CacheKind::Radix: return "SGLang-style RadixAttention: radix tree, token-granular matches, LRU leaf eviction";
  }
  return "";
}

// ---- the engine side shared by system-prompt and mixed ----

struct Engine {
  model::ModelConfig config;
  std::unique_ptr<model::Model> model;
  double kv_bytes_per_token = 0;

  void build(const Point& p, Backend backend, BackendRuntime& rt, uint64_t seed, int max_prompt) {
    model::ModelChoice m = model::choose_model(p, seed);
    config = m.config;
    if (max_prompt > config.max_positions)
      throw InputError(fmt::format("a {}-token prompt exceeds {}'s {} positions", max_prompt, config.name, config.max_positions));
    if (backend == Backend::Cuda) {
      model::EngineOptions o;
      o.matmul = model::matmul_of(p);
      o.max_batch = 1;
      o.max_prefill = std::min(std::max(max_prompt, 16), 8192);
      model = model::make_cuda_model(config, *m.weights, o, rt.stream());
    } else {
      model = model::make_cpu_model(config, *m.weights);
    }
    kv_bytes_per_token = static_cast<double>(config.kv_elems_per_token()) * (backend == Backend::Cuda ? 2.0 : 4.0);
  }
  std::vector<float> full_prefill_logits(const std::vector<int32_t>& t) {
    std::vector<float> l(static_cast<size_t>(config.vocab));
    const int s = model->new_sequence(static_cast<int>(t.size()));
    model::StepOutput out;
    out.logits = l.data();
    model->prefill(s, t.data(), static_cast<int>(t.size()), 1, out);
    model->release(s);
    return l;
  }
};

ServerOptions server_options(const Point& p, CacheKind kind, int64_t default_capacity) {
  ServerOptions o;
  o.kind = kind;
  if (const Param* b = p.find("block_size")) o.block_size = static_cast<int>(std::get<int64_t>(b->value));
  int64_t cap = 0;
  if (const Param* c = p.find("capacity")) cap = std::get<int64_t>(c->value);
  o.capacity_tokens = cap > 0 ? cap : default_capacity;
  return o;
}

std::string argmax_note(const std::vector<float>& a, const std::vector<float>& b) {
  const auto ia = std::max_element(a.begin(), a.end()) - a.begin(), ib = std::max_element(b.begin(), b.end()) - b.begin();
  return ia == ib ? "same argmax" : "argmax differs";
}

// ---- prefix-system-prompt ----

// The system prompt and the queries as text (system_text or system_file, queries), in place of
// the random system_prompt / query_min..query_max tokens.
std::vector<KeySpec> system_prompt_text_keys() {
  return {
      key_spec("system_text", ParamType::String,
               "the shared system prompt as text, tokenized with `tokenizer` (BOS as its post-processor adds it); replaces the "
               "random `system_prompt` tokens",
               Value(std::string())),
      key_spec("system_file", ParamType::String, "a file whose whole text is the system prompt (as system_text)", Value(std::string())),
      key_spec("queries", ParamType::String,
               "a JSONL file of {\"prompt\": text}: request i's own query is line i mod lines, tokenized without special tokens; "
               "replaces the random query_min..query_max tokens (needs system_text or system_file)",
               Value(std::string())),
      model::tokenizer_key_spec(),
  };
}

struct SystemPromptTexts {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
  std::string system;
  std::vector<int32_t> system_tokens;
  std::vector<std::vector<int32_t>> queries;
};

const std::string& text_key(const Point& p, const char* key) {
  static const std::string empty;
  return p.find(key) ? p.text(key) : empty;
}

// nullopt when the point gives no system text. InputError naming the key for what cannot be read.
std::optional<SystemPromptTexts> system_prompt_texts(const Point& p) {
  const std::string &text = text_key(p, "system_text"), &file = text_key(p, "system_file"), &queries = text_key(p, "queries");
  if (text.empty() && file.empty()) {
    if (!queries.empty()) throw InputError("queries: needs system_text or system_file (the shared prompt they follow)");
    return std::nullopt;
  }
  if (!text.empty() && !file.empty()) throw InputError("system_text, system_file: give one of them");
  SystemPromptTexts t;
  t.system = !text.empty() ? text : model::read_prompt_file("system_file", file);
  t.tokenizer = model::prompt_tokenizer(text_key(p, "tokenizer").empty() ? "auto" : text_key(p, "tokenizer"), p.text("weights"));
  t.system_tokens = t.tokenizer->encode(t.system, true);
  if (queries.empty()) throw InputError("queries: a text system prompt needs its queries as text too (a JSONL of {\"prompt\": ...})");
  for (const auto& q : model::read_prompt_lines(queries, "")) {
    std::vector<int32_t> ids = t.tokenizer->encode(q, false);
    if (ids.empty()) throw InputError(fmt::format("queries: '{}' encodes to no tokens", model::short_text(q)));
    t.queries.push_back(std::move(ids));
  }
  return t;
}

void check_ids(const SystemPromptTexts& t, int vocab) {
  auto check = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
      if (id < 0 || id >= vocab)
        throw InputError(fmt::format("tokenizer: {} gives token id {}, past the model's vocabulary of {}", t.tokenizer->name(), id, vocab));
  };
  check(t.system_tokens);
  for (const auto& q : t.queries) check(q);
}

// Spec time: every value of the text keys reads and tokenizes (KindInfo::check).
std::optional<KeyProblem> check_system_prompt_texts(const std::map<std::string, std::vector<Value>>& values) {
  auto all = [&](const char* key) {
    std::vector<std::string> out;
    if (auto it = values.find(key); it != values.end())
      for (const Value& v : it->second) out.push_back(std::get<std::string>(v));
    return out;
  };
  try {
    for (const auto& text : all("system_text"))
      for (const auto& file : all("system_file"))
        for (const auto& queries : all("queries"))
          for (const auto& tok : all("tokenizer"))
            for (const auto& weights : all("weights")) {
              if (text.empty() && file.empty() && queries.empty()) continue;
              Point p;
              for (const auto& [k, v] : std::map<std::string, std::string>{
                       {"system_text", text}, {"system_file", file}, {"queries", queries}, {"tokenizer", tok}, {"weights", weights}})
                p.params.push_back(Param{k, Value(v), ParamType::String});
              system_prompt_texts(p);
            }
  } catch (const InputError& e) {
    return KeyProblem{{"system_text", "queries"}, e.what()};
  }
  return std::nullopt;
}

class SystemPromptVariant : public Variant {
 public:
  SystemPromptVariant(Backend b, CacheKind k) : backend_(b), kind_(k) {}

  std::string unsupported(const Point& p) const override {
    const auto c = model::preset(p.text("model"));
    const int64_t longest = p.integer("system_prompt") + p.integer("query_max");
    if (c && longest > c->max_positions) return fmt::format("a {}-token request exceeds {}'s {} positions", longest, c->name, c->max_positions);
    return {};
  }

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    int s = static_cast<int>(p.integer("system_prompt"));
    int qmin = static_cast<int>(p.integer("query_min")), qmax = static_cast<int>(p.integer("query_max"));
    if (qmax < qmin) throw InputError("query_max must be at least query_min");
    text_ = system_prompt_texts(p);
    if (text_) {  // the text's lengths, not the keys'
      s = static_cast<int>(text_->system_tokens.size());
      qmax = 0;
      for (const auto& q : text_->queries) qmax = std::max(qmax, static_cast<int>(q.size()));
    }
    engine_.build(p, backend_, rt, seed, s + qmax);
    if (text_) {
      check_ids(*text_, engine_.config.vocab);
      workload_ = std::make_unique<SystemPromptWorkload>(text_->system_tokens, text_->queries);
    } else {
      workload_ = std::make_unique<SystemPromptWorkload>(engine_.config.vocab, s, qmin, qmax, seed);
    }
    // Default capacity: the system prompt and 8 blocks more, so the per-request tails cycle
    // through LRU eviction instead of piling up holders.
    const ServerOptions so = server_options(p, kind_, s + 128);
    block_size_ = so.block_size;
    server_ = std::make_unique<PrefixServer>(*engine_.model, so);
    qps_ = p.find("qps") ? p.number("qps") : 0;
    reference_runs_ = p.find("reference_runs") ? static_cast<int>(p.integer("reference_runs")) : 0;
  }

  Validation validate(BackendRuntime& rt) override {
    const double tol = backend_ == Backend::Cpu ? 1e-4 : 1e-2;
    int32_t tok = 0;
    // The uncached reference the saved time is computed from: full prefills of requests of the
    // same shape, timed like the samples (host clock to the first token on the host).
    // Untimed prefills warm the new engine up first (at least 3 and 0.5 s: right after a model is
    // built, the first prefills ran up to 3× slower on our CPU machine), as the runner's warmup
    // does for the baseline row.
    if (kind_ != CacheKind::None) {
      const auto warm_start = Clock::now();
      for (int i = 0; static_cast<int>(uncached_ms_.size()) < reference_runs_; ++i) {
        const bool timed = i >= 3 && ms_since(warm_start) >= 500.0;
        const auto t = workload_->request(next_++);
        const auto t0 = Clock::now();
        const int seq = engine_.model->new_sequence(static_cast<int>(t.size()));
        engine_.model->prefill(seq, t.data(), static_cast<int>(t.size()), 1, {nullptr, &tok});
        if (timed) uncached_ms_.push_back(ms_since(t0));
        engine_.model->release(seq);
      }
    }
    // The first request warms the cache; the second must hit the whole system prompt and give
    // the logits of a full prefill.
    const auto warm = workload_->request(next_++);
    Served w = server_->serve(warm.data(), static_cast<int>(warm.size()), 0, {nullptr, &tok});
    server_->finish(w);
    const auto probe = workload_->request(next_++);
    const int n = static_cast<int>(probe.size());
    std::vector<float> cached(static_cast<size_t>(engine_.config.vocab));
    Served s = server_->serve(probe.data(), n, 0, {cached.data(), &tok});
    const int hit = s.hit;
    server_->finish(s);
    rt.synchronize();
    const std::vector<float> full = engine_.full_prefill_logits(probe);
    const int sp = workload_->system_prompt();
    // What the warm request must have left: the system prompt's full blocks (block_hash) or all
    // of it (radix), as far as the capacity allows; the last token is always prefilled.
    const int64_t cap = server_->capacity_tokens();
    int expect = 0;
    if (kind_ == CacheKind::BlockHash) expect = static_cast<int>(std::min<int64_t>(std::min(sp, n - 1), cap) / block_size_ * block_size_);
    else if (kind_ == CacheKind::Radix) expect = static_cast<int>(std::min<int64_t>(std::min(sp, n - 1), cap));
    if (hit < expect)
      return {false, "hit_tokens", static_cast<double>(hit), static_cast<double>(expect),
              fmt::format("the second request reused {} tokens of the {}-token system prompt", hit, sp)};
    if (std::string e = server_->check(); !e.empty()) return {false, "invariants", 1, 0, e};
    const double err = relative_l2(cached, full);
    return {err <= tol, "rel_l2", err, tol,
            fmt::format("a {}-token request served with {} cached tokens vs a full prefill ({}); cache invariants hold", n, hit,
                        argmax_note(cached, full))};
  }

  void run(BackendRuntime&) override {
    const auto t = workload_->request(next_++);
    int32_t tok = 0;
    const auto t0 = Clock::now();
    Served s = server_->serve(t.data(), static_cast<int>(t.size()), 0, {nullptr, &tok});
    ttft_ms_.push_back(ms_since(t0));
    server_->finish(s);
    prompt_.push_back(s.prompt);
    hit_.push_back(s.hit);
    bookkeeping_us_.push_back(s.bookkeeping_us());
    copy_ms_.push_back(s.copy_ms);
  }

  Work work() const override {
    if (prompt_.empty()) return {};
    const int n = static_cast<int>(std::lround(median_of(prompt_))), hit = static_cast<int>(std::lround(median_of(hit_)));
    double f = 0;
    for (int i = hit; i < n; ++i) f += engine_.config.flops_per_token(i);
    f -= (n - hit - 1.0) * 2.0 * engine_.config.vocab * engine_.config.hidden;  // LM head on the last token only
    const double bytes = static_cast<double>(engine_.model->weight_bytes()) + (n - hit) * engine_.kv_bytes_per_token +
                         2.0 * hit * engine_.kv_bytes_per_token;  // the prefix's K/V copied (read + write)
    return {f, bytes};
  }

  std::string note() const override {
    if (!text_) return {};
    return fmt::format("system prompt '{}' ({} tokens, {}), {} text queries", model::short_text(text_->system), text_->system_tokens.size(),
                       text_->tokenizer->name(), text_->queries.size());
  }
  std::vector<std::pair<std::string, std::string>> texts() const override {
    if (!text_) return {};
    return {{"system_prompt", text_->system}};
  }

  std::vector<Metric> metrics() const override {
    std::vector<Metric> m;
    double hit = 0, prompt = 0;
    for (size_t i = 0; i < hit_.size(); ++i) {
      hit += hit_[i];
      prompt += prompt_[i];
    }
    std::vector<double> prefilled;
    for (size_t i = 0; i < hit_.size(); ++i) prefilled.push_back(prompt_[i] - hit_[i]);
    if (text_) m.push_back({"system prompt tokens", static_cast<double>(text_->system_tokens.size()), ""});  // the text's
    m.push_back({"hit rate", prompt > 0 ? 100.0 * hit / prompt : 0, "%"});
    m.push_back({"prefilled", median_of(prefilled), "tok/req"});
    if (kind_ != CacheKind::None && !uncached_ms_.empty() && !ttft_ms_.empty()) {
      const double uncached = median_of(uncached_ms_), cached = median_of(ttft_ms_);
      m.push_back({"uncached TTFT", uncached, "ms"});
      m.push_back({"saved", uncached - cached, "ms/req"});
      m.push_back({"TTFT/uncached", 100.0 * cached / uncached, "%"});
      if (qps_ > 0) m.push_back({fmt::format("device-s/s saved at {} QPS", qps_), (uncached - cached) * qps_ / 1000.0, "derived"});
      m.push_back({"bookkeeping", median_of(bookkeeping_us_), "µs/req"});
      if (backend_ == Backend::Cpu) m.push_back({"K/V copy", median_of(copy_ms_), "ms"});
      m.push_back({"held", static_cast<double>(server_->held_bytes()) / (1 << 20), "MiB"});
      m.push_back({"cached", static_cast<double>(server_->cached_tokens()), "tok"});
    }
    return m;
  }

 private:
  Backend backend_;
  CacheKind kind_;
  Engine engine_;
  std::unique_ptr<SystemPromptWorkload> workload_;
  std::optional<SystemPromptTexts> text_;  // a text system prompt and queries
  std::unique_ptr<PrefixServer> server_;  // after engine_: destroyed first, gives its sequences back
  double qps_ = 0;
  int reference_runs_ = 0;
  int block_size_ = 16;
  uint64_t next_ = 0;
  std::vector<double> uncached_ms_, ttft_ms_, prompt_, hit_, bookkeeping_us_, copy_ms_;
};

// ---- prefix-mixed ----

class MixedVariant : public Variant {
 public:
  MixedVariant(Backend b, CacheKind k) : backend_(b), kind_(k) {}

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    MixedOptions o = mixed_options(p);
    o.qps = p.number("qps");
    const model::ModelConfig* c = nullptr;
    std::optional<model::ModelConfig> pc = model::preset(p.text("model"));
    if (pc) c = &*pc;
    o.max_prompt = c ? c->max_positions : 0;
    trace_ = mixed_workload(o, c ? c->vocab : 32000, seed);
    int longest = 1;
    for (const auto& r : trace_) longest = std::max(longest, static_cast<int>(r.tokens.size()));
    engine_.build(p, backend_, rt, seed, longest);
    server_ = std::make_unique<PrefixServer>(*engine_.model, server_options(p, kind_, kUnbounded));
  }

  Validation validate(BackendRuntime& rt) override {
    const double tol = backend_ == Backend::Cpu ? 1e-4 : 1e-2;
    // One replay from an empty cache: the invariants after every request, and up to 8 cache
    // hits spread over the trace against full prefills. The baseline replays 4 requests.
    const size_t n = kind_ == CacheKind::None ? std::min<size_t>(4, trace_.size()) : trace_.size();
    double worst = 0;
    int compared = 0, hits = 0;
    size_t next_check = 0;
    std::vector<float> l(static_cast<size_t>(engine_.config.vocab));
    int32_t tok = 0;
    for (size_t i = 0; i < n; ++i) {
      const Request& r = trace_[i];
      Served s = server_->serve(r.tokens.data(), static_cast<int>(r.tokens.size()), r.extra_key, {l.data(), &tok});
      const int hit = s.hit;
      server_->finish(s);
      hits += hit > 0;
      if (std::string e = server_->check(); !e.empty()) {
        server_->clear();
        return {false, "invariants", 1, 0, fmt::format("after request {}: {}", i, e)};
      }
      if ((hit > 0 || kind_ == CacheKind::None) && i >= next_check && compared < 8) {
        rt.synchronize();
        worst = std::max(worst, relative_l2(l, engine_.full_prefill_logits(r.tokens)));
        ++compared;
        next_check = i + std::max<size_t>(1, n / 8);
      }
    }
    server_->clear();
    if (kind_ != CacheKind::None && compared == 0) return {false, "hits", 0, 1, "no request of the trace hit the cache"};
    return {worst <= tol, "rel_l2", worst, tol,
            fmt::format("{} requests replayed ({} hits), {} hits vs full prefills; invariants after every request", n, hits, compared)};
  }

  void run(BackendRuntime&) override {
    double free_at = 0, busy = 0;
    int64_t held_peak = 0, cached_peak = 0, hit = 0, prompt = 0;
    std::vector<double> ttft, book;
    int32_t tok = 0;
    for (const Request& r : trace_) {
      const auto t0 = Clock::now();
      Served s = server_->serve(r.tokens.data(), static_cast<int>(r.tokens.size()), r.extra_key, {nullptr, &tok});
      held_peak = std::max(held_peak, server_->held_bytes());
      server_->finish(s);
      const double service = ms_since(t0) / 1e3;
      // One server, arrival order: a request waits for the previous one, then is served.
      const double start = std::max(r.arrival, free_at);
      free_at = start + service;
      busy += service;
      ttft.push_back((free_at - r.arrival) * 1e3);
      book.push_back(s.bookkeeping_us());
      hit += s.hit;
      prompt += s.prompt;
      cached_peak = std::max(cached_peak, server_->cached_tokens());
    }
    evicted_.push_back(static_cast<double>(server_->evicted_tokens()));
    server_->clear();
    p50_.push_back(percentile_of(ttft, 0.5));
    p99_.push_back(percentile_of(ttft, 0.99));
    held_.push_back(static_cast<double>(held_peak));
    cached_.push_back(static_cast<double>(cached_peak));
    load_.push_back(trace_.empty() ? 0 : busy / trace_.back().arrival);
    bookkeeping_.push_back(median_of(book));
    hit_rate_ = prompt > 0 ? 100.0 * static_cast<double>(hit) / static_cast<double>(prompt) : 0;
  }

  std::vector<Metric> metrics() const override {
    std::vector<Metric> m = {{"hit rate", hit_rate_, "%"},
                             {"TTFT p50", median_of(p50_), "ms"},
                             {"TTFT p99", median_of(p99_), "ms"},
                             {"server load", median_of(load_), "busy s/s"}};
    if (kind_ != CacheKind::None) {
      m.push_back({"held peak", median_of(held_) / (1 << 20), "MiB"});
      m.push_back({"cached peak", median_of(cached_) * engine_.kv_bytes_per_token / (1 << 20), "MiB"});
      m.push_back({"evicted", median_of(evicted_), "tok/replay"});
      m.push_back({"bookkeeping", median_of(bookkeeping_), "µs/req"});
    }
    return m;
  }

 private:
  Backend backend_;
  CacheKind kind_;
  Engine engine_;
  std::vector<Request> trace_;
  std::unique_ptr<PrefixServer> server_;
  double hit_rate_ = 0;
  std::vector<double> p50_, p99_, held_, cached_, load_, evicted_, bookkeeping_;
};

// ---- prefix-cost ----

// A provider's prompt-caching rules: reads at `read` × the input price once the cached prefix
// reaches `min_tokens` (counted in `step` increments past it), newly cached tokens at `write` ×.
struct Pricing {
  double read = 1, write = 1;
  int min_tokens = 0, step = 1;
};

struct Bill {
  double tokens = 0, reads = 0, writes = 0, cost = 0;  // cost in input-token equivalents
};

Bill bill(const std::vector<CacheReplay::Step>& steps, const Pricing& pr, bool cached) {
  Bill b;
  for (const auto& s : steps) {
    double r = 0, w = 0;
    if (cached && s.prompt >= pr.min_tokens) {
      if (s.hit >= pr.min_tokens) r = pr.min_tokens + (s.hit - pr.min_tokens) / pr.step * pr.step;
      w = s.written;
    }
    b.tokens += s.prompt;
    b.reads += r;
    b.writes += w;
    b.cost += (s.prompt - r - w) + r * pr.read + w * pr.write;
  }
  return b;
}

class CostVariant : public Variant {
 public:
  explicit CostVariant(CacheKind k) : kind_(k) {}

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    constexpr int kVocab = 32000;  // Llama 2's: only which prompts share prefixes matters here
    if (p.text("workload") == "system-prompt") {
      SystemPromptWorkload w(kVocab, static_cast<int>(p.integer("system_prompt")), static_cast<int>(p.integer("query_min")),
                             static_cast<int>(p.integer("query_max")), seed);
      trace_ = system_prompt_trace(w, static_cast<int>(p.integer("requests")), 1.0, seed);
    } else {
      trace_ = mixed_workload(mixed_options(p), kVocab, seed);
    }
    options_ = server_options(p, kind_, kUnbounded);
    input_price_ = p.number("input_price");
    anthropic_ = {p.number("anthropic_read"), p.number("anthropic_write"), static_cast<int>(p.integer("anthropic_min")), 1};
    openai_ = {p.number("openai_read"), 1.0, static_cast<int>(p.integer("openai_min")), static_cast<int>(p.integer("openai_step"))};
  }

  Validation validate(BackendRuntime&) override {
    CacheReplay replay(options_);
    for (size_t i = 0; i < trace_.size(); ++i) {
      const Request& r = trace_[i];
      const auto s = replay.step(r.tokens.data(), static_cast<int>(r.tokens.size()), r.extra_key);
      if (s.hit > s.prompt - 1 || s.written > s.prompt - s.hit || s.hit < 0 || s.written < 0)
        return {false, "accounting", 1, 0, fmt::format("request {}: {} hit + {} written of {} tokens", i, s.hit, s.written, s.prompt)};
      if (std::string e = replay.check(); !e.empty()) return {false, "invariants", 1, 0, fmt::format("after request {}: {}", i, e)};
    }
    return {true, "invariants", 0, 0, fmt::format("the trace's {} requests replayed through the cache; invariants after each", trace_.size())};
  }

  void run(BackendRuntime&) override {
    CacheReplay replay(options_);
    steps_.clear();
    steps_.reserve(trace_.size());
    for (const Request& r : trace_) steps_.push_back(replay.step(r.tokens.data(), static_cast<int>(r.tokens.size()), r.extra_key));
  }

  std::vector<Metric> metrics() const override {
    const bool cached = kind_ != CacheKind::None;
    const Bill a = bill(steps_, anthropic_, cached), o = bill(steps_, openai_, cached);
    double hit = 0;
    for (const auto& s : steps_) hit += s.hit;
    const double tokens = a.tokens;
    const double per_1k = steps_.empty() ? 0 : input_price_ / 1e6 * 1000.0 / static_cast<double>(steps_.size());
    auto pct = [&](double x) { return tokens > 0 ? 100.0 * x / tokens : 0; };
    return {{"hit rate", pct(hit), "%"},
            {"uncached", tokens * per_1k, "$/1k req"},
            {"anthropic", a.cost * per_1k, "$/1k req"},
            {"anthropic saved", pct(tokens - a.cost), "%"},
            {"anthropic reads", pct(a.reads), "% of tokens"},
            {"anthropic writes", pct(a.writes), "% of tokens"},
            {"openai", o.cost * per_1k, "$/1k req"},
            {"openai saved", pct(tokens - o.cost), "%"},
            {"openai reads", pct(o.reads), "% of tokens"}};
  }

 private:
  CacheKind kind_;
  std::vector<Request> trace_;
  ServerOptions options_;
  double input_price_ = 0;
  Pricing anthropic_, openai_;
  std::vector<CacheReplay::Step> steps_;
};

// ---- kinds ----

std::vector<std::string> all_but(const std::vector<KeySpec>& keys, const std::vector<std::string>& drop) {
  std::vector<std::string> v;
  for (const auto& k : keys)
    if (std::find(drop.begin(), drop.end(), k.name) == drop.end()) v.push_back(k.name);
  return v;
}

std::vector<VariantDecl> engine_variants(const std::vector<KeySpec>& keys, const std::vector<std::string>& cache_only) {
  // none reads no cache key, radix no block_size; the CPU variants leave out `matmul` as well (the
  // CPU engine has one matmul: a sweep over the key would repeat their rows).
  auto reads = [&](std::vector<std::string> drop, Backend b) {
    if (b == Backend::Cpu) drop.push_back("matmul");
    return all_but(keys, drop);
  };
  return {
      {"none", Backend::Cuda, kind_label(CacheKind::None), reads(cache_only, Backend::Cuda)},
      {"block_hash", Backend::Cuda, kind_label(CacheKind::BlockHash), reads({}, Backend::Cuda)},
      {"radix", Backend::Cuda, kind_label(CacheKind::Radix), reads({"block_size"}, Backend::Cuda)},
      {"cpu_none", Backend::Cpu, std::string(kind_label(CacheKind::None)) + "; on the CPU engine", reads(cache_only, Backend::Cpu)},
      {"cpu_block_hash", Backend::Cpu, std::string(kind_label(CacheKind::BlockHash)) + "; on the CPU engine", reads({}, Backend::Cpu)},
      {"cpu_radix", Backend::Cpu, std::string(kind_label(CacheKind::Radix)) + "; on the CPU engine", reads({"block_size"}, Backend::Cpu)},
  };
}

KindInfo system_prompt_kind() {
  KindInfo k;
  k.name = "prefix-system-prompt";
  k.group = "prefix";
  k.doc = "The chapter's agent case: every request is one shared system prompt + a 7–10-token query. A sample is one request's "
          "TTFT (lookup, K/V copy of the cached prefix, prefill of the rest to the first token on the host, insert) behind a "
          "warm cache. `uncached TTFT` is measured in the row's validation (full prefills of requests of the same shape); "
          "`saved` = uncached − cached medians; `device-s/s saved` = saved × qps / 1000 is derived, not measured. The gate: "
          "the second request reuses the whole system prompt and its logits match a full prefill; the cache's invariants hold.";
  k.keys = model_keys();
  for (auto& key : system_prompt_keys(false)) k.keys.push_back(key);
  k.keys.push_back(key_spec("qps", ParamType::Float, "request rate for the derived device-seconds saved per second", Value(100.0), 0.0));
  k.keys.push_back(block_size_key());
  k.keys.push_back(key_spec("capacity", ParamType::Int, "cache capacity in tokens (block_hash: whole blocks); 0 = the system prompt + 128",
                            Value(int64_t{0}), 0.0));
  k.keys.push_back(key_spec("reference_runs", ParamType::Int, "uncached prefills timed in validation after an untimed warm-up of 3 and 0.5 s (the saved-time reference)",
                            Value(int64_t{7}), 1.0));
  for (auto& key : system_prompt_text_keys()) k.keys.push_back(key);
  k.variants = engine_variants(k.keys, {"qps", "block_size", "capacity", "reference_runs"});
  k.check = [](const std::map<std::string, std::vector<Value>>& values) {
    if (auto problem = check_workload_keys(values)) return problem;
    if (auto problem = model::check_model_weights(values)) return problem;
    return check_system_prompt_texts(values);
  };
  return k;
}

KindInfo mixed_kind() {
  KindInfo k;
  k.name = "prefix-mixed";
  k.group = "prefix";
  k.doc = "A server's mixed load: several tenants' system prompts, multi-turn chats whose prompt grows each turn, few-shot "
          "prompts, Poisson arrivals at `qps`, served one at a time in arrival order from an empty cache. A sample is one "
          "replay of the whole trace (every request's real service time back to back); TTFT = queueing on a simulated clock "
          "advanced by the measured service times + service. `held` = the engine K/V allocations the cache keeps alive "
          "(holder sequences), `cached` = cached tokens × K/V bytes per token (what a paged cache would hold). The gate: one "
          "replay with the invariants checked after every request and up to 8 hits' logits against full prefills.";
  k.keys = model_keys();
  k.keys.push_back(key_spec("qps", ParamType::Float, "Poisson arrival rate (requests per second)", Value(10.0), 0.0));
  for (auto& key : mixed_keys()) k.keys.push_back(key);
  k.keys.push_back(block_size_key());
  k.keys.push_back(key_spec("capacity", ParamType::Int, "cache capacity in tokens (block_hash: whole blocks); 0 = unbounded", Value(int64_t{0}), 0.0));
  k.variants = engine_variants(k.keys, {"block_size", "capacity"});
  k.check = [](const std::map<std::string, std::vector<Value>>& values) {
    if (auto problem = check_workload_keys(values)) return problem;
    return model::check_model_weights(values);
  };
  return k;
}

KindInfo cost_kind() {
  KindInfo k;
  k.name = "prefix-cost";
  k.group = "prefix";
  k.doc = "What API prompt caching saves in money on the same workloads. The caches replay the trace (bookkeeping only: "
          "hits do not depend on the engine) and each request's measured hit and newly cached tokens are priced under both "
          "providers' rules: reads at read × the input price once the cached prefix reaches the minimum (OpenAI: in "
          "`openai_step` increments), newly cached tokens at write × (Anthropic), the rest at 1×. Prices are inputs from the "
          "spec, not measurements; output tokens are not priced. A sample is the replay's bookkeeping time.";
  k.keys = {enum_key("workload", "which trace: system-prompt (one shared prompt + a query) or mixed (tenants, chats, few-shot)",
                     "system-prompt", {"system-prompt", "mixed"})};
  for (auto& key : system_prompt_keys(true)) k.keys.push_back(key);
  for (auto& key : mixed_keys()) k.keys.push_back(key);
  k.keys.push_back(block_size_key());
  k.keys.push_back(key_spec("capacity", ParamType::Int, "cache capacity in tokens (block_hash: whole blocks); 0 = unbounded", Value(int64_t{0}), 0.0));
  k.keys.push_back(key_spec("input_price", ParamType::Float, "USD per million input tokens (an input, not a measurement)", Value(3.0), 0.0));
  k.keys.push_back(key_spec("anthropic_read", ParamType::Float, "cache read price / input price", Value(0.1), 0.0));
  k.keys.push_back(key_spec("anthropic_write", ParamType::Float, "cache write price / input price", Value(1.25), 0.0));
  k.keys.push_back(key_spec("anthropic_min", ParamType::Int, "shortest cacheable prompt (tokens)", Value(int64_t{1024}), 0.0));
  k.keys.push_back(key_spec("openai_read", ParamType::Float, "cached input price / input price", Value(0.5), 0.0));
  k.keys.push_back(key_spec("openai_min", ParamType::Int, "caching starts at this many prompt tokens", Value(int64_t{1024}), 0.0));
  k.keys.push_back(key_spec("openai_step", ParamType::Int, "cached tokens count in increments of this past the minimum", Value(int64_t{128}), 1.0));
  const auto none_keys = all_but(k.keys, {"block_size", "capacity"});
  const auto radix_keys = all_but(k.keys, {"block_size"});
  VariantDecl none{"none", Backend::Cpu, "no prompt caching: every input token at the input price", none_keys, true};
  VariantDecl bh{"block_hash", Backend::Cpu, "hits of the block-hash cache (16-token blocks)", {}, true};
  VariantDecl rx{"radix", Backend::Cpu, "hits of the radix cache (token-granular)", radix_keys, true};
  k.variants = {none, bh, rx};
  k.check = check_workload_keys;
  return k;
}

const KindRegistration system_prompt_registration(system_prompt_kind());
const KindRegistration mixed_registration(mixed_kind());
const KindRegistration cost_registration(cost_kind());

template <Backend B, CacheKind K>
struct SystemPrompt : SystemPromptVariant {
  SystemPrompt() : SystemPromptVariant(B, K) {}
};
template <Backend B, CacheKind K>
struct Mixed : MixedVariant {
  Mixed() : MixedVariant(B, K) {}
};
template <CacheKind K>
struct Cost : CostVariant {
  Cost() : CostVariant(K) {}
};

using CpuSpNone = SystemPrompt<Backend::Cpu, CacheKind::None>;
using CpuSpBlock = SystemPrompt<Backend::Cpu, CacheKind::BlockHash>;
using CpuSpRadix = SystemPrompt<Backend::Cpu, CacheKind::Radix>;
using CpuMixNone = Mixed<Backend::Cpu, CacheKind::None>;
using CpuMixBlock = Mixed<Backend::Cpu, CacheKind::BlockHash>;
using CpuMixRadix = Mixed<Backend::Cpu, CacheKind::Radix>;
IB_REGISTER_VARIANT("prefix-system-prompt", "cpu_none", CpuSpNone);
IB_REGISTER_VARIANT("prefix-system-prompt", "cpu_block_hash", CpuSpBlock);
IB_REGISTER_VARIANT("prefix-system-prompt", "cpu_radix", CpuSpRadix);
IB_REGISTER_VARIANT("prefix-mixed", "cpu_none", CpuMixNone);
IB_REGISTER_VARIANT("prefix-mixed", "cpu_block_hash", CpuMixBlock);
IB_REGISTER_VARIANT("prefix-mixed", "cpu_radix", CpuMixRadix);
IB_REGISTER_VARIANT("prefix-cost", "none", Cost<CacheKind::None>);
IB_REGISTER_VARIANT("prefix-cost", "block_hash", Cost<CacheKind::BlockHash>);
IB_REGISTER_VARIANT("prefix-cost", "radix", Cost<CacheKind::Radix>);

#if defined(INFER_BENCH_HAVE_CUDA_MODEL)
// The same measurements on the CUDA engine (make_cuda_model; Model::copy_cache on the device).
using CudaSpNone = SystemPrompt<Backend::Cuda, CacheKind::None>;
using CudaSpBlock = SystemPrompt<Backend::Cuda, CacheKind::BlockHash>;
using CudaSpRadix = SystemPrompt<Backend::Cuda, CacheKind::Radix>;
using CudaMixNone = Mixed<Backend::Cuda, CacheKind::None>;
using CudaMixBlock = Mixed<Backend::Cuda, CacheKind::BlockHash>;
using CudaMixRadix = Mixed<Backend::Cuda, CacheKind::Radix>;
IB_REGISTER_VARIANT("prefix-system-prompt", "none", CudaSpNone);
IB_REGISTER_VARIANT("prefix-system-prompt", "block_hash", CudaSpBlock);
IB_REGISTER_VARIANT("prefix-system-prompt", "radix", CudaSpRadix);
IB_REGISTER_VARIANT("prefix-mixed", "none", CudaMixNone);
IB_REGISTER_VARIANT("prefix-mixed", "block_hash", CudaMixBlock);
IB_REGISTER_VARIANT("prefix-mixed", "radix", CudaMixRadix);
#endif

}  // namespace
}  // namespace ib::prefix
