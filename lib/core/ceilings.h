// The card's measured peaks (copy bandwidth, GEMM rate) that every report's roofline columns
// divide by, and on the CPU the FMA peak shown beside the GEMM rate. Measured through the normal
// pipeline with the `ceiling` kind's variants.
#pragma once

#include <string>

#include "core/runner.h"
#include "core/spec.h"

namespace ib {

// The built-in ceiling spec: `quick` for the start of every run (a second or two), else the
// settings `info` uses.
Spec ceiling_spec(Backend backend, bool quick, const RunControlOverrides& overrides = {});

// Peaks from finished ceiling rows (copy / memcpy and gemm / sgemm variants).
Ceilings ceilings_from_results(const std::vector<ExperimentResult>& results);

// Runs the quick ceiling spec on the runtime.
Ceilings measure_ceilings(BackendRuntime& rt);

}  // namespace ib
