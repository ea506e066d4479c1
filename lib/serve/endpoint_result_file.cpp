#include "serve/endpoint_result_file.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "core/stats.h"
#include "serve/endpoint_metrics.h"

namespace ib::serve {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxFile = uint64_t{1} << 30;

// vLLM's four statistics of one metric, in ms.
void add_stats(json& j, const std::string& name, std::vector<double> seconds) {
  double mean = 0, median = 0, stdev = 0, p99 = 0;
  if (!seconds.empty()) {
    std::sort(seconds.begin(), seconds.end());
    mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
    double v = 0;
    for (double x : seconds) v += (x - mean) * (x - mean);
    stdev = std::sqrt(v / static_cast<double>(seconds.size()));  // numpy's std (population)
    median = percentile_sorted(seconds, 0.5);
    p99 = percentile_sorted(seconds, 0.99);
  }
  j["mean_" + name + "_ms"] = mean * 1e3;
  j["median_" + name + "_ms"] = median * 1e3;
  j["std_" + name + "_ms"] = stdev * 1e3;
  j["p99_" + name + "_ms"] = p99 * 1e3;
}

std::string utc_stamp(double epoch) {
  const std::time_t t = static_cast<std::time_t>(epoch);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

bool in_shard(int64_t request, int shard, int shards) { return shards <= 1 || request % shards == shard; }

std::pair<int, int> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  int i = -1, n = 0;
  try {
    if (slash != std::string::npos) {
      size_t a = 0, b = 0;
      i = std::stoi(text.substr(0, slash), &a);
      n = std::stoi(text.substr(slash + 1), &b);
      if (a != slash || b != text.size() - slash - 1) n = 0;
    }
  } catch (const std::exception&) {
    n = 0;
  }
  if (n < 1 || n > 4096 || i < 0 || i >= n)
    throw InputError(fmt::format("shard: '{}' is not i/N with 0 <= i < N <= 4096 (this client's part of N)", text));
  return {i, n};
}

std::string endpoint_result_json(const EndpointResultFile& f) {
  const EndpointLoadResult& r = f.result;
  const EndpointSummary s = summarize_endpoint(r, f.slo, 1e9);
  json j;
  j["date"] = utc_stamp(f.start_at);
  j["backend"] = "openai";
  j["model_id"] = f.model;
  j["tokenizer_id"] = f.model;
  j["num_prompts"] = r.requests.size();
  j["request_rate"] = f.request_rate > 0 ? json(f.request_rate) : json("inf");
  j["burstiness"] = f.burstiness;
  j["max_concurrency"] = f.max_concurrency > 0 ? json(f.max_concurrency) : json(nullptr);
  j["duration"] = r.duration;
  j["completed"] = s.completed;
  j["total_input_tokens"] = s.input_tokens;
  j["total_output_tokens"] = s.output_tokens;
  j["request_throughput"] = s.request_rate;
  j["request_goodput"] = (f.slo.ttft > 0 || f.slo.tpot > 0) ? json(s.goodput) : json(nullptr);
  j["output_throughput"] = s.output_rate;
  j["total_token_throughput"] = s.total_token_rate;
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(), itls = json::array(),
       texts = json::array(), errors = json::array(), records = json::array();
  std::vector<double> ttft, tpot, itl, e2e;
  for (const EndpointRecord& q : r.requests) {
    const bool ok = q.failure.empty();
    const RequestLatency l = ok ? request_latency(q) : RequestLatency{};
    input_lens.push_back(q.usage_prompt >= 0 ? q.usage_prompt : q.prompt_tokens);
    output_lens.push_back(l.output_tokens);
    json gaps = json::array();
    const double first = l.ttft;
    if (ok) {
      ttft.push_back(l.ttft);
      e2e.push_back(l.e2e);
      if (l.output_tokens > 1) tpot.push_back(l.tpot);
      for (size_t i = 1; i < q.output_times.size(); ++i) {
        gaps.push_back(q.output_times[i] - q.output_times[i - 1]);
        itl.push_back(q.output_times[i] - q.output_times[i - 1]);
      }
    }
    ttfts.push_back(first);
    itls.push_back(gaps);
    texts.push_back(q.text);
    errors.push_back(q.failure);
    records.push_back({{"id", q.id},
                       {"type", std::string(1, q.type)},
                       {"prompt_tokens", q.prompt_tokens},
                       {"max_tokens", q.max_tokens},
                       {"scheduled", q.scheduled},
                       {"sent", q.sent},
                       {"lag", q.lag},
                       {"end", q.end},
                       {"output_times", q.output_times},
                       {"usage_prompt", q.usage_prompt},
                       {"usage_completion", q.usage_completion},
                       {"usage_cached", q.usage_cached},
                       {"finish_reason", q.finish_reason}});
  }
  j["input_lens"] = input_lens;
  j["output_lens"] = output_lens;
  j["ttfts"] = ttfts;
  j["itls"] = itls;
  j["generated_texts"] = texts;
  j["errors"] = errors;
  add_stats(j, "ttft", ttft);
  add_stats(j, "tpot", tpot);
  add_stats(j, "itl", itl);
  add_stats(j, "e2el", e2e);
  j["infer_bench"] = {
      {"version", 1},         {"endpoint", f.endpoint}, {"load", f.load},         {"workload_seed", f.workload_seed},
      {"shard", f.shard},     {"shards", f.shards},     {"start_at", f.start_at}, {"client_cpu", r.client_cpu},
      {"threads", r.threads}, {"slo_ttft", f.slo.ttft}, {"slo_tpot", f.slo.tpot}, {"requests", records}};
  return j.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

EndpointResultFile read_endpoint_result(const std::string& path) {
  const json j = [&] {
    try {
      return parse_json_bounded(read_input_file(path, kMaxFile), path, 64);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: not JSON ({})", path, e.what()));
    }
  }();
  auto need = [&](const json& o, const char* key) -> const json& {
    if (!o.is_object() || !o.contains(key))
      throw InputError(fmt::format("{}: no '{}' (not a result file of infer-bench load's save_result)", path, key));
    return o[key];
  };
  EndpointResultFile f;
  try {
    const json& ib = need(j, "infer_bench");
    if (need(ib, "version").get<int>() != 1) throw InputError(fmt::format("{}: infer_bench.version is not 1", path));
    f.endpoint = need(ib, "endpoint").get<std::string>();
    f.model = need(j, "model_id").get<std::string>();
    f.load = need(ib, "load").get<std::string>();
    f.workload_seed = need(ib, "workload_seed").get<int64_t>();
    f.shard = need(ib, "shard").get<int>();
    f.shards = need(ib, "shards").get<int>();
    f.start_at = need(ib, "start_at").get<double>();
    f.slo = {need(ib, "slo_ttft").get<double>(), need(ib, "slo_tpot").get<double>()};
    const json& rate = need(j, "request_rate");
    f.request_rate = rate.is_number() ? rate.get<double>() : 0;
    f.burstiness = need(j, "burstiness").get<double>();
    f.max_concurrency = need(j, "max_concurrency").is_number() ? j["max_concurrency"].get<int>() : 0;
    f.result.duration = need(j, "duration").get<double>();
    f.result.client_cpu = need(ib, "client_cpu").get<double>();
    f.result.threads = need(ib, "threads").get<int>();
    const json& recs = need(ib, "requests");
    const json& texts = need(j, "generated_texts");
    const json& errors = need(j, "errors");
    if (!recs.is_array() || !texts.is_array() || !errors.is_array() || texts.size() != recs.size() ||
        errors.size() != recs.size())
      throw InputError(fmt::format("{}: infer_bench.requests, generated_texts and errors differ in length", path));
    for (size_t i = 0; i < recs.size(); ++i) {
      const json& q = recs[i];
      EndpointRecord r;
      r.id = need(q, "id").get<int64_t>();
      const std::string type = need(q, "type").get<std::string>();
      r.type = type.empty() ? 's' : type[0];
      r.prompt_tokens = need(q, "prompt_tokens").get<int>();
      r.max_tokens = need(q, "max_tokens").get<int>();
      r.scheduled = need(q, "scheduled").get<double>();
      r.sent = need(q, "sent").get<double>();
      r.lag = need(q, "lag").get<double>();
      r.end = need(q, "end").get<double>();
      r.output_times = need(q, "output_times").get<std::vector<double>>();
      r.usage_prompt = need(q, "usage_prompt").get<int>();
      r.usage_completion = need(q, "usage_completion").get<int>();
      r.usage_cached = q.value("usage_cached", -1);
      r.finish_reason = need(q, "finish_reason").get<std::string>();
      r.text = texts[i].get<std::string>();
      r.failure = errors[i].get<std::string>();
      if (r.failure.empty() && r.output_times.empty())
        throw InputError(fmt::format("{}: request {} completed with no output times", path, r.id));
      f.result.requests.push_back(std::move(r));
    }
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: a field of the wrong type ({})", path, e.what()));
  }
  if (f.shards < 1 || f.shard < 0 || f.shard >= f.shards)
    throw InputError(fmt::format("{}: infer_bench.shard {} of {} is out of range", path, f.shard, f.shards));
  return f;
}

EndpointResultFile merge_endpoint_results(const std::vector<EndpointResultFile>& parts, const std::vector<std::string>& names) {
  if (parts.empty()) throw InputError("merge: no result files");
  const EndpointResultFile& first = parts.front();
  std::set<int> seen;
  double start = first.start_at;
  for (size_t i = 0; i < parts.size(); ++i) {
    const EndpointResultFile& p = parts[i];
    const std::string& name = names.at(i);
    if (p.load != first.load || p.workload_seed != first.workload_seed || p.shards != first.shards ||
        p.endpoint != first.endpoint || p.model != first.model)
      throw InputError(fmt::format("{}: another load than {}'s ({} shards of '{}' at {}, seed {}; not {} of '{}' at {}, seed {})",
                                   name, names.front(), p.shards, p.load, p.endpoint, p.workload_seed, first.shards, first.load,
                                   first.endpoint, first.workload_seed));
    if (!seen.insert(p.shard).second) throw InputError(fmt::format("{}: shard {} is given twice", name, p.shard));
    start = std::min(start, p.start_at);
  }
  for (int s = 0; s < first.shards; ++s)
    if (!seen.count(s)) throw InputError(fmt::format("merge: shard {}/{} is missing", s, first.shards));
  EndpointResultFile out = first;
  out.shard = 0;
  out.shards = 1;
  out.start_at = start;
  out.result = {};
  for (const EndpointResultFile& p : parts) {
    // Each shard's times are after its own start; the earliest start is the merged load's.
    const double shift = p.start_at - start;
    for (EndpointRecord r : p.result.requests) {
      if (!in_shard(r.id, p.shard, p.shards))
        throw InputError(fmt::format("merge: request {} is not shard {}/{}'s", r.id, p.shard, p.shards));
      r.scheduled += shift;
      r.sent += shift;
      r.end += shift;
      for (double& t : r.output_times) t += shift;
      out.result.duration = std::max(out.result.duration, r.end);
      out.result.requests.push_back(std::move(r));
    }
    out.result.client_cpu += p.result.client_cpu;
    out.result.threads += p.result.threads;
  }
  std::sort(out.result.requests.begin(), out.result.requests.end(),
            [](const EndpointRecord& a, const EndpointRecord& b) { return a.id < b.id; });
  return out;
}

}  // namespace ib::serve
