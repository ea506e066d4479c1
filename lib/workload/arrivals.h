// When a load's requests arrive: a Poisson process at a rate (exponential gaps), bursty gaps
// (gamma-distributed, the same mean; vLLM's `burstiness`), or a constant rate (GuideLLM's constant
// profile). The one arrival process of every workload here.
#pragma once

#include <cstdint>
#include <random>

namespace ib::workload {

enum class Arrival { Poisson, Gamma, Constant };

class Arrivals {
 public:
  // `qps` > 0 requests per second on average; `burstiness` is the gamma shape k (1 is Poisson,
  // below 1 burstier), read for Gamma only.
  Arrivals(Arrival kind, double qps, double burstiness = 1) : kind_(kind), qps_(qps), burstiness_(burstiness) {}
  // The next request's arrival (seconds from the start, the first after one gap), its gap drawn
  // from `rng` (no draw for Constant: the n-th at n/qps exactly).
  double next(std::mt19937_64& rng);

 private:
  Arrival kind_;
  double qps_, burstiness_;
  double clock_ = 0;
  int64_t count_ = 0;
};

}  // namespace ib::workload
