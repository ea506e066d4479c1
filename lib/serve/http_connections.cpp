#include "serve/http_connections.h"

#if INFER_BENCH_HAVE_HTTP

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace {
// The socket the last accept() on this thread returned. httplib's listening thread accepts a
// connection and then, on the same thread, hands it to the task queue's enqueue(): there it is
// read (below). It is the one way to learn the socket of a connection from outside httplib 0.11.
thread_local int last_accepted = -1;
}  // namespace

// accept(2), as the C library's, remembering what it returned. Defined in the executable, it is
// the `accept` that libcpp-httplib.so (a shared library) calls: the dynamic linker looks in the
// executable first. accept4 with no flags is accept.
extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  const int s = ::accept4(fd, addr, len, 0);
  last_accepted = s;
  return s;
}

namespace ib::serve {

using Clock = std::chrono::steady_clock;

struct HttpConnections::Slot {
  std::mutex m;                   // the watcher's view of the fields below against the worker's changes
  int fd = -1;                    // our duplicate of the socket of the connection being served; -1: none
  bool awaiting = false;          // waiting for (the rest of) a request
  Clock::time_point since;        // when it started waiting
  Clock::time_point grace_until;  // not cut before this: its first second on a thread
  bool cut = false;
};

thread_local HttpConnections::Slot* HttpConnections::current_ = nullptr;

HttpConnections::HttpConnections(int threads, double receive_deadline_s, std::shared_ptr<HttpConnectionCounters> counters,
                                 std::function<void()> on_idle)
    : deadline_s_(receive_deadline_s), counters_(std::move(counters)), on_idle_(std::move(on_idle)) {
  for (int i = 0; i < threads; ++i) slots_.push_back(std::make_unique<Slot>());
  for (auto& s : slots_) threads_.emplace_back([this, slot = s.get()] { work(*slot); });
  watcher_ = std::thread([this] { watch(); });
}

HttpConnections::~HttpConnections() { shutdown(); }

void HttpConnections::enqueue(std::function<void()> fn) {
  Job job{std::move(fn), -1, Clock::now()};
  // A duplicate of the socket, ours to close: the watcher may shut it down at any moment, and
  // httplib's own descriptor may be closed (and its number reused) before the worker is told.
  if (last_accepted >= 0) job.fd = ::fcntl(last_accepted, F_DUPFD_CLOEXEC, 0);
  last_accepted = -1;
  ++counters_->accepted;
  {
    std::lock_guard<std::mutex> lock(m_);
    jobs_.push_back(std::move(job));
  }
  jobs_cv_.notify_one();
}

void HttpConnections::work(Slot& slot) {
  current_ = &slot;
  for (;;) {
    Job job;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(m_);
      jobs_cv_.wait(lock, [this] { return !jobs_.empty() || stopping_; });
      if (jobs_.empty()) break;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      stopping = stopping_;
    }
    {
      std::lock_guard<std::mutex> lock(slot.m);
      slot.fd = job.fd;
      slot.awaiting = true;
      slot.since = job.accepted;
      slot.grace_until = Clock::now() + std::chrono::seconds(1);
      slot.cut = false;
    }
    // Accepted, but the server is ending: its client reads the end of the connection at once.
    if (stopping && job.fd >= 0) ::shutdown(job.fd, SHUT_RDWR);
    job.fn();  // httplib's: reads and answers requests until the connection ends, then closes it
    {
      std::lock_guard<std::mutex> lock(slot.m);
      slot.fd = -1;
      slot.awaiting = false;
    }
    if (job.fd >= 0) ::close(job.fd);
  }
  current_ = nullptr;
}

void HttpConnections::watch() {
  const auto deadline = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s_));
  // With connections queued for a thread, a connection still waiting for its request after this
  // long is cut too: a client sends a request within milliseconds of connecting or of its last
  // answer, so under pressure a thread is not left to a slow or idle one (a kept-alive client
  // reconnects) for the whole deadline while others queue.
  const auto pressed = std::min(deadline, std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(2)));
  Clock::time_point busy = Clock::now();  // when a request was last seen in progress
  bool idle_reported = true;
  std::unique_lock<std::mutex> lock(m_);
  while (!stopping_) {
    watch_cv_.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = Clock::now();
    const auto limit = jobs_.empty() ? deadline : pressed;
    for (auto& s : slots_) {
      std::lock_guard<std::mutex> slot_lock(s->m);
      if (s->fd >= 0 && !s->awaiting) {
        busy = now;
        idle_reported = false;
      }
      if (deadline_s_ <= 0 || s->fd < 0 || !s->awaiting || s->cut || now - s->since < limit || now < s->grace_until) continue;
      // Shut down, not closed: httplib's reads end and it closes the connection as after any end.
      ::shutdown(s->fd, SHUT_RDWR);
      s->cut = true;
      ++counters_->cut;
    }
    if (on_idle_ && !idle_reported && jobs_.empty() && now - busy > std::chrono::seconds(1)) {
      idle_reported = true;
      lock.unlock();
      on_idle_();
      lock.lock();
    }
  }
}

void HttpConnections::shutdown() {
  {
    std::lock_guard<std::mutex> lock(m_);
    if (stopping_ && threads_.empty()) return;
    stopping_ = true;
  }
  jobs_cv_.notify_all();
  watch_cv_.notify_all();
  for (auto& s : slots_) {
    std::lock_guard<std::mutex> lock(s->m);
    if (s->fd >= 0 && s->awaiting) ::shutdown(s->fd, SHUT_RDWR);
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (watcher_.joinable()) watcher_.join();
}

void HttpConnections::request_received() {
  if (!current_) return;
  std::lock_guard<std::mutex> lock(current_->m);
  current_->awaiting = false;
}

void HttpConnections::answer_written() {
  if (!current_) return;
  std::lock_guard<std::mutex> lock(current_->m);
  current_->awaiting = true;
  current_->since = Clock::now();
}

bool HttpConnections::client_gone() {
  // Only this thread changes its slot's fd: no lock needed to read it here.
  if (!current_ || current_->fd < 0) return false;
  pollfd p{current_->fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ib::serve

#endif
