// The interface every measured technique implements, and what it reports.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/sweep.h"

namespace ib {

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
  virtual Work work() const { return {}; }
  virtual std::vector<Metric> metrics() const { return {}; }
};

}  // namespace ib
