#include "core/ceilings.h"

#include <stdexcept>
#include <utility>

namespace ib {
namespace {

CeilingMeasurement& provided() {
  static CeilingMeasurement m;
  return m;
}

const CeilingMeasurement& measurement() {
  const CeilingMeasurement& m = provided();
  if (!m.spec || !m.peaks) throw std::logic_error("no ceiling measurement in this binary (the ceiling kind provides it)");
  return m;
}

}  // namespace

CeilingProvision::CeilingProvision(CeilingMeasurement m) {
  if (provided().spec) throw std::logic_error("the ceiling measurement is provided twice");
  provided() = std::move(m);
}

Spec ceiling_spec(Backend backend, bool quick, const RunControlOverrides& overrides) {
  return measurement().spec(backend, quick, overrides);
}

Ceilings ceilings_from_results(const std::vector<ExperimentResult>& results) { return measurement().peaks(results); }

Ceilings measure_ceilings(BackendRuntime& rt) {
  Spec spec = ceiling_spec(rt.backend(), true);
  Runner runner(rt, RunnerOptions{});
  std::vector<ExperimentResult> results;
  for (const auto& e : spec.experiments) results.push_back(runner.run(e));
  return ceilings_from_results(results);
}

}  // namespace ib
