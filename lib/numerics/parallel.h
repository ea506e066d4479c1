// The CPU threads the CPU variants use, and parallel_for, which splits [0, n) into contiguous
// chunks over them (the caller's thread included). In numerics/ because SGEMM runs on it.
#pragma once

#include <cstddef>
#include <functional>

namespace ib {

// Hardware threads the CPU variants use (INFER_BENCH_THREADS overrides).
unsigned cpu_threads();

void parallel_for(size_t n, const std::function<void(size_t begin, size_t end)>& body);

}  // namespace ib
