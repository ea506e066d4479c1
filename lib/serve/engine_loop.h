// The scheduler on a thread of its own, for a server: request handlers on other threads submit
// requests and read their tokens from a stream each; the engine thread steps while there is work
// and sleeps when there is none. Cancelling (a client that went away) returns the request's
// sequence and reservation at the next step; stop() lets everything queued and running finish.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "serve/histogram.h"
#include "serve/scheduler.h"
#include "serve/serve_request.h"

namespace ib::serve {

// One request's output as the engine thread writes it and a handler reads it.
class RequestStream {
 public:
  // Waits until there are tokens past `seen`, the request has ended, or `timeout_s` passed; the
  // tokens past `seen` (appended to `out`), and whether the request has ended.
  bool wait(size_t seen, std::vector<int32_t>& out, double timeout_s);
  bool stopped() const;  // ended at its eos token
  // The log-probabilities of tokens [from, end) received so far (a request that asked for them).
  std::vector<TokenLogprob> logprobs(size_t from) const;
  std::string error() const;  // the engine failed while it ran ("" if not)
  // Request::prompt_logprobs: the log-probabilities of the prompt's tokens after the first,
  // complete once the first output token has arrived.
  std::vector<TokenLogprob> prompt_logprobs() const;
  // Speculative decoding: tokens drafted for this request so far, and those kept.
  std::pair<int64_t, int64_t> speculation() const;

 private:
  friend class EngineLoop;
  void push(int32_t token, bool finished, bool stopped, std::optional<TokenLogprob> logprob = std::nullopt, int drafted = 0,
            int accepted = 0);
  void fail(const std::string& why);
  void push_prompt(std::vector<TokenLogprob> logprobs);

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprob> logprobs_, prompt_logprobs_;
  bool done_ = false, stopped_ = false;
  int64_t drafted_ = 0, accepted_ = 0;
  std::string error_;
};

struct EngineCounters {
  int64_t submitted = 0, finished = 0, cancelled = 0, failed = 0, prompt_tokens = 0, output_tokens = 0, steps = 0;
  int running = 0, waiting = 0;
  int64_t kv_reserved = 0;
  // Paged KV (0 otherwise): blocks in use and in the pool, prefix caching's tokens, preemptions.
  int kv_blocks_used = 0, kv_blocks_total = 0, cached_prefixes = 0;
  int64_t prefix_query_tokens = 0, prefix_hit_tokens = 0, preemptions = 0;
  // Swap preemption: requests swapped out and back, tokens swapped out; requests and host bytes held now.
  int64_t swapped_out = 0, swapped_in = 0, swapped_tokens = 0, swap_bytes = 0;
  int swapped_requests = 0;
  int64_t spec_drafted = 0, spec_accepted = 0;  // speculative decoding: drafted tokens verified, kept
  // Latencies as the engine thread sees them (seconds; vLLM's definitions): submitted to first
  // token, between tokens, per output token after the first, submitted to last token, queued
  // before its first pass.
  Histogram ttft{ttft_buckets()}, itl{token_latency_buckets()}, tpot{token_latency_buckets()};
  Histogram e2e{request_latency_buckets()}, queue{request_latency_buckets()};
};

class EngineLoop {
 public:
  EngineLoop(model::Model& engine, SchedulerOptions o);
  ~EngineLoop();  // stop(), then joins
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Queues a request (its id is assigned here) and returns its stream; throws InputError with the
  // scheduler's reason when it can never run, or when the loop is stopping.
  std::shared_ptr<RequestStream> submit(Request r, int64_t* id = nullptr);
  void cancel(int64_t id);
  // Releases the prefix cache (vLLM's /reset_prefix_cache): its blocks return to the pool except
  // those a running request shares. Waits until the engine thread has done it (between steps).
  void reset_prefix_cache();
  // No new requests; what is queued and running finishes, then the thread ends. Returns at once.
  void stop();
  void join();
  EngineCounters counters() const;
  const model::ModelConfig& config() const { return engine_.config(); }

 private:
  void run();
  void update_gauges();  // running, waiting, kv_reserved from the scheduler (m_ held)

  model::Model& engine_;
  Scheduler scheduler_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<Request> inbox_;
  std::vector<int64_t> cancels_;
  int64_t resets_asked_ = 0, resets_done_ = 0;  // reset_prefix_cache() calls, and those carried out
  bool ended_ = false;                          // the engine thread has returned
  std::map<int64_t, std::shared_ptr<RequestStream>> streams_;
  struct Timing {
    std::chrono::steady_clock::time_point submitted, first, last;
    int64_t tokens = 0;
  };
  std::map<int64_t, Timing> timing_;  // of the requests in streams_
  bool stopping_ = false;
  int64_t next_id_ = 0;
  EngineCounters counters_;
  std::thread thread_;
};

}  // namespace ib::serve
