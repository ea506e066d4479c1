#include "numerics/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <cstdlib>

#include <immintrin.h>

namespace ib {

unsigned cpu_threads() {
  if (const char* env = std::getenv("INFER_BENCH_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return static_cast<unsigned>(n);
  }
  unsigned n = std::thread::hardware_concurrency();
  return n ? n : 1;
}
namespace {

// Set on the pool's workers, and on a caller while its parallel_for runs: a parallel_for inside
// another one runs serially where it is.
thread_local bool inside = false;

// Worker threads started once and kept for the process. One caller at a time; the caller takes
// chunks too. A worker that finished a task spins for a while before it sleeps: the CPU engine's
// decode step makes ~40 parallel calls of 10-300 µs each, and a condition-variable wake-up (~20 µs
// measured on a 2-vCPU Xeon) cost more than the second thread saved on all but the largest. Past
// kSpin without work it sleeps, so an idle process does not burn a core.
class Pool {
 public:
  explicit Pool(size_t workers) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_.store(true);
    }
    work_.notify_all();
    for (auto& t : threads_) t.join();
  }
  std::mutex& busy() { return busy_; }

  // Runs task(c) for c in [0, chunks) on the workers and the calling thread; returns when every
  // chunk is done. task must not throw.
  void run(size_t chunks, const std::function<void(size_t)>& task) {
    next_.store(kClosed, std::memory_order_relaxed);  // a late worker of the last run takes nothing
    task_.store(&task, std::memory_order_relaxed);
    total_.store(chunks, std::memory_order_relaxed);
    pending_.store(chunks, std::memory_order_relaxed);
    next_.store(0, std::memory_order_release);
    {
      // Under the lock: a worker between its last check and its wait cannot miss the new run.
      std::lock_guard<std::mutex> lk(m_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleepers_.load(std::memory_order_acquire) > 0) work_.notify_all();
    take_chunks();
    for (unsigned spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins)
      if (spins < 4096)
        _mm_pause();
      else
        std::this_thread::yield();
  }

 private:
  static constexpr size_t kClosed = ~size_t{0} / 2;
  static constexpr auto kPause = std::chrono::microseconds(50), kSpin = std::chrono::microseconds(500);

  void take_chunks() {
    for (;;) {
      const size_t c = next_.fetch_add(1, std::memory_order_acq_rel);
      if (c >= total_.load(std::memory_order_acquire)) return;
      (*task_.load(std::memory_order_acquire))(c);
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  void loop() {
    inside = true;
    uint64_t seen = 0;
    for (;;) {
      const auto t0 = std::chrono::steady_clock::now();
      unsigned spins = 0;
      bool yielding = false;
      while (generation_.load(std::memory_order_acquire) == seen && !stop_.load(std::memory_order_relaxed)) {
        if (yielding)
          std::this_thread::yield();
        else
          _mm_pause();
        if (++spins % 64 != 0) continue;
        const auto idle = std::chrono::steady_clock::now() - t0;
        // After kPause, yield between checks: a thread of another process on this core (ctest
        // -j, a peer server) runs instead of the spin.
        yielding = idle > kPause;
        if (idle > kSpin) {
          std::unique_lock<std::mutex> lk(m_);
          sleepers_.fetch_add(1, std::memory_order_acq_rel);
          work_.wait(lk, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        }
      }
      if (stop_.load()) return;
      seen = generation_.load(std::memory_order_acquire);
      take_chunks();
    }
  }

  std::mutex m_, busy_;
  std::condition_variable work_;
  std::atomic<const std::function<void(size_t)>*> task_{nullptr};
  std::atomic<size_t> next_{kClosed}, total_{0}, pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

Pool& pool() {
  static Pool p(std::max(1u, cpu_threads()) - 1);
  return p;
}

}  // namespace

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& body) {
  const size_t threads = std::min<size_t>(cpu_threads(), n);
  if (threads <= 1 || inside) {
    if (n) body(0, n);
    return;
  }
  Pool& p = pool();
  std::unique_lock<std::mutex> mine(p.busy(), std::try_to_lock);
  if (!mine.owns_lock()) {  // another thread's (or an enclosing) parallel_for holds the pool
    body(0, n);
    return;
  }
  const size_t chunk = (n + threads - 1) / threads, chunks = (n + chunk - 1) / chunk;
  std::vector<std::exception_ptr> errors(chunks);
  const std::function<void(size_t)> task = [&](size_t c) {
    try {
      body(c * chunk, std::min(n, (c + 1) * chunk));
    } catch (...) {
      errors[c] = std::current_exception();
    }
  };
  inside = true;
  p.run(chunks, task);
  inside = false;
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace ib
