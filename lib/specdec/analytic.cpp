// The analytic model of speculative decoding (expected tokens per step, predicted speedup) and
// the per-position counts measured against it: arithmetic only, no model runs.
#include "specdec/specdec.h"

#include <cmath>

namespace ib::specdec {

void SpecStats::count_positions(int drafted_depth, int accepted_depth) {
  if (static_cast<int>(drafted_at.size()) < drafted_depth) {
    drafted_at.resize(static_cast<size_t>(drafted_depth), 0);
    accepted_at.resize(static_cast<size_t>(drafted_depth), 0);
  }
  for (int i = 0; i < drafted_depth; ++i) ++drafted_at[static_cast<size_t>(i)];
  for (int i = 0; i < accepted_depth && i < drafted_depth; ++i) ++accepted_at[static_cast<size_t>(i)];
}

double expected_tokens(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double predicted_speedup(double alpha, int k, double c, double v) { return expected_tokens(alpha, k) / (k * c + v); }

double expected_tokens_tree(double alpha, const std::vector<int>& shape) {
  double e = 1, reach = 1;
  for (int b : shape) e += reach *= 1.0 - std::pow(1.0 - alpha, b);
  return e;
}

}  // namespace ib::specdec
