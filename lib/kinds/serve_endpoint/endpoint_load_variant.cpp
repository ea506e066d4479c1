// The serve-endpoint variants' passes (endpoint_load_variant.h): a load's passes on each server,
// what each request measured, the paired comparison and the metrics.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/interrupt.h"
#include "core/json_input.h"
#include "core/metrics.h"
#include "core/output.h"
#include "core/spec.h"
#include "kinds/serve_endpoint/endpoint_load_variant.h"
#include "model/checkpoint.h"
#include "serve/arrival_trace.h"
#include "serve/conversation_dataset.h"
#include "serve/endpoint_result_file.h"

namespace ib::serve {
namespace {

double median_of(const std::vector<double>& v) { return summarize(v).median; }

}  // namespace

void EndpointLoad::prepare(const Point& p, BackendRuntime&, uint64_t seed) {
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
  base_ = workload::make_workload(workload_options(keys_), vocab_, static_cast<uint64_t>(keys_.workload_seed));
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
    base_.erase(std::find_if(base_.begin(), base_.end(), [&](const workload::Request& r) { return r.arrival >= keys_.duration; }),
                base_.end());
    if (!blocks_.empty()) blocks_.resize(base_.size());
    if (base_.empty())
      throw InputError(fmt::format("duration: no request is due before {:g} s (the first at {:.3g} s)", keys_.duration, first));
    if (base_.size() < drawn)
      sources += fmt::format("; cut at {:g} s: {} of {} requests sent", keys_.duration, base_.size(), drawn);
  }
  // The dataset after the cut: only the requests sent draw conversations.
  if (!keys_.dataset.empty()) sources += with_key("dataset", [&] { return apply_dataset(); });
  load_ = workload::describe_load(base_) + sources;
  if (chat_template_ && keys_.dataset.empty()) {
    // A chat prompt's length counts the template's own tokens around the message.
    const size_t around = tokenizer_->encode(chat_template_->render({{"user", ""}}, true), false).size();
    for (const workload::Request& r : base_)
      if (r.prompt.size() <= around + static_cast<size_t>(keys_.system_prompt))
        throw InputError(
            fmt::format("prompt_len: a chat prompt of {} tokens leaves no room for a message: the chat "
                        "template of {} takes {} tokens around one{}",
                        r.prompt.size(), keys_.weights, around,
                        keys_.system_prompt ? fmt::format(", and system_prompt {}", keys_.system_prompt) : std::string()));
  }
  if (shards_ > 1) {
    // This client's share of the schedule: the same requests at the same times as in the whole load.
    std::vector<workload::Request> mine;
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
    response_format_ =
        nlohmann::json{{"type", "json_schema"},
                       {"json_schema", {{"name", "load"}, {"schema", ib::parse_json<nlohmann::json>(schema_.dump())}}}}
            .dump();
  }
}

std::optional<SelfMeasurement> EndpointLoad::measure_self(BackendRuntime&, const RunControl& c) {
  SelfMeasurement m;
  if (!endpoint_client_available()) {
    m.unsupported = "built without cpp-httplib (INFER_BENCH_HTTP=OFF): no HTTP client";
    return m;
  }
  sides_.assign(paired_ ? 2 : 1, ServerSide{});
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
    const std::vector<workload::Request> trace = fresh_tokens(next_draw());
    std::vector<std::string> texts;
    std::vector<int> chat_counts;
    if (keys_.api == "chat") chat_prompts(trace, -1 - static_cast<int>(warmups_), texts, chat_counts);  // fit not counted
    for (ServerSide& side : sides_) {
      EndpointOptions o = side.options;
      o.start_at = 0;
      run_endpoint_load(o, trace, texts, &interrupted);
    }
  }
  // A paired measurement needs passes to alternate the order in; each pass is a whole load.
  const int passes = static_cast<int>(std::clamp<int64_t>(c.min_samples, paired_ ? 2 : 1, 20));
  for (int pass = 0; pass < passes && !interrupted(); ++pass) {
    const std::vector<workload::Request> trace = fresh_tokens(next_draw());
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
  for (const ServerSide& s : sides_) {
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
    const ServerSide& dead = done_a == 0 ? sides_[0] : sides_[1];
    m.validation.detail = fmt::format("no request completed at {}: {}", dead.options.url, describe_failures(dead.runs.front()));
  } else if (keys_.api == "chat") {
    size_t checked = 0, chat_off = 0;
    std::string first;
    for (const ServerSide& s : sides_) {
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

std::vector<Metric> EndpointLoad::metrics() const {
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

std::string EndpointLoad::note() const {
  if (sides_.empty()) return fmt::format("{} (weights {})", workload_, keys_.weights);
  const ServerSide& a = sides_[0];
  std::string s =
      fmt::format("{} at {}{} (weights {}): {}; {}, max_concurrency {}", a.options.model, a.options.url,
                  paired_ ? fmt::format(" against {} at {}", sides_[1].options.model, sides_[1].options.url) : "", keys_.weights,
                  workload_, keys_.api == "chat" ? "chat, decoded text" : "completions, token ids", keys_.max_concurrency);
  for (size_t i = 0; i < sides_.size(); ++i) {
    const ServerSide& side = sides_[i];
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
    const ServerSide& side = sides_[i];
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
  for (size_t i = 0; i < sides_.size(); ++i) {
    const ServerSide& side = sides_[i];
    if (side.spec_kept.empty()) continue;
    s += fmt::format(
        "; speculative decoding by {}'s own counters (vllm:spec_decode_*): {:.0f} tokens drafted in pass 1, "
        "{:.1f}% kept",
        paired_ ? (i == 0 ? "endpoint" : "baseline") : "the server", side.spec_drafted.front(), side.spec_kept.front());
  }
  return s;
}

double EndpointLoad::run_pass(ServerSide& side, const std::vector<workload::Request>& trace,
                              const std::vector<std::string>& texts, const std::vector<int>& chat_counts,
                              const std::string& save_to) {
  const auto before = endpoint_counters(side.options.url, api_key_, 10);
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
    f.burstiness = keys_.arrival == workload::Arrival::Gamma ? keys_.burstiness : 1.0;
    f.max_concurrency = static_cast<int>(keys_.max_concurrency);
    f.slo = {keys_.slo_ttft, keys_.slo_tpot};
    f.result = r;
    write_file_atomic(save_to, endpoint_result_json(f));
    saved_ = save_to;
  }
  const auto after = endpoint_counters(side.options.url, api_key_, 10);
  // A counter a server has not yet incremented may not be exported at all (ours until its first
  // request): absent before and present after, it started from zero.
  const PrefixCounters from = before && before->prefix ? *before->prefix : PrefixCounters{};
  if (after && after->prefix && after->prefix->queries > from.queries)
    side.prefix_hit.push_back(100.0 * (after->prefix->hits - from.hits) / (after->prefix->queries - from.queries));
  else
    ++side.prefix_unread;
  const SpecCounters drafted_from = before && before->spec ? *before->spec : SpecCounters{};
  if (after && after->spec && after->spec->drafted > drafted_from.drafted) {
    const double drafted = after->spec->drafted - drafted_from.drafted;
    side.spec_drafted.push_back(drafted);
    side.spec_kept.push_back(100.0 * (after->spec->accepted - drafted_from.accepted) / drafted);
  }
  const Slo slo{keys_.slo_ttft, keys_.slo_tpot};
  std::vector<ObservedRequest> obs(r.requests.size());
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
    ObservedRequest& o = obs[i];
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
    for (const ObservedRequest& o : obs) {
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

void EndpointLoad::pair_up() {
  const ServerSide &a = sides_[0], &b = sides_[1];
  std::vector<std::vector<double>> va(std::size(kPaired)), vb(std::size(kPaired));
  size_t both = 0, same = 0;
  std::vector<double> good_same;
  for (size_t pass = 0; pass < a.observed.size() && pass < b.observed.size(); ++pass) {
    size_t good = 0;
    for (size_t i = 0; i < a.observed[pass].size(); ++i) {
      const ObservedRequest &x = a.observed[pass][i], &y = b.observed[pass][i];
      if (!x.ok || !y.ok) continue;
      ++both;
      same += x.text == y.text;
      good += x.within_slo && x.text == y.text;
      for (size_t k = 0; k < std::size(kPaired); ++k) {
        if (kPaired[k].field == &ObservedRequest::tpot && (x.tpot <= 0 || y.tpot <= 0)) continue;
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

std::vector<Metric> EndpointLoad::medians(const ServerSide& side) const {
  std::vector<std::vector<Metric>> per_run;
  for (const auto& s : side.runs) per_run.push_back(metrics_of(s));
  std::vector<Metric> m = median_of_runs(per_run);
  if (!side.prefix_hit.empty()) m.push_back({"prefix hit", median_of(side.prefix_hit), "%"});
  if (!side.spec_kept.empty()) m.push_back({"draft kept", median_of(side.spec_kept), "%"});
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

std::vector<Metric> EndpointLoad::metrics_of(const EndpointSummary& s) const {
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

}  // namespace ib::serve
