#include "core/parallel.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

#include "core/backend.h"

namespace ib {

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& body) {
  size_t threads = std::min<size_t>(cpu_threads(), n);
  if (threads <= 1) {
    if (n) body(0, n);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(threads);
  size_t chunk = (n + threads - 1) / threads;
  for (size_t t = 1; t < threads; ++t) {
    size_t b = t * chunk, e = std::min(n, b + chunk);
    if (b >= e) break;
    pool.emplace_back([&, t, b, e] {
      try {
        body(b, e);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  try {
    body(0, std::min(n, chunk));
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace ib
