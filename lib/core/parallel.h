// Splits [0, n) into contiguous chunks over the CPU threads (the caller's thread included).
#pragma once

#include <cstddef>
#include <functional>

namespace ib {

void parallel_for(size_t n, const std::function<void(size_t begin, size_t end)>& body);

}  // namespace ib
