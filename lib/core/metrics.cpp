#include "core/metrics.h"

#include "core/stats.h"

namespace ib {

std::vector<Metric> median_of_runs(const std::vector<std::vector<Metric>>& per_run) {
  if (per_run.empty()) return {};
  std::vector<Metric> m = per_run.front();
  for (size_t k = 0; k < m.size(); ++k) {
    std::vector<double> v;
    for (const auto& run : per_run) v.push_back(run[k].value);
    m[k].value = summarize(v).median;
  }
  return m;
}

}  // namespace ib
