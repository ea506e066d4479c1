// What a load measured, defined as vLLM's benchmark_serving reports it: TTFT (arrival to the
// first token), TPOT ((E2E − TTFT)/(output − 1), per request), ITL (every gap between a request's
// consecutive tokens), E2E (arrival to the last token), the queueing delay (arrival to its first
// scheduled step); request and output-token throughput over the load's duration; goodput, the
// requests per second that met every SLO.
#pragma once

#include <string>
#include <vector>

#include "serve/load_run.h"

namespace ib::serve {

struct Latency {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // seconds
  size_t n = 0;
};
Latency latency_of(std::vector<double> seconds);

struct Slo {
  double ttft = 0, tpot = 0;  // seconds; 0 = no bound
};

struct LoadSummary {
  Latency ttft, tpot, itl, e2e, queue;
  Latency ttft_short, ttft_long;  // by the workload's class (long prompts vs the rest)
  size_t completed = 0, refused = 0, output_tokens = 0;
  double duration = 0, request_rate = 0, output_rate = 0, goodput = 0;
  double mean_batch = 0;  // decode rows per step, over the steps that decoded
  size_t steps = 0;
};

// Only completed requests enter the latencies; `refused` counts those the scheduler refused.
LoadSummary summarize_load(const LoadResult& r, const Slo& slo);

}  // namespace ib::serve
