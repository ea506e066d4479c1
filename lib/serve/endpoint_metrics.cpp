#include "serve/endpoint_metrics.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace ib::serve {
namespace {

// A reason with its numbers taken out, so "answered 3 tokens of 8" and "answered 5 tokens of 8"
// count as one kind of failure.
std::string reason_kind(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      if (out.empty() || out.back() != '#') out += '#';
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

RequestLatency request_latency(const EndpointRecord& q) {
  RequestLatency l;
  l.output_tokens = q.usage_completion >= 0 ? static_cast<size_t>(q.usage_completion) : q.output_times.size();
  l.ttft = q.output_times.front() - q.sent;
  l.e2e = q.end - q.sent;
  if (l.output_tokens > 1) l.tpot = (l.e2e - l.ttft) / static_cast<double>(l.output_tokens - 1);
  return l;
}

EndpointSummary summarize_endpoint(const EndpointLoadResult& r, const Slo& slo, double max_lag) {
  EndpointSummary out;
  std::vector<double> ttft, tpot, itl, e2e, lag;
  std::vector<std::pair<std::string, FailureCount>> kinds;
  size_t good = 0;
  for (const EndpointRecord& q : r.requests) {
    if (q.failure.rfind("not sent", 0) != 0) {  // every request the client sent
      lag.push_back(q.lag);
      out.lagged += q.lag > max_lag;
    }
    if (!q.failure.empty()) {
      ++out.failed;
      const std::string k = reason_kind(q.failure);
      auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& e) { return e.first == k; });
      if (it == kinds.end())
        kinds.push_back({k, {q.failure, 1}});
      else
        ++it->second.count;
      continue;
    }
    ++out.completed;
    const RequestLatency l = request_latency(q);
    out.without_usage += q.usage_completion < 0;
    if (q.usage_cached >= 0) {
      ++out.cache_reported;
      out.cached_tokens += static_cast<size_t>(q.usage_cached);
    }
    out.output_tokens += l.output_tokens;
    out.input_tokens += static_cast<size_t>(q.usage_prompt >= 0 ? q.usage_prompt : q.prompt_tokens);
    ttft.push_back(l.ttft);
    e2e.push_back(l.e2e);
    if (l.output_tokens > 1) tpot.push_back(l.tpot);
    for (size_t i = 1; i < q.output_times.size(); ++i) itl.push_back(q.output_times[i] - q.output_times[i - 1]);
    good += l.within(slo);
  }
  out.ttft = latency_of(ttft);
  out.tpot = latency_of(tpot);
  out.itl = latency_of(itl);
  out.e2e = latency_of(e2e);
  out.lag = latency_of(lag);
  out.duration = r.duration;
  if (r.duration > 0) {
    out.request_rate = static_cast<double>(out.completed) / r.duration;
    out.output_rate = static_cast<double>(out.output_tokens) / r.duration;
    out.total_token_rate = static_cast<double>(out.output_tokens + out.input_tokens) / r.duration;
    out.goodput = static_cast<double>(good) / r.duration;
    out.client_cpu = r.client_cpu / r.duration;
  }
  for (auto& k : kinds) out.failures.push_back(std::move(k.second));
  std::stable_sort(out.failures.begin(), out.failures.end(),
                   [](const FailureCount& a, const FailureCount& b) { return a.count > b.count; });
  return out;
}

std::string describe_failures(const EndpointSummary& s) {
  if (s.failed == 0) return "none failed";
  std::string out = fmt::format("{} failed:", s.failed);
  for (size_t i = 0; i < s.failures.size() && i < 4; ++i)
    out += fmt::format("{} {} × {}", i ? ";" : "", s.failures[i].count, s.failures[i].reason);
  if (s.failures.size() > 4) out += fmt::format("; and {} other reasons", s.failures.size() - 4);
  return out;
}

}  // namespace ib::serve
