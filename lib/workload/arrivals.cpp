#include "workload/arrivals.h"

namespace ib::workload {

double Arrivals::next(std::mt19937_64& rng) {
  ++count_;
  switch (kind_) {
    case Arrival::Constant:
      return clock_ = static_cast<double>(count_) / qps_;
    case Arrival::Gamma:
      // Gamma(k, θ = 1/(k·qps)) has mean 1/qps. A fresh distribution each draw: it keeps no
      // normal deviate from the last, so a gap depends on the generator's state alone.
      return clock_ += std::gamma_distribution<double>(burstiness_, 1.0 / (burstiness_ * qps_))(rng);
    case Arrival::Poisson:
      break;
  }
  return clock_ += std::exponential_distribution<double>(qps_)(rng);
}

}  // namespace ib::workload
