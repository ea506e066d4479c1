#include "serve/histogram.h"

#include <algorithm>

#include <fmt/format.h>

namespace ib::serve {

Histogram::Histogram(std::vector<double> upper) : bounds(std::move(upper)), counts(bounds.size() + 1, 0) {}

void Histogram::observe(double v) {
  // Prometheus buckets are "less than or equal": the first bound >= v.
  const size_t b = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[b];
  sum += v;
  ++count;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> token_latency_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::string prometheus_histogram(const std::string& name, const std::string& help, const std::string& labels,
                                 const Histogram& h) {
  const std::string sep = labels.empty() ? "" : ",";
  std::string s = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    const std::string le = i < h.bounds.size() ? fmt::format("{}", h.bounds[i]) : "+Inf";
    s += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, le, cumulative);
  }
  s += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, h.sum, name, labels, h.count);
  return s;
}

}  // namespace ib::serve
