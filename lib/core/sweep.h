// A point of an experiment's sweep (one value per key) and the expansion of axes into points.
#pragma once

#include <string>
#include <vector>

#include "core/value.h"

namespace ib {

struct ExperimentSpec;

struct Param {
  std::string key;
  Value value;
  ParamType type = ParamType::Int;
};

class Point {
 public:
  std::vector<Param> params;

  // "bytes=1GiB dtype=bf16": only the given keys, or all when `keys` is empty.
  std::string label(const std::vector<std::string>& keys = {}) const;

 private:
  // A parameter by its key's name is core's alone: a kind reads its points through its ParamSet,
  // typed (core/params.h); the runner, the sweep and the reports through PointAccess
  // (core/point_access.h, a header check-layers refuses outside core and the tests).
  const Param* find(const std::string& key) const;
  template <class P>
  friend class ParamSet;
  friend struct PointAccess;
};

// Cartesian product of the spec's axes, first axis slowest.
std::vector<Point> expand_sweep(const ExperimentSpec& spec);
// True when a `skip:` rule matches the point and variant.
bool is_skipped(const ExperimentSpec& spec, const Point& p, const std::string& variant);

struct SweepPlan {
  std::vector<Point> points;
  size_t variants = 0;
  size_t rows = 0;  // points x variants, minus skipped
  size_t skipped = 0;
};
SweepPlan plan_sweep(const ExperimentSpec& spec);
// "3 configurations × 2 variants = 6 rows (1 skipped)"
std::string describe_plan(const SweepPlan& plan);

}  // namespace ib
