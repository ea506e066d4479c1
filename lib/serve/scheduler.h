// An iteration-level scheduler over the engine (Orca, vLLM): every step it chooses which requests
// run and how many of their tokens, then makes one forward pass of all of them.
//
// - Continuous batching: a request joins the running batch at any step and leaves when done.
//   Each step serves the decoding requests first (one token each), then prompt tokens, FCFS,
//   within the per-step token budget (vLLM's max_num_batched_tokens).
// - Chunked prefill (Sarathi-Serve, vLLM's --enable-chunked-prefill): a prompt may be split over
//   steps; one request takes at most `long_prefill` prompt tokens per step (vLLM's
//   long_prefill_token_threshold), so a long prompt does not hold the budget from the short
//   ones behind it and the decoding requests never stall for a whole long prefill.
// - Static batching, the baseline: a batch is formed from the waiting requests when the last one
//   has finished, its prompts are prefilled, and it decodes until every member is done; nothing
//   joins in between.
//
// KV admission: a request reserves prompt + max_tokens positions of the KV budget when it is
// admitted (the engine's caches are contiguous per sequence, sized at admission), so a running
// request never runs out of cache and nothing is preempted.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "model/model.h"
#include "serve/serve_request.h"

namespace ib::serve {

enum class Batching { Continuous, Static };

struct SchedulerOptions {
  Batching batching = Batching::Continuous;
  bool chunked_prefill = true;  // Continuous only: prompts split over steps
  int max_seqs = 16;            // requests running at once (vLLM max_num_seqs)
  int token_budget = 512;       // tokens per forward pass (vLLM max_num_batched_tokens)
  int long_prefill = 0;         // chunked: prompt tokens one request takes per step at most; 0 = the budget
  int64_t kv_tokens = 0;        // KV positions reserved over all running requests at most; 0 = unbounded
  model::SamplingParams sampling;
};

// What one step ran.
struct StepResult {
  std::vector<Emitted> tokens;    // in the order of the pass's rows
  std::vector<int64_t> admitted;  // requests whose first rows ran in this step
  int decode_rows = 0;            // requests that decoded one token
  int prefill_tokens = 0;         // prompt tokens run
  int prefill_requests = 0;       // requests with prompt tokens in the pass
};

class Scheduler {
 public:
  Scheduler(model::Model& engine, SchedulerOptions o);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Why a request can never run ("" when it can): no prompt, no output, a prompt + output past the
  // model's context or the KV budget, (unchunked) a prompt past the token budget, a token id
  // outside the vocabulary. Reads only the options: safe from any thread.
  std::string check(const Request& r) const;
  // Queues a request (FCFS) when check() finds nothing; returns check()'s reason.
  std::string submit(Request r);
  // Drops a request, queued or running (its sequence and reservation returned); false if unknown.
  bool cancel(int64_t id);
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // One iteration: the rows, one forward pass, the tokens it produced. Call while has_work().
  StepResult step();

  int running() const { return static_cast<int>(running_.size()); }
  int waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t kv_reserved() const { return kv_reserved_; }  // 0 when nothing runs: every reservation returned
  int64_t steps() const { return steps_; }

 private:
  struct Active {
    Request request;
    int seq = -1;
    int prefilled = 0;            // prompt tokens in the cache
    std::vector<int32_t> output;  // generated so far
    int chunk = 0;                // this step's rows
    bool done = false;            // its last token emitted
  };
  int64_t reservation(const Request& r) const { return static_cast<int64_t>(r.prompt.size()) + r.max_tokens; }
  bool admit_front();      // the first waiting request into running_, if the limits let it
  void plan_continuous();  // each running request's chunk, admissions
  void plan_static();

  model::Model& engine_;
  SchedulerOptions o_;
  std::deque<Request> waiting_;
  std::vector<Active> running_;  // in admission order
  int64_t kv_reserved_ = 0;
  int64_t steps_ = 0;
};

const char* to_string(Batching b);

}  // namespace ib::serve
