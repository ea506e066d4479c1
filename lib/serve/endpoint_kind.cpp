// Kind `serve-endpoint` (`infer-bench load`): one seeded workload sent to any OpenAI-compatible
// server over HTTP (ours, llama.cpp's llama-server, vLLM, SGLang), measured from the client's side
// with vLLM's definitions (serve/endpoint_metrics.h), with every request accounted for and the
// client's own lag and CPU use reported beside the numbers.
#include <algorithm>
#include <chrono>
#include <tuple>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/output.h"
#include "core/input_file.h"
#include "core/interrupt.h"
#include "core/json_input.h"
#include "constrain/validator.h"
#include "core/registry.h"
#include "core/spec.h"
#include "core/stats.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "serve/arrival_trace.h"
#include "serve/conversation_dataset.h"
#include "serve/endpoint_load.h"
#include "serve/endpoint_metrics.h"
#include "serve/endpoint_result_file.h"
#include "serve/workload_keys.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {
namespace {

struct EndpointKeys : WorkloadKeys {
  std::string endpoint, baseline_endpoint, served_model, weights, api, api_key_env, shard, save_result, response_schema;
  std::string dataset, trace, trace_time_unit;
  int64_t max_concurrency = 0, dataset_output_len = 0, trace_block = 512;
  double request_timeout = 300, max_send_lag = 0.01, start_at = 0, duration = 0;
};

// vLLM's ShareGPT sampling filters: a prompt or answer under 4 tokens, a prompt over 1,024 or a
// conversation over 2,048 is left out.
constexpr size_t kDatasetMinTokens = 4, kDatasetMaxPrompt = 1024, kDatasetMaxTotal = 2048;

const ParamSet<EndpointKeys>& endpoint_keys() {
  using P = EndpointKeys;
  static const ParamSet<EndpointKeys> set = [] {
    ParamSet<EndpointKeys> out;
    out.add(&P::endpoint, key_spec("endpoint", ParamType::String,
                                   "the server: http://HOST:PORT of an OpenAI-compatible API (infer-bench serve, "
                                   "llama.cpp's llama-server, vLLM, SGLang; both serve at port 8000 by default); a "
                                   "trailing /v1 is dropped",
                                   Value(std::string("http://127.0.0.1:8000"))));
    out.add(&P::baseline_endpoint,
            key_spec("baseline_endpoint", ParamType::String,
                     "variant paired: the server `endpoint` is compared with (the same model with the technique off), sent "
                     "the identical requests in alternating turns",
                     Value(std::string())));
    out.add(&P::served_model,
            key_spec("served_model", ParamType::String,
                     "the `model` every request names; empty: the first of each server's /v1/models", Value(std::string())));
    out.add(&P::weights, key_spec("weights", ParamType::String,
                                  "the checkpoint the server serves (a Hugging Face directory or a GGUF file): its "
                                  "vocabulary for token-id prompts, its tokenizer for chat texts",
                                  Value(std::string())));
    out.add(&P::api, enum_key("api",
                              "completions: /v1/completions with prompts as token ids (their lengths exact, checked "
                              "against the server's usage); chat: /v1/chat/completions with one user message of "
                              "decoded text, fitted so that the checkpoint's chat template makes the prompt exactly the "
                              "tokens asked (checked against the server's usage)",
                              "completions", {"completions", "chat"}));
    out.add(&P::api_key_env, key_spec("api_key_env", ParamType::String,
                                      "the environment variable holding the server's API key (sent as a bearer token); "
                                      "empty: none",
                                      Value(std::string())));
    add_workload_keys(out);
    out.add(&P::dataset,
            key_spec("dataset", ParamType::String,
                     "ShareGPT-style conversations (JSON Lines, or a JSON array): each request's prompt is a "
                     "conversation's first user turn, tokenized by `weights`, and its output the answer's token count "
                     "(vLLM's sharegpt dataset: seeded order, prompts or answers under 4 tokens, prompts over 1,024 and "
                     "conversations over 2,048 left out); the prompt length keys do not apply; empty: seeded tokens",
                     Value(std::string())));
    out.add(&P::dataset_output_len,
            key_spec("dataset_output_len", ParamType::Int,
                     "output tokens of a dataset request (vLLM's --sharegpt-output-len); 0: the answer's own length",
                     Value(int64_t{0}), 0.0));
    out.add(&P::trace, key_spec("trace", ParamType::String,
                                "an arrival trace (JSON Lines, Mooncake's format: `timestamp`, and optionally "
                                "`input_length`, `output_length`, `hash_ids`): the first `requests` requests arrive at "
                                "its times (qps and arrival do not apply) with its lengths where it has them, and "
                                "requests sharing leading hash_ids share those prompt blocks; empty: seeded arrivals",
                                Value(std::string())));
    out.add(&P::trace_time_unit,
            enum_key("trace_time_unit", "the unit of the trace's timestamps (Mooncake's are ms)", "ms", {"ms", "s"}));
    out.add(&P::trace_block, key_spec("trace_block", ParamType::Int, "prompt tokens per trace hash id (Mooncake's 512)",
                                      Value(int64_t{512}), 1.0, 1 << 20));
    out.add(&P::duration,
            key_spec("duration", ParamType::Seconds,
                     "the load's schedule ends here: requests due at or after it are not sent (those sent run to their "
                     "end); 0: every request is sent",
                     Value(0.0), 0.0));
    out.add(&P::max_concurrency, key_spec("max_concurrency", ParamType::Int,
                                          "requests in flight at most (vLLM's --max-concurrency); a request due while "
                                          "all are busy waits for one; 0: no bound but the client's 512 threads",
                                          Value(int64_t{0}), 0.0, 512.0));
    out.add(&P::request_timeout,
            key_spec("request_timeout", ParamType::Seconds,
                     "a request that has not ended this long after it was sent fails as timed out", Value(300.0), 0.001));
    out.add(&P::max_send_lag,
            key_spec("max_send_lag", ParamType::Seconds,
                     "the client's audit: a request sent later than this after it was due (a free slot counted) is lagged, "
                     "and the row says how many (the client, not the server, would be the bottleneck)",
                     Value(0.01), 0.0));
    add_goodput_and_seed_keys(out);
    out.add(&P::shard, key_spec("shard", ParamType::String,
                                "i/N: this client sends only requests whose index is i mod N, at their times in the whole "
                                "load's seeded schedule (N clients on N machines: a Slurm job array's task i of N); "
                                "`infer-bench merge` joins their save_result files",
                                Value(std::string("0/1"))));
    out.add(&P::start_at, key_spec("start_at", ParamType::Float,
                                   "the load's start as seconds since the Unix epoch (every shard given the same), so "
                                   "shards send one schedule; 0: when the row starts",
                                   Value(0.0), 0.0));
    out.add(&P::response_schema,
            key_spec("response_schema", ParamType::String,
                     "a JSON Schema file: every request asks for a document of it (response_format json_schema, no "
                     "ignore_eos: a document ends when it is complete), and each answer is checked by our validator, not "
                     "only parsed (`valid`, and `valid goodput` counting only valid documents within the SLOs); empty: none",
                     Value(std::string())));
    out.add(&P::save_result, key_spec("save_result", ParamType::String,
                                      "variant endpoint: write the first pass's requests here as vLLM's "
                                      "benchmark_serving --save-result JSON, our per-request records beside (empty: none)",
                                      Value(std::string())));
    return out;
  }();
  return set;
}

double median_of(const std::vector<double>& v) { return summarize(v).median; }

// One request as a pass saw it, kept to pair it with the other server's answer to the same request.
struct Observed {
  bool ok = false, within_slo = false;
  bool parsed = false, valid = false;  // a response_schema load: the answer is JSON, and a document of the schema
  double ttft = 0, tpot = 0, e2e = 0;
  std::string text;
};

// One server's side of the measurement: its options, and what each pass measured.
struct Side {
  EndpointOptions options;
  std::vector<EndpointSummary> runs;
  std::vector<std::vector<Observed>> observed;       // per pass, by request
  std::vector<double> prefix_hit;                    // % of prompt tokens, per pass the server's counters were read in
  size_t prefix_unread = 0;                          // passes they could not be read in
  std::vector<double> parsed, valid, valid_goodput;  // per pass, a response_schema load's: % of completed, req/s
  size_t prompt_off = 0, sent = 0;
  std::string first_off;
  size_t chat_checked = 0, chat_off = 0;  // chat prompts whose server count was compared with the template's, and differed
  std::string first_chat_off;
};

// The metrics a pass's percentiles pair on: TTFT, TPOT and E2E, at the median and p99.
struct PairedMetric {
  const char* name;
  double Observed::*field;
  double q;
};
constexpr PairedMetric kPaired[] = {
    {"ttft p50", &Observed::ttft, 0.5},  {"ttft p99", &Observed::ttft, 0.99}, {"tpot p50", &Observed::tpot, 0.5},
    {"tpot p99", &Observed::tpot, 0.99}, {"e2e p50", &Observed::e2e, 0.5},    {"e2e p99", &Observed::e2e, 0.99},
};

class EndpointLoad : public Variant {
 public:
  explicit EndpointLoad(bool paired) : paired_(paired) {}

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    keys_ = endpoint_keys().read(p);
    seed_ = seed;
    if (paired_ && keys_.baseline_endpoint.empty())
      throw InputError("baseline_endpoint: variant paired compares `endpoint` with a baseline server; name it");
    if (!keys_.api_key_env.empty()) {
      const char* key = std::getenv(keys_.api_key_env.c_str());
      if (!key || !*key) throw InputError(fmt::format("api_key_env: the environment has no {}", keys_.api_key_env));
      api_key_ = key;
    }
    vocab_ = model::checkpoint_config(keys_.weights).vocab;
    std::tie(shard_, shards_) = parse_shard(keys_.shard);
    if (paired_ && (shards_ > 1 || !keys_.save_result.empty()))
      throw InputError(fmt::format("{}: variant paired runs whole loads and keeps no result file (variant endpoint does)",
                                   shards_ > 1 ? "shard" : "save_result"));
    if (!keys_.save_result.empty() && std::filesystem::exists(keys_.save_result))
      throw InputError(
          fmt::format("save_result: {} exists (a result file is never overwritten; one path per row)", keys_.save_result));
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (keys_.start_at > now + 86400)
      throw InputError(
          fmt::format("start_at: {:.0f} is more than a day ahead of this machine's clock ({:.0f})", keys_.start_at, now));
    base_ = make_workload(workload_options(keys_), vocab_, static_cast<uint64_t>(keys_.workload_seed));
    if (keys_.api == "chat" || !keys_.dataset.empty()) tokenizer_ = tokenizer::Tokenizer::load(keys_.weights);
    if (keys_.api == "chat") {
      if (auto t = model::checkpoint_chat_template(keys_.weights)) chat_template_ = std::make_shared<model::ChatTemplate>(*t);
    }
    std::string sources;
    // A file's error names its key too (the message names the file and line).
    auto with_key = [](const char* key, auto f) {
      try {
        return f();
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: {}", key, e.what()));
      }
    };
    if (!keys_.trace.empty()) sources += with_key("trace", [&] { return apply_trace(); });
    if (keys_.duration > 0) {
      const size_t drawn = base_.size();
      const double first = base_.empty() ? 0.0 : base_.front().arrival;
      base_.erase(std::find_if(base_.begin(), base_.end(), [&](const Request& r) { return r.arrival >= keys_.duration; }),
                  base_.end());
      if (!blocks_.empty()) blocks_.resize(base_.size());
      if (base_.empty())
        throw InputError(fmt::format("duration: no request is due before {:g} s (the first at {:.3g} s)", keys_.duration, first));
      if (base_.size() < drawn)
        sources += fmt::format("; cut at {:g} s: {} of {} requests sent", keys_.duration, base_.size(), drawn);
    }
    // The dataset after the cut: only the requests sent draw conversations.
    if (!keys_.dataset.empty()) sources += with_key("dataset", [&] { return apply_dataset(); });
    load_ = describe(base_) + sources;
    if (chat_template_ && keys_.dataset.empty()) {
      // A chat prompt's length counts the template's own tokens around the message.
      const size_t around = tokenizer_->encode(chat_template_->render({{"user", ""}}, true), false).size();
      for (const Request& r : base_)
        if (r.prompt.size() <= around + static_cast<size_t>(keys_.system_prompt))
          throw InputError(
              fmt::format("prompt_len: a chat prompt of {} tokens leaves no room for a message: the chat "
                          "template of {} takes {} tokens around one{}",
                          r.prompt.size(), keys_.weights, around,
                          keys_.system_prompt ? fmt::format(", and system_prompt {}", keys_.system_prompt) : std::string()));
    }
    if (shards_ > 1) {
      // This client's share of the schedule: the same requests at the same times as in the whole load.
      std::vector<Request> mine;
      std::vector<std::vector<int64_t>> my_blocks;
      for (size_t i = 0; i < base_.size(); ++i)
        if (in_shard(base_[i].id, shard_, shards_)) {
          mine.push_back(std::move(base_[i]));
          if (!blocks_.empty()) my_blocks.push_back(std::move(blocks_[i]));
        }
      base_ = std::move(mine);
      blocks_ = std::move(my_blocks);
      workload_ = fmt::format("shard {}/{} ({} requests) of {}", shard_, shards_, base_.size(), load_);
    } else {
      workload_ = load_;
    }
    if (!keys_.response_schema.empty()) {
      schema_ = parse_json_bounded<constrain::SchemaValidator::json>(read_input_file(keys_.response_schema, 16 << 20),
                                                                     keys_.response_schema, 128);
      validator_ = std::make_unique<constrain::SchemaValidator>(schema_);
      response_format_ = nlohmann::json{{"type", "json_schema"},
                                        {"json_schema", {{"name", "load"}, {"schema", nlohmann::json::parse(schema_.dump())}}}}
                             .dump();
    }
  }
  Validation validate(BackendRuntime&) override { throw std::logic_error("serve-endpoint measures itself"); }
  void run(BackendRuntime&) override { throw std::logic_error("serve-endpoint measures itself"); }

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override {
    SelfMeasurement m;
    if (!endpoint_client_available()) {
      m.unsupported = "built without cpp-httplib (INFER_BENCH_HTTP=OFF): no HTTP client";
      return m;
    }
    sides_.assign(paired_ ? 2 : 1, Side{});
    for (size_t i = 0; i < sides_.size(); ++i) {
      EndpointOptions& o = sides_[i].options;
      o.url = i == 0 ? keys_.endpoint : keys_.baseline_endpoint;
      o.chat = keys_.api == "chat";
      o.api_key = api_key_;
      o.max_concurrency = static_cast<int>(keys_.max_concurrency);
      o.request_timeout = keys_.request_timeout;
      o.start_at = keys_.start_at;
      o.response_format = response_format_;
      o.ignore_eos = response_format_.empty();
      try {
        o.model = keys_.served_model.empty() ? endpoint_first_model(o.url, api_key_, 10) : keys_.served_model;
      } catch (const InputError& e) {
        // Nothing listening is a row that cannot run here; a server that answers with an error is
        // a measured failure.
        const std::string why = e.what();
        if (why.find("could not connect") != std::string::npos || why.find("timed out") != std::string::npos) {
          m.unsupported = fmt::format("no server answers: {}", why);
        } else {
          m.validation = {false, "refused", 1, 0, why + " (name the model with served_model to send the load anyway)"};
        }
        return m;
      }
    }
    // Warm-up passes (`warmup`): the whole load, fresh tokens, unmeasured, on each server; before a
    // common start_at, not waiting for it.
    for (warmups_ = 0; warmups_ < std::min<int64_t>(c.warmup, 10) && !interrupted(); ++warmups_) {
      const std::vector<Request> trace = fresh_tokens(next_draw());
      std::vector<std::string> texts;
      std::vector<int> chat_counts;
      if (keys_.api == "chat") chat_prompts(trace, -1 - static_cast<int>(warmups_), texts, chat_counts);  // fit not counted
      for (Side& side : sides_) {
        EndpointOptions o = side.options;
        o.start_at = 0;
        run_endpoint_load(o, trace, texts, &interrupted);
      }
    }
    // A paired measurement needs passes to alternate the order in; each pass is a whole load.
    const int passes = static_cast<int>(std::clamp<int64_t>(c.min_samples, paired_ ? 2 : 1, 20));
    for (int pass = 0; pass < passes && !interrupted(); ++pass) {
      const std::vector<Request> trace = fresh_tokens(next_draw());
      std::vector<std::string> texts;
      std::vector<int> chat_counts;
      if (keys_.api == "chat") {
        const auto [unfit, worst] = chat_prompts(trace, pass, texts, chat_counts);
        chat_unfit_ += unfit;
        worst_unfit_ = std::max(worst_unfit_, worst);
      }
      // The baseline first on even passes, second on odd ones: a drift of the machine over the
      // measurement falls on both sides alike.
      std::vector<size_t> order = {0};
      if (paired_) order = pass % 2 == 0 ? std::vector<size_t>{1, 0} : std::vector<size_t>{0, 1};
      for (size_t side : order) {
        const double d =
            run_pass(sides_[side], trace, texts, chat_counts, pass == 0 && side == 0 ? keys_.save_result : std::string());
        if (side == 0) m.samples.push_back(d);
        sides_[side].options.start_at = 0;  // a later pass starts when it is reached
      }
    }
    size_t off = 0, sent = 0, done_a = 0, done_b = 0;
    std::string first_off;
    for (const Side& s : sides_) {
      off += s.prompt_off + s.chat_off;  // a chat prompt the server counted otherwise than the template
      sent += s.sent;
      if (first_off.empty()) first_off = s.first_off;
    }
    for (const auto& r : sides_[0].runs) done_a += r.completed;
    if (paired_)
      for (const auto& r : sides_[1].runs) done_b += r.completed;
    off += chat_unfit_;  // prompts sent at another length than asked, by the template's count
    m.validation.metric = "prompt off";
    m.validation.value = static_cast<double>(off);
    m.validation.ok = off == 0 && done_a > 0 && (!paired_ || done_b > 0);
    if (done_a == 0 || (paired_ && done_b == 0)) {
      const Side& dead = done_a == 0 ? sides_[0] : sides_[1];
      m.validation.detail = fmt::format("no request completed at {}: {}", dead.options.url, describe_failures(dead.runs.front()));
    } else if (keys_.api == "chat") {
      size_t checked = 0, chat_off = 0;
      std::string first;
      for (const Side& s : sides_) {
        checked += s.chat_checked;
        chat_off += s.chat_off;
        if (first.empty()) first = s.first_chat_off;
      }
      m.validation.detail =
          fmt::format("{} requests over {} passes, each accounted for; {}", sent, m.samples.size(),
                      chat_template_ ? fmt::format("{} of {} chat prompts counted by the server as the "
                                                   "checkpoint's chat template gives{}{}",
                                                   checked - chat_off, checked,
                                                   !keys_.dataset.empty() ? ""
                                                   : chat_unfit_ ? fmt::format("; {} prompts could not be fitted to their length "
                                                                               "exactly (off by {} at most)",
                                                                               chat_unfit_, worst_unfit_)
                                                                 : "; every prompt fitted to its length under the template",
                                                   chat_off ? " (first off: " + first + ")" : "")
                                     : "chat prompts' token counts are the server's (the checkpoint has "
                                       "no chat template to count them by)");
    } else {
      m.validation.detail = fmt::format(
          "{} requests over {} passes, each accounted for; every prompt the server counted had "
          "the tokens sent{}",
          sent, m.samples.size(), first_off);
    }
    if (paired_ && m.validation.ok) pair_up();
    return m;
  }

  std::vector<Metric> metrics() const override {
    if (sides_.empty() || sides_[0].runs.empty()) return {};
    std::vector<Metric> m = medians(sides_[0]);
    if (!paired_) return m;
    for (const Metric& b : medians(sides_[1]))
      if (b.key == "ttft p50" || b.key == "tpot p50" || b.key == "e2e p50" || b.key == "tok/s" || b.key == "prefix hit")
        m.push_back({"base " + b.key, b.value, b.unit});
    for (size_t i = 0; i < std::size(kPaired); ++i) {
      const std::string k = std::string(kPaired[i].name) + " ×";
      m.push_back({k, speedups_[i].ratio, "x"});
      m.push_back({k + " lo", speedups_[i].lo, "x"});
      m.push_back({k + " hi", speedups_[i].hi, "x"});
    }
    m.push_back({"same text", same_text_, "%"});
    m.push_back({"good+same", good_and_same_, "req/s"});
    return m;
  }

  std::string note() const override {
    if (sides_.empty()) return fmt::format("{} (weights {})", workload_, keys_.weights);
    const Side& a = sides_[0];
    std::string s = fmt::format("{} at {}{} (weights {}): {}; {}, max_concurrency {}", a.options.model, a.options.url,
                                paired_ ? fmt::format(" against {} at {}", sides_[1].options.model, sides_[1].options.url) : "",
                                keys_.weights, workload_, keys_.api == "chat" ? "chat, decoded text" : "completions, token ids",
                                keys_.max_concurrency);
    for (size_t i = 0; i < sides_.size(); ++i) {
      const Side& side = sides_[i];
      if (side.runs.empty()) continue;
      const EndpointSummary& f = side.runs.front();
      s += fmt::format("; {}pass 1: {}", paired_ ? (i == 0 ? "endpoint " : "baseline ") : "", describe_failures(f));
      if (f.without_usage > 0) s += fmt::format(", {} answered without usage (output chunks counted as tokens)", f.without_usage);
      size_t lagged = 0;
      double worst = 0, cpu = 0;
      for (const auto& r : side.runs) {
        lagged += r.lagged;
        worst = std::max(worst, r.lag.max);
        cpu = std::max(cpu, r.client_cpu);
      }
      if (lagged > 0)
        s += fmt::format(
            "; CLIENT LAGGED: {} requests sent more than {:g} ms late (worst {:.1f} ms), the client used {:.0f}% of "
            "a core: its latencies include the client's delay",
            lagged, keys_.max_send_lag * 1e3, worst * 1e3, cpu * 100);
    }
    if (paired_ && !verdicts_.empty()) s += "; paired by request (endpoint vs baseline, 95% bootstrap): " + verdicts_;
    if (!saved_.empty()) s += fmt::format("; pass 1's requests saved to {} (vLLM's --save-result format)", saved_);
    if (validator_ && !a.valid.empty())
      s += fmt::format(
          "; response_format {} (no ignore_eos): pass 1's answers {:.0f}% JSON, {:.0f}% valid documents by our "
          "validator",
          keys_.response_schema, a.parsed.front(), a.valid.front());
    s += fmt::format(
        "; metrics: medians of {} pass{}{}, each with prompt tokens no earlier pass of this run sent to the server (the "
        "same lengths and arrivals){}",
        a.runs.size(), a.runs.size() == 1 ? "" : "es",
        warmups_ ? fmt::format(" after {} unmeasured warm-up pass{}", warmups_, warmups_ == 1 ? "" : "es") : std::string(),
        paired_ ? ", the two servers sent the same requests in alternating turns" : "");
    for (size_t i = 0; i < sides_.size(); ++i) {
      const Side& side = sides_[i];
      const std::string who = paired_ ? (i == 0 ? "endpoint" : "baseline") : "the server";
      if (side.runs.empty()) continue;
      const EndpointSummary& f = side.runs.front();
      if (f.cache_reported > 0)
        s += fmt::format(
            "; cache state by {}'s usage (prompt_tokens_details.cached_tokens): {:.1f}% of pass 1's prompt tokens "
            "cached",
            who, f.input_tokens ? 100.0 * static_cast<double>(f.cached_tokens) / static_cast<double>(f.input_tokens) : 0.0);
      if (side.prefix_hit.empty()) {
        if (f.cache_reported == 0)
          s += fmt::format("; {} reports no prefix-cache state (neither vllm:prefix_cache_* counters nor cached_tokens)", who);
        continue;
      }
      s += fmt::format("; cache state by {}'s own counters: {:.1f}% of prompt tokens hit its prefix cache in pass 1", who,
                       side.prefix_hit.front());
      if (side.prefix_unread > 0) s += fmt::format(" ({} passes unread)", side.prefix_unread);
    }
    return s;
  }

 private:
  // One pass of the load on one server; its duration.
  double run_pass(Side& side, const std::vector<Request>& trace, const std::vector<std::string>& texts,
                  const std::vector<int>& chat_counts, const std::string& save_to) {
    const auto before = endpoint_prefix_counters(side.options.url, api_key_, 10);
    const EndpointLoadResult r = run_endpoint_load(side.options, trace, texts, &interrupted);
    if (!save_to.empty()) {
      EndpointResultFile f;
      f.endpoint = side.options.url;
      f.model = side.options.model;
      f.load = load_;
      f.workload_seed = keys_.workload_seed;
      f.shard = shard_;
      f.shards = shards_;
      f.start_at = r.start_epoch;
      f.request_rate = keys_.qps;
      f.burstiness = keys_.arrival == Arrival::Gamma ? keys_.burstiness : 1.0;
      f.max_concurrency = static_cast<int>(keys_.max_concurrency);
      f.slo = {keys_.slo_ttft, keys_.slo_tpot};
      f.result = r;
      write_file_atomic(save_to, endpoint_result_json(f));
      saved_ = save_to;
    }
    const auto after = endpoint_prefix_counters(side.options.url, api_key_, 10);
    // A counter a server has not yet incremented may not be exported at all (ours until its first
    // request): absent before and present after, it started from zero.
    const PrefixCounters from = before.value_or(PrefixCounters{});
    if (after && after->queries > from.queries)
      side.prefix_hit.push_back(100.0 * (after->hits - from.hits) / (after->queries - from.queries));
    else
      ++side.prefix_unread;
    const Slo slo{keys_.slo_ttft, keys_.slo_tpot};
    std::vector<Observed> obs(r.requests.size());
    for (size_t i = 0; i < r.requests.size(); ++i) {
      const EndpointRecord& q = r.requests[i];
      ++side.sent;
      if (q.failure.find("prompt tokens") != std::string::npos) {
        ++side.prompt_off;
        if (side.first_off.empty()) side.first_off = fmt::format("; {} request {}: {}", side.options.url, q.id, q.failure);
      }
      if (!q.failure.empty()) continue;
      if (!chat_counts.empty() && chat_counts[i] > 0 && q.usage_prompt >= 0) {
        ++side.chat_checked;
        if (q.usage_prompt != chat_counts[i]) {
          ++side.chat_off;
          if (side.first_chat_off.empty())
            side.first_chat_off = fmt::format("request {}: {} counted by the server, {} by the checkpoint's template", q.id,
                                              q.usage_prompt, chat_counts[i]);
        }
      }
      Observed& o = obs[i];
      o.ok = true;
      const RequestLatency l = request_latency(q);
      o.ttft = l.ttft;
      o.e2e = l.e2e;
      o.tpot = l.tpot;
      o.within_slo = l.within(slo);
      o.text = q.text;
      if (validator_) {
        try {
          const auto doc = parse_json_bounded<constrain::SchemaValidator::json>(q.text, "an answer", 256);
          o.parsed = true;
          o.valid = validator_->valid(doc);
        } catch (const std::exception&) {
        }
      }
    }
    if (validator_) {
      size_t done = 0, parsed = 0, valid = 0, good = 0;
      for (const Observed& o : obs) {
        done += o.ok;
        parsed += o.parsed;
        valid += o.valid;
        good += o.valid && o.within_slo;
      }
      side.parsed.push_back(done ? 100.0 * static_cast<double>(parsed) / static_cast<double>(done) : 0);
      side.valid.push_back(done ? 100.0 * static_cast<double>(valid) / static_cast<double>(done) : 0);
      side.valid_goodput.push_back(r.duration > 0 ? static_cast<double>(good) / r.duration : 0);
    }
    side.observed.push_back(std::move(obs));
    side.runs.push_back(summarize_endpoint(r, slo, keys_.max_send_lag));
    return r.duration;
  }

  // The endpoint against the baseline, request by request over every pass: each percentile's
  // ratio (baseline / endpoint: above 1 the endpoint is faster) with a paired bootstrap interval;
  // the share of requests whose greedy text is the baseline's (a lossless technique changes none);
  // goodput that counts a request only when it met the SLOs and its text is the baseline's.
  void pair_up() {
    const Side &a = sides_[0], &b = sides_[1];
    std::vector<std::vector<double>> va(std::size(kPaired)), vb(std::size(kPaired));
    size_t both = 0, same = 0;
    std::vector<double> good_same;
    for (size_t pass = 0; pass < a.observed.size() && pass < b.observed.size(); ++pass) {
      size_t good = 0;
      for (size_t i = 0; i < a.observed[pass].size(); ++i) {
        const Observed &x = a.observed[pass][i], &y = b.observed[pass][i];
        if (!x.ok || !y.ok) continue;
        ++both;
        same += x.text == y.text;
        good += x.within_slo && x.text == y.text;
        for (size_t k = 0; k < std::size(kPaired); ++k) {
          if (kPaired[k].field == &Observed::tpot && (x.tpot <= 0 || y.tpot <= 0)) continue;
          va[k].push_back(x.*kPaired[k].field);
          vb[k].push_back(y.*kPaired[k].field);
        }
      }
      const double d = a.runs[pass].duration;
      good_same.push_back(d > 0 ? static_cast<double>(good) / d : 0);
    }
    same_text_ = both ? 100.0 * static_cast<double>(same) / static_cast<double>(both) : 0;
    good_and_same_ = median_of(good_same);
    speedups_.clear();
    verdicts_.clear();
    for (size_t k = 0; k < std::size(kPaired); ++k) {
      speedups_.push_back(paired_percentile_speedup(vb[k], va[k], kPaired[k].q, seed_ + k));
      const Speedup& sp = speedups_.back();
      verdicts_ += fmt::format("{}{} {:.2f}x [{:.2f}, {:.2f}] {}", k ? "; " : "", kPaired[k].name, sp.ratio, sp.lo, sp.hi,
                               sp.verdict == Verdict::Faster   ? "faster"
                               : sp.verdict == Verdict::Slower ? "slower"
                                                               : "same");
    }
    verdicts_ += fmt::format(" ({} pairs); greedy text identical to the baseline's in {:.1f}%", both, same_text_);
  }

  // Each metric's median over the passes: one pass of a load is one draw of its arrival timing
  // and of the machines' noise.
  std::vector<Metric> medians(const Side& side) const {
    std::vector<std::vector<Metric>> per_run;
    for (const auto& s : side.runs) per_run.push_back(metrics_of(s));
    std::vector<Metric> m = median_of_runs(per_run);
    if (!side.prefix_hit.empty()) m.push_back({"prefix hit", median_of(side.prefix_hit), "%"});
    std::vector<double> cached;
    for (const auto& r : side.runs)
      if (r.cache_reported > 0 && r.input_tokens > 0)
        cached.push_back(100.0 * static_cast<double>(r.cached_tokens) / static_cast<double>(r.input_tokens));
    if (!cached.empty()) m.push_back({"cached", median_of(cached), "%"});
    if (!side.valid.empty()) {
      m.push_back({"parsed", median_of(side.parsed), "%"});
      m.push_back({"valid", median_of(side.valid), "%"});
      m.push_back({"valid goodput", median_of(side.valid_goodput), "req/s"});
    }
    return m;
  }

  // Which draw of prompt tokens the next pass sends: one that no earlier pass of this process sent
  // to these servers (a sweep's rows reach one server one after another, and a server with a
  // prefix cache, llama.cpp's slots included, would find an earlier row's prompts). Different
  // servers of one sweep get the same draws, so they are sent the same requests.
  int next_draw() const {
    static std::mutex m;
    static std::map<std::string, int> sent;  // server -> draws sent to it
    std::lock_guard<std::mutex> lock(m);
    int draw = 0;
    for (const Side& side : sides_) draw = std::max(draw, sent[side.options.url]);
    for (const Side& side : sides_) sent[side.options.url] = draw + 1;
    return draw;
  }

  // Pass `pass`'s chat messages, and what the checkpoint's template makes of each (0: no
  // template). Seeded prompts are fitted so that the templated prompt is exactly the tokens asked:
  // token ids decoded to text do not tokenize back to as many (vLLM #10847: 10,000 asked, ~5,800
  // sent), so tokens are cut or added until they do. A dataset's texts are sent as they are.
  // Returns how many prompts the fitting left at another length, and the largest difference.
  std::pair<size_t, int> chat_prompts(const std::vector<Request>& trace, int pass, std::vector<std::string>& texts,
                                      std::vector<int>& counts) {
    texts.clear();
    counts.clear();
    auto count = [&](const std::string& text) {
      return static_cast<int>(tokenizer_->encode(chat_template_->render({{"user", text}}, true), false).size());
    };
    std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed) * 31 + static_cast<uint64_t>(pass) + 0xc4a7);
    std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
    size_t unfit = 0;
    int worst = 0;
    for (const Request& r : trace) {
      if (!chat_template_) {
        texts.push_back(tokenizer_->decode(r.prompt, true));
        continue;
      }
      if (!keys_.dataset.empty()) {
        texts.push_back(tokenizer_->decode(r.prompt, true));
        counts.push_back(count(texts.back()));
        continue;
      }
      const int want = static_cast<int>(r.prompt.size());
      const size_t keep = static_cast<size_t>(keys_.system_prompt);  // the shared system prompt stays whole
      std::vector<int32_t> ids = r.prompt;
      std::string text = tokenizer_->decode(ids, true);
      int n = count(text);
      for (int step = 0; step < 24 && n != want; ++step) {
        if (n > want) {
          const size_t cut = std::min(static_cast<size_t>(n - want), ids.size() > keep + 1 ? ids.size() - keep - 1 : 0);
          if (cut == 0) break;
          ids.resize(ids.size() - cut);
        } else {
          for (int k = 0; k < want - n; ++k) ids.push_back(token(rng));
        }
        text = tokenizer_->decode(ids, true);
        n = count(text);
      }
      if (n != want) {
        ++unfit;
        worst = std::max(worst, std::abs(n - want));
      }
      texts.push_back(std::move(text));
      counts.push_back(n);
    }
    return {unfit, worst};
  }

  // The seeded load with a draw's prompt tokens: the same arrivals and lengths, and within a pass
  // the same shared system prompt (and trace blocks), but nothing another draw sent. A dataset's
  // prompts keep their text: a fresh system prompt, or without one a fresh first token, keeps
  // another draw's cached prefix from matching.
  std::vector<Request> fresh_tokens(int pass) const {
    std::vector<Request> t = base_;
    if (pass == 0) return t;
    std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed) * 0x9e37'79b9'7f4a'7c15ULL + static_cast<uint64_t>(pass));
    std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
    std::vector<int32_t> system(static_cast<size_t>(keys_.system_prompt));
    for (auto& x : system) x = token(rng);
    for (size_t k = 0; k < t.size(); ++k) {
      std::vector<int32_t>& p = t[k].prompt;
      std::copy(system.begin(), system.end(), p.begin());
      if (!keys_.dataset.empty()) {
        if (system.empty() && !p.empty()) p[0] = token(rng);
      } else if (!blocks_.empty() && !blocks_[k].empty()) {
        const std::vector<int32_t> b = block_tokens(blocks_[k], p.size() - system.size(), pass, t[k].id);
        std::copy(b.begin(), b.end(), p.begin() + static_cast<std::ptrdiff_t>(system.size()));
      } else {
        for (size_t i = system.size(); i < p.size(); ++i) p[i] = token(rng);
      }
    }
    return t;
  }

  // A trace's prompt of `n` tokens from its blocks: block h's tokens are drawn from a seed of h
  // (and the draw), so requests naming the same blocks share those tokens.
  std::vector<int32_t> block_tokens(const std::vector<int64_t>& hash_ids, size_t n, int pass, int64_t request) const {
    std::vector<int32_t> out;
    out.reserve(n);
    std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
    for (size_t b = 0; out.size() < n; ++b) {
      // Past the listed blocks (an input_length longer than they cover): tokens of this request alone.
      const uint64_t h = b < hash_ids.size() ? static_cast<uint64_t>(hash_ids[b])
                                             : (static_cast<uint64_t>(request) << 24 | b) ^ 0xa5a5'0000'0000'0000ULL;
      std::mt19937_64 rng((h + 1) * 0x9e37'79b9'7f4a'7c15ULL ^ (static_cast<uint64_t>(keys_.workload_seed) << 20) ^
                          static_cast<uint64_t>(pass) ^ (b < hash_ids.size() ? 0 : 0x5bd1'e995ULL));
      for (int64_t i = 0; i < keys_.trace_block && out.size() < n; ++i) out.push_back(token(rng));
    }
    return out;
  }

  // Arrival times (and lengths and prompt blocks where the trace has them) from keys_.trace.
  std::string apply_trace() {
    const std::vector<TraceEntry> trace =
        read_arrival_trace(keys_.trace, keys_.trace_time_unit == "s" ? 1.0 : 1e-3, static_cast<size_t>(keys_.requests));
    base_.resize(std::min(base_.size(), trace.size()));
    const size_t sys = static_cast<size_t>(keys_.system_prompt);
    std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed) ^ 0x7261'6365ULL);
    std::uniform_int_distribution<int32_t> token(0, vocab_ - 1);
    blocks_.assign(base_.size(), {});
    size_t lengths = 0, blocked = 0;
    for (size_t i = 0; i < base_.size(); ++i) {
      Request& r = base_[i];
      const TraceEntry& e = trace[i];
      r.arrival = e.time;
      if (e.output_length > 0) r.max_tokens = e.output_length;
      if (!keys_.dataset.empty()) continue;  // the dataset's prompts; the trace's times
      size_t n = r.prompt.size() - sys;
      if (e.input_length > 0) {
        n = static_cast<size_t>(e.input_length);
        ++lengths;
      } else if (!e.hash_ids.empty()) {
        n = e.hash_ids.size() * static_cast<size_t>(keys_.trace_block);
      }
      r.prompt.resize(sys + n);
      if (!e.hash_ids.empty()) {
        blocks_[i] = e.hash_ids;
        const std::vector<int32_t> b = block_tokens(e.hash_ids, n, 0, r.id);
        std::copy(b.begin(), b.end(), r.prompt.begin() + static_cast<std::ptrdiff_t>(sys));
        ++blocked;
      } else {
        for (size_t k = sys; k < r.prompt.size(); ++k) r.prompt[k] = token(rng);
      }
    }
    return fmt::format("; arrivals from {} ({} of its requests{}{})", keys_.trace, base_.size(),
                       lengths ? fmt::format(", {} with its prompt lengths", lengths) : "",
                       blocked ? fmt::format(", {} with its shared {}-token prompt blocks", blocked, keys_.trace_block) : "");
  }

  // Prompts (and output lengths) from keys_.dataset's conversations, in a seeded order.
  std::string apply_dataset() {
    size_t skipped = 0;
    const std::vector<Conversation> convs = read_conversations(keys_.dataset, 1u << 22, &skipped);
    std::vector<size_t> order(convs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(static_cast<uint64_t>(keys_.workload_seed));
    std::shuffle(order.begin(), order.end(), rng);
    const size_t sys = static_cast<size_t>(keys_.system_prompt);
    std::vector<int32_t> system(base_.empty() ? std::vector<int32_t>()
                                              : std::vector<int32_t>(base_[0].prompt.begin(),
                                                                     base_[0].prompt.begin() + static_cast<std::ptrdiff_t>(sys)));
    size_t used = 0, filtered = 0, next = 0;
    std::vector<std::pair<std::vector<int32_t>, int>> taken;  // prompt ids, answer tokens
    for (Request& r : base_) {
      // The next conversation that passes the filters; once all are used, from the first again.
      while (taken.size() <= used && next < order.size()) {
        const Conversation& c = convs[order[next++]];
        std::vector<int32_t> ids = tokenizer_->encode(c.prompt);
        const size_t answer = tokenizer_->encode(c.reply, false).size();
        if (ids.size() < kDatasetMinTokens || answer < kDatasetMinTokens || ids.size() > kDatasetMaxPrompt ||
            ids.size() + answer > kDatasetMaxTotal) {
          ++filtered;
          continue;
        }
        taken.emplace_back(std::move(ids), static_cast<int>(answer));
      }
      if (taken.empty())
        throw InputError(
            fmt::format("none of {}'s {} conversations passes vLLM's filters (prompt and answer of "
                        "at least 4 tokens, a prompt of at most 1,024, both of at most 2,048)",
                        keys_.dataset, convs.size()));
      const auto& [ids, answer] = taken[used % taken.size()];
      ++used;
      r.prompt = system;
      r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
      r.max_tokens = keys_.dataset_output_len > 0 ? static_cast<int>(keys_.dataset_output_len) : answer;
      r.type = 's';
    }
    return fmt::format(
        "; prompts from {} ({} conversations{}{}{})", keys_.dataset, std::min(used, taken.size()),
        used > taken.size() ? fmt::format(", each used up to {} times", (used + taken.size() - 1) / taken.size()) : "",
        filtered ? fmt::format(", {} left out by vLLM's length filters", filtered) : "",
        skipped ? fmt::format(", {} without an answered user turn", skipped) : "");
  }

  std::vector<Metric> metrics_of(const EndpointSummary& s) const {
    std::vector<Metric> m = {
        {"ttft p50", s.ttft.p50 * 1e3, "ms"},
        {"ttft p99", s.ttft.p99 * 1e3, "ms"},
        {"tpot p50", s.tpot.p50 * 1e3, "ms"},
        {"tpot p99", s.tpot.p99 * 1e3, "ms"},
        {"itl p50", s.itl.p50 * 1e3, "ms"},
        {"itl p99", s.itl.p99 * 1e3, "ms"},
        {"e2e p50", s.e2e.p50 * 1e3, "ms"},
        {"e2e p99", s.e2e.p99 * 1e3, "ms"},
        {"req/s", s.request_rate, "req/s"},
        {"tok/s", s.output_rate, "tok/s"},
        {"total tok/s", s.total_token_rate, "tok/s"},
        {"completed", static_cast<double>(s.completed), ""},
        {"failed", static_cast<double>(s.failed), ""},
        {"lag p99", s.lag.p99 * 1e3, "ms"},
        {"lagged", static_cast<double>(s.lagged), ""},
        {"client cpu", s.client_cpu * 100, "%"},
    };
    if (keys_.slo_ttft > 0 || keys_.slo_tpot > 0) m.push_back({"goodput", s.goodput, "req/s"});
    return m;
  }

  bool paired_;
  EndpointKeys keys_;
  uint64_t seed_ = 0;
  std::string api_key_, workload_, load_, saved_;
  int shard_ = 0, shards_ = 1;
  int vocab_ = 0;
  std::vector<Request> base_;
  std::vector<std::vector<int64_t>> blocks_;  // per request, the trace's prompt blocks (empty: none)
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::shared_ptr<const model::ChatTemplate> chat_template_;  // api chat: the checkpoint's, to count prompts by
  int64_t warmups_ = 0;                                       // unmeasured passes run before the measured ones
  size_t chat_unfit_ = 0;  // chat prompts the fitting left at another length than asked, over the passes
  int worst_unfit_ = 0;
  constrain::SchemaValidator::json schema_;
  std::unique_ptr<constrain::SchemaValidator> validator_;  // keeps a reference to schema_
  std::string response_format_;
  std::vector<Side> sides_;
  std::vector<Speedup> speedups_;
  std::string verdicts_;
  double same_text_ = 0, good_and_same_ = 0;
};

KindInfo endpoint_kind() {
  KindInfo k;
  k.name = "serve-endpoint";
  // Nothing listens on port 9 (discard): the rows are unsupported, saying so (a server is not ours
  // to start; tests/cli/serve_test.py runs the client against `infer-bench serve`).
  k.smallest =
      "weights: data/models/ib-draft-1m\nendpoint: http://127.0.0.1:9\nbaseline_endpoint: http://127.0.0.1:9\nrequests: 2\n"
      "prompt_len: 8\noutput_len: 4\n";
  k.group = "load";
  k.doc =
      "A running OpenAI-compatible server under a seeded load sent over HTTP (infer-bench serve, llama.cpp's llama-server, "
      "vLLM, SGLang): requests at Poisson or bursty arrivals, streamed, at most max_concurrency in flight, prompts as token "
      "ids of exactly the lengths asked (checked against the server's usage). Measured from the client's side as vLLM's "
      "benchmark_serving defines it: TTFT, TPOT, ITL, E2E percentiles, request and token throughput, goodput under SLOs; "
      "every request accounted for (a refusal, timeout, cut stream, malformed event or wrong token count fails that "
      "request with its reason); the client's send lag and CPU use reported, so a row whose client could not keep up "
      "says so.";
  k.keys = endpoint_keys().keys();
  k.check = [](const auto& values) -> std::optional<KeyProblem> {
    for (const char* key : {"endpoint", "weights"}) {
      auto it = values.find(key);
      if (it == values.end()) return KeyProblem{{key}, fmt::format("{} is required", key)};
      for (const Value& v : it->second)
        if (std::get<std::string>(v).empty())
          return KeyProblem{{key},
                            key == std::string("weights")
                                ? "weights is required: the checkpoint the server serves (its vocabulary)"
                                : "endpoint is empty: http://HOST:PORT"};
    }
    for (const char* key : {"endpoint", "baseline_endpoint"}) {
      auto it = values.find(key);
      if (it == values.end()) continue;
      for (const Value& v : it->second) {
        const std::string& url = std::get<std::string>(v);
        if (!url.empty() && url.rfind("http://", 0) != 0)
          return KeyProblem{{key}, fmt::format("'{}' is not http://HOST:PORT (https is not supported)", url)};
      }
    }
    return std::nullopt;
  };
  return k;
}

const KindRegistration endpoint_registration(endpoint_kind());

const VariantRegistration reg_endpoint(
    "serve-endpoint",
    peer({"endpoint",
          Backend::Cpu,
          "the client: the load sent over HTTP to the server at `endpoint`, streamed, measured "
          "at the client (the server runs wherever it runs; the client is host work on any backend)",
          {},
          true}),
    make_variant<EndpointLoad>(false));
const VariantRegistration reg_paired("serve-endpoint",
                                     peer({"paired",
                                           Backend::Cpu,
                                           "A/B: the identical seeded requests sent to `endpoint` and to `baseline_endpoint` in "
                                           "alternating turns; each percentile's ratio with a paired bootstrap interval and a "
                                           "verdict, the share of identical greedy texts, and goodput counting only requests "
                                           "within the SLOs whose text is the baseline's",
                                           {},
                                           true}),
                                     make_variant<EndpointLoad>(true));

}  // namespace
}  // namespace ib::serve
