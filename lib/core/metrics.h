// Metrics over repeated runs: a variant that measures a whole load several times (serve-load,
// serve-endpoint) reports each metric's median, one run being one draw of the arrival timing and
// of the machine's noise.
#pragma once

#include <vector>

#include "core/variant.h"

namespace ib {

// Each metric's median over the runs; every run reports the same metrics in the same order.
std::vector<Metric> median_of_runs(const std::vector<std::vector<Metric>>& per_run);

}  // namespace ib
