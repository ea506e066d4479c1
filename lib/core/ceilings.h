// The card's measured peaks (copy bandwidth, GEMM rate) that every report's roofline columns
// divide by, and on the CPU the FMA peak shown beside the GEMM rate. Measured through the normal
// pipeline with the `ceiling` kind's variants: the kind provides the measurement (its spec and
// which rows are the peaks, kinds/ceiling/ceiling_measurement.cpp), core runs it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/runner.h"
#include "core/spec.h"

namespace ib {

// A spec of the ceiling kind (`quick`: for the start of every run) and the peaks in its rows.
struct CeilingMeasurement {
  std::function<Spec(Backend, bool, const RunControlOverrides&)> spec;
  std::function<Ceilings(const std::vector<ExperimentResult>&)> peaks;
};
// Provides the measurement, once per binary, from a static initialiser of the kind that has it.
struct CeilingProvision {
  explicit CeilingProvision(CeilingMeasurement m);
};

// The built-in ceiling spec: `quick` for the start of every run (a second or two), else the
// settings `info` uses.
Spec ceiling_spec(Backend backend, bool quick, const RunControlOverrides& overrides = {});

// Peaks from finished ceiling rows (copy / memcpy and gemm / sgemm variants).
Ceilings ceilings_from_results(const std::vector<ExperimentResult>& results);

// Runs the quick ceiling spec on the runtime.
Ceilings measure_ceilings(BackendRuntime& rt);

}  // namespace ib
