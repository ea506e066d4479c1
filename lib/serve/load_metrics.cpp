#include "serve/load_metrics.h"

#include <algorithm>
#include <numeric>

#include "core/stats.h"

namespace ib::serve {

Latency latency_of(std::vector<double> s) {
  Latency l;
  l.n = s.size();
  if (s.empty()) return l;
  std::sort(s.begin(), s.end());
  l.mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  l.p50 = percentile_sorted(s, 0.50);
  l.p90 = percentile_sorted(s, 0.90);
  l.p99 = percentile_sorted(s, 0.99);
  l.max = s.back();
  return l;
}

LoadSummary summarize_load(const LoadResult& r, const Slo& slo) {
  LoadSummary out;
  std::vector<double> ttft, tpot, itl, e2e, queue, ttft_short, ttft_long;
  size_t good = 0;
  for (const RequestRecord& q : r.requests) {
    if (!q.refused.empty()) {
      ++out.refused;
      continue;
    }
    if (q.token_times.empty()) continue;  // interrupted before its first token
    ++out.completed;
    out.output_tokens += q.tokens.size();
    const double first = q.token_times.front() - q.arrival, last = q.token_times.back() - q.arrival;
    ttft.push_back(first);
    (q.type == 'l' ? ttft_long : ttft_short).push_back(first);
    e2e.push_back(last);
    queue.push_back(q.scheduled - q.arrival);
    double per_token = 0;
    if (q.token_times.size() > 1) {
      per_token = (last - first) / static_cast<double>(q.token_times.size() - 1);
      tpot.push_back(per_token);
      for (size_t i = 1; i < q.token_times.size(); ++i) itl.push_back(q.token_times[i] - q.token_times[i - 1]);
    }
    if ((slo.ttft <= 0 || first <= slo.ttft) && (slo.tpot <= 0 || per_token <= slo.tpot)) ++good;
  }
  out.ttft = latency_of(ttft);
  out.tpot = latency_of(tpot);
  out.itl = latency_of(itl);
  out.e2e = latency_of(e2e);
  out.queue = latency_of(queue);
  out.ttft_short = latency_of(ttft_short);
  out.ttft_long = latency_of(ttft_long);
  out.duration = r.duration;
  out.steps = r.steps.size();
  if (r.duration > 0) {
    out.request_rate = static_cast<double>(out.completed) / r.duration;
    out.output_rate = static_cast<double>(out.output_tokens) / r.duration;
    out.goodput = static_cast<double>(good) / r.duration;
  }
  size_t decode_steps = 0, rows = 0;
  for (const StepRecord& s : r.steps)
    if (s.decode_rows > 0) {
      ++decode_steps;
      rows += static_cast<size_t>(s.decode_rows);
    }
  out.mean_batch = decode_steps ? static_cast<double>(rows) / static_cast<double>(decode_steps) : 0;
  return out;
}

}  // namespace ib::serve
