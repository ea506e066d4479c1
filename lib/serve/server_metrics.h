// The server's /metrics as Prometheus text: the engine's counters and the HTTP layer's under our
// names (infer_bench_*), and the same under vLLM's (vllm:*, with its latency histograms), so that
// dashboards made for vLLM read this server.
#pragma once

#include <cstdint>
#include <string>

#include "serve/engine_loop.h"

namespace ib::serve {

// What the HTTP layer counted: completion requests received, those answered with an error
// status, connections accepted and those cut for not sending a whole request in time.
struct HttpCounters {
  int64_t requests = 0, refused = 0, connections_accepted = 0, connections_cut = 0;
};

std::string prometheus_metrics(const EngineCounters& c, const HttpCounters& h, const std::string& model_name);

}  // namespace ib::serve
