// The connections `infer-bench serve` answers, each known by its socket. cpp-httplib 0.11
// (Debian's) hands a handler the parsed request but never its socket, so the server could
// neither notice a client that went away while its non-streamed answer was being generated, nor
// bound the time a client takes to send a request: one byte per read timeout held a handler
// thread for ever (slowloris). This task queue (httplib's `new_task_queue`) runs each accepted
// connection on a thread of its pool with the connection's socket beside it, which gives both:
// a deadline for each request's line, headers and body, and a liveness check for the handler.
// (Newer cpp-httplib has `Request::is_connection_closed`; the deadline it still lacks.)
#pragma once

#if INFER_BENCH_HAVE_HTTP

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace ib::serve {

struct HttpConnectionCounters {
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> cut{0};  // connections closed for not sending a whole request by the deadline
};

class HttpConnections final : public httplib::TaskQueue {
 public:
  // `threads` connections served at once, more wait in the queue; a connection that has not sent
  // a whole request within `receive_deadline_s` of starting to wait for it (its first from when it
  // was accepted, queued or not; the next one on a kept-alive connection from the last answer) is
  // shut down, though never in its first second on a thread (a request queued past the deadline
  // is read if it is all there: many slow clients cost a thread a second each, not a deadline).
  // While connections are queued for a thread the deadline is 2 s (when it is longer).
  // `on_idle`, when given, runs on the watcher's thread once no request has been in progress for
  // a second after some were (the server gives freed memory back to the system there).
  HttpConnections(int threads, double receive_deadline_s, std::shared_ptr<HttpConnectionCounters> counters,
                  std::function<void()> on_idle = {});
  ~HttpConnections() override;
  HttpConnections(const HttpConnections&) = delete;
  HttpConnections& operator=(const HttpConnections&) = delete;

  void enqueue(std::function<void()> fn) override;
  // httplib's listen() is ending: connections waiting for a request are cut now (a kept-alive or
  // slow client does not hold the exit), the ones being answered finish, then the threads join.
  void shutdown() override;

  // On a handler's thread (no-ops elsewhere). The request has arrived whole: its deadline no
  // longer applies.
  static void request_received();
  // Its answer is written: the next request's deadline starts (httplib's logger calls this).
  static void answer_written();
  // Whether the client has closed its side of the connection (or reset it): its answer would be
  // written to no one.
  static bool client_gone();

 private:
  struct Slot;
  struct Job {
    std::function<void()> fn;
    int fd = -1;  // our duplicate of the connection's socket (see enqueue); -1 if unknown
    std::chrono::steady_clock::time_point accepted;
  };
  void work(Slot& slot);
  void watch();
  static thread_local Slot* current_;  // the slot of the connection this thread is answering

  double deadline_s_;
  std::shared_ptr<HttpConnectionCounters> counters_;
  std::function<void()> on_idle_;
  std::mutex m_;
  std::condition_variable jobs_cv_, watch_cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> threads_;
  std::thread watcher_;
};

}  // namespace ib::serve

#endif
