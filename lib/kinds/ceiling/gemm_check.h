// The correctness gate of GEMM variants: entries of C = A·B against float64 dot products.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "numerics/random.h"

namespace ib {

// Worst |c(i,j) − Σ a(i,p)·b(p,j)| / Σ |a(i,p)·b(p,j)| over the four corners and `samples` random
// entries; the normalisation keeps near-zero results from inflating the error. A non-finite
// entry counts as infinitely wrong. a, b, c are callables returning the stored values.
template <class GetA, class GetB, class GetC>
double gemm_spot_check(int64_t m, int64_t n, int64_t k, GetA a, GetB b, GetC c, uint64_t seed, int samples) {
  double worst = 0;
  auto check = [&](int64_t i, int64_t j) {
    double ref = 0, mag = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double x = static_cast<double>(a(i, p)) * static_cast<double>(b(p, j));
      ref += x;
      mag += std::fabs(x);
    }
    const double got = c(i, j);
    worst = std::max(worst, std::isfinite(got) ? std::fabs(got - ref) / (mag > 0 ? mag : 1.0) : INFINITY);
  };
  check(0, 0);
  check(0, n - 1);
  check(m - 1, 0);
  check(m - 1, n - 1);
  for (int s = 0; s < samples; ++s) {
    const uint64_t u = static_cast<uint64_t>(s);
    check(static_cast<int64_t>(random_bits(seed, 2 * u) % static_cast<uint64_t>(m)),
          static_cast<int64_t>(random_bits(seed, 2 * u + 1) % static_cast<uint64_t>(n)));
  }
  return worst;
}

}  // namespace ib
