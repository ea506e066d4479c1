// The interface every measured technique implements, and what it reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/sweep.h"

namespace ib {

struct RunControl;

// Work of one run(): what roofline columns are computed from.
struct Work {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes that must cross memory (read + written)
};

// Outcome of the correctness gate.
struct Validation {
  bool ok = false;
  std::string metric;  // what was compared: "rel_l2", "mismatches", ...
  double value = 0;    // the measured error
  double tolerance = 0;
  std::string detail;  // what failed, or what the reference was
};

// An extra column a variant reports after measuring (memory saving, tokens/s, ...).
struct Metric {
  std::string key;
  double value = 0;
  std::string unit;
};

// The whole measurement of a variant that measures itself (see Variant::measure_self).
struct SelfMeasurement {
  std::string unsupported;      // non-empty: the point cannot run, found only by trying (the row says why)
  Validation validation;        // its own correctness gate, passed or failed before any timing
  std::vector<double> samples;  // seconds, each timed where the work ran
  std::string stop_reason;
  int64_t peak_memory = -1;  // bytes at peak above the row's start, as measured there (-1: unknown)
  std::string note;          // how the row was measured, when that needs saying (the row's note)
};

// One technique on one backend. The runner calls, for each point of the sweep:
// unsupported() -> prepare() (allocations, fresh random inputs from `seed`) -> validate()
// (run once, compare with the reference) -> run() during warmup and measurement -> work(),
// metrics(). Allocations go through the runtime's tracker so memory limits become OOM rows.
class Variant {
 public:
  virtual ~Variant() = default;
  // Why this variant cannot run this point ("" when it can).
  virtual std::string unsupported(const Point& p) const {
    (void)p;
    return {};
  }
  virtual void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) = 0;
  virtual Validation validate(BackendRuntime& rt) = 0;
  // The measured region; on the GPU it enqueues work on rt.stream() and returns.
  virtual void run(BackendRuntime& rt) = 0;
  // A peer measured in its own process (another framework, with its own allocator and CUDA
  // events: the runner's timer around run() would time a process launch) returns its whole
  // measurement here, taken under `control`. The runner calls it after prepare() and then skips
  // validate(), warmup and its sampling loop. nullopt (the default): the runner measures run().
  virtual std::optional<SelfMeasurement> measure_self(BackendRuntime& rt, const RunControl& control) {
    (void)rt;
    (void)control;
    return std::nullopt;
  }
  virtual Work work() const { return {}; }
  virtual std::vector<Metric> metrics() const { return {}; }
  // What ran, when a user should see it beside the numbers (the model a checkpoint described,
  // a text prompt and its continuation): the note of an ok row. "" for none.
  virtual std::string note() const { return {}; }
  // Texts kept whole in results.json (name -> text: "prompt", "output"), after the run.
  virtual std::vector<std::pair<std::string, std::string>> texts() const { return {}; }
};

}  // namespace ib
