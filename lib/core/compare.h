// Two runs side by side (`infer-bench compare BASE.json NEW.json`): rows matched by experiment,
// variant and parameters, the new run's speedup over the base from both runs' raw samples (ratio
// of medians, 95% bootstrap interval, a verdict), status changes, and what only one run has. The
// way to put your card beside the committed H200 results, or a build beside the one before it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/report.h"

namespace ib {

struct RowComparison {
  std::string variant;
  std::vector<Param> params;  // the base row's, restricted to the keys both runs have
  RowStatus base_status = RowStatus::Ok, new_status = RowStatus::Ok;
  double base_median = 0, new_median = 0;  // seconds (ok rows)
  std::optional<Speedup> speedup;          // new over base (> 1: the new run is faster); both ok
};

struct ExperimentComparison {
  std::string name;
  std::vector<RowComparison> rows;  // in the base run's order
  size_t base_only = 0, new_only = 0;
};

struct Comparison {
  RunMeta base, next;
  std::vector<ExperimentComparison> experiments;
  std::vector<std::string> base_only, new_only;  // experiments only one run has
};

// Matches experiments by name and rows by variant and the values of the parameters both
// experiments have. `only` (names) restricts the experiments; `seed` drives the bootstrap.
Comparison compare_results(const ResultSet& base, const ResultSet& next, const std::vector<std::string>& only = {},
                           uint64_t seed = 20260101);

std::string comparison_markdown(const Comparison& c, const std::string& base_label, const std::string& new_label);
std::string comparison_csv(const Comparison& c);

// Rows where the new run is slower than the base by more than `fraction` (0.05: 5%) with the
// whole 95% interval below 1 / (1 + fraction): one line each.
std::vector<std::string> slower_rows(const Comparison& c, double fraction);

}  // namespace ib
