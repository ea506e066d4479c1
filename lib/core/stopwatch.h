// Time since a steady-clock instant, for what a variant times on its own beside the runner's
// samples (a schema's compile, a document's masks).
#pragma once

#include <chrono>

namespace ib {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
inline double ms_since(std::chrono::steady_clock::time_point t0) { return seconds_since(t0) * 1e3; }

}  // namespace ib
