// The `serve-load` kind's measurement: a whole workload served in real time by the scheduler over
// the engine (static batching, continuous batching, continuous with chunked prefill, and that on a
// paged KV cache with prefix caching), reported as
// vLLM's serving benchmark reports it. Validated first: every request's greedy output in a served
// load against the same request generated alone on the CPU engine, and every KV reservation and
// engine cache returned when the load ends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/variant.h"
#include "kinds/serve_load/serve_keys.h"
#include "model/model.h"
#include "serve/load_metrics.h"
#include "serve/scheduler.h"

namespace ib::serve {

class ServeLoad : public Variant {
 public:
  ServeLoad(Backend backend, Batching batching, bool chunked, bool prefix_caching)
      : backend_(backend), batching_(batching), chunked_(chunked), prefix_caching_(prefix_caching) {}
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override;
  Validation validate(BackendRuntime& rt) override;
  void run(BackendRuntime& rt) override;
  std::vector<Metric> metrics() const override;
  std::string note() const override;

 private:
  SchedulerOptions options(bool greedy) const;

  Backend backend_;
  Batching batching_;
  bool chunked_;
  bool prefix_caching_;  // on a paged engine
  ServeKeys keys_;
  model::ModelConfig config_;
  std::unique_ptr<model::WeightSource> weights_;
  std::unique_ptr<model::Model> engine_;
  std::vector<workload::Request> trace_;
  std::string workload_;  // describe(trace_)
  uint64_t seed_ = 0;
  std::vector<LoadSummary> runs_;  // every timed run's (warmup runs included), reported as medians
  struct PagedRun {
    SchedulerCounters counters;
    int64_t block_copies = 0;  // copy-on-write copies the engine made during the run
    int peak_blocks = 0;       // the most blocks in use at a step's end
  };
  std::vector<PagedRun> paged_runs_;  // parallel to runs_: the scheduler's counters (blocks when the engine is paged)
  std::vector<Metric> metrics_of(const LoadSummary& s, const PagedRun* paged) const;
};

}  // namespace ib::serve
