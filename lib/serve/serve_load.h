// The `serve-load` kind's measurement: a whole workload served in real time by the scheduler over
// the engine (static batching, continuous batching, continuous with chunked prefill), reported as
// vLLM's serving benchmark reports it. Validated first: every request's greedy output in a served
// load against the same request generated alone on the CPU engine, and every KV reservation and
// engine cache returned when the load ends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/variant.h"
#include "model/model.h"
#include "serve/load_metrics.h"
#include "serve/scheduler.h"
#include "serve/serve_keys.h"

namespace ib::serve {

class ServeLoad : public Variant {
 public:
  ServeLoad(Backend backend, Batching batching, bool chunked) : backend_(backend), batching_(batching), chunked_(chunked) {}
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override;
  Validation validate(BackendRuntime& rt) override;
  void run(BackendRuntime& rt) override;
  std::vector<Metric> metrics() const override;
  std::string note() const override;

 private:
  SchedulerOptions options(bool greedy) const;
  std::vector<Metric> metrics_of(const LoadSummary& s) const;

  Backend backend_;
  Batching batching_;
  bool chunked_;
  ServeKeys keys_;
  model::ModelConfig config_;
  std::unique_ptr<model::WeightSource> weights_;
  std::unique_ptr<model::Model> engine_;
  std::vector<Request> trace_;
  std::string workload_;  // describe(trace_)
  uint64_t seed_ = 0;
  std::vector<LoadSummary> runs_;  // every timed run's (warmup runs included), reported as medians
};

}  // namespace ib::serve
