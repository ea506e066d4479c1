// A Prometheus histogram (cumulative buckets, sum, count) for a server's latencies, with the
// bucket bounds vLLM's server uses, so dashboards made for vLLM read ours.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ib::serve {

struct Histogram {
  std::vector<double> bounds;   // upper bounds, ascending; +Inf is implied
  std::vector<int64_t> counts;  // observations per bucket (bounds.size() + 1, the last +Inf), not cumulative
  double sum = 0;
  int64_t count = 0;

  explicit Histogram(std::vector<double> upper = {});
  void observe(double v);
};

// vLLM's buckets (seconds): time to first token; time per output token and inter-token latency;
// end-to-end latency and time in the queue.
std::vector<double> ttft_buckets();
std::vector<double> token_latency_buckets();
std::vector<double> request_latency_buckets();

// The histogram in the Prometheus text format: `name`_bucket{labels,le="..."}, _sum, _count.
// `labels` is "key=\"value\"" pairs joined by commas (may be empty).
std::string prometheus_histogram(const std::string& name, const std::string& help, const std::string& labels, const Histogram& h);

}  // namespace ib::serve
