// What a load sent to an endpoint measured, as vLLM's benchmark_serving defines it from the
// client's side: TTFT (the request's send to its first output chunk), TPOT ((E2E − TTFT) /
// (output tokens − 1), output tokens from the server's usage), ITL (every gap between a request's
// output chunks), E2E (send to the last byte); request, output and total token throughput over the
// load's duration; goodput, the completed requests per second within every SLO. Beside them the
// client's own audit: send lag percentiles, how many requests lagged past a bound, and the share
// of a core the client used. Failed requests enter no latency; they are counted by reason.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "serve/endpoint_load.h"
#include "serve/load_metrics.h"

namespace ib::serve {

// One completed request's latencies, as vLLM defines them.
struct RequestLatency {
  double ttft = 0, tpot = 0, e2e = 0;  // tpot 0 for a one-token answer
  size_t output_tokens = 0;            // the server's usage.completion_tokens, else the chunks that carried output
  bool within(const Slo& slo) const { return (slo.ttft <= 0 || ttft <= slo.ttft) && (slo.tpot <= 0 || tpot <= slo.tpot); }
};
// `q` completed (no failure, output_times not empty).
RequestLatency request_latency(const EndpointRecord& q);

struct FailureCount {
  std::string reason;  // the first request's reason in full
  size_t count = 0;    // requests whose reason reads the same with its numbers taken out
};

struct EndpointSummary {
  Latency ttft, tpot, itl, e2e, lag;
  size_t completed = 0, failed = 0, input_tokens = 0, output_tokens = 0;
  size_t lagged = 0;          // requests sent more than max_lag after they were due
  size_t without_usage = 0;   // completed requests whose server reported no usage (chunks counted instead)
  size_t cached_tokens = 0;   // prompt tokens the server said it found cached (usage.prompt_tokens_details)
  size_t cache_reported = 0;  // completed requests whose usage said how many
  double duration = 0, request_rate = 0, output_rate = 0, total_token_rate = 0, goodput = 0;
  double client_cpu = 0;               // the client's CPU seconds per second of the load (1 = one core busy)
  std::vector<FailureCount> failures;  // most frequent first
};

EndpointSummary summarize_endpoint(const EndpointLoadResult& r, const Slo& slo, double max_lag);

// "3 failed: 2 × HTTP 429: too many requests; 1 × the stream ended without data: [DONE]".
std::string describe_failures(const EndpointSummary& s);

}  // namespace ib::serve
