#include "numerics/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <cstdlib>

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

// Worker threads started once and kept for the process: a parallel_for costs a wake-up, not a
// thread creation (the CPU engine calls it a few hundred times per forward pass). One caller at a
// time; the caller takes chunks too.
class Pool {
 public:
  explicit Pool(size_t workers) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    work_.notify_all();
    for (auto& t : threads_) t.join();
  }
  std::mutex& busy() { return busy_; }

  // Runs task(c) for c in [0, chunks) on the workers and the calling thread; returns when every
  // chunk is done. task must not throw.
  void run(size_t chunks, const std::function<void(size_t)>& task) {
    {
      std::lock_guard<std::mutex> lk(m_);
      task_ = &task;
      next_ = 0;
      total_ = chunks;
      pending_ = chunks;
    }
    work_.notify_all();
    for (;;) {
      size_t c;
      {
        std::lock_guard<std::mutex> lk(m_);
        if (next_ >= total_) break;
        c = next_++;
      }
      finish(task, c);
    }
    std::unique_lock<std::mutex> lk(m_);
    done_.wait(lk, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void finish(const std::function<void(size_t)>& task, size_t c) {
    task(c);
    std::lock_guard<std::mutex> lk(m_);
    if (--pending_ == 0) done_.notify_all();
  }
  void loop() {
    inside = true;
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      work_.wait(lk, [&] { return stop_ || next_ < total_; });
      if (stop_) return;
      const size_t c = next_++;
      const std::function<void(size_t)>* task = task_;
      lk.unlock();
      finish(*task, c);
      lk.lock();
    }
  }

  std::mutex m_, busy_;
  std::condition_variable work_, done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t next_ = 0, total_ = 0, pending_ = 0;
  bool stop_ = false;
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
