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
// KV admission, two ways:
// - Contiguous engine: a request reserves prompt + max_tokens positions of the KV budget when it
//   is admitted (its cache is sized then), so a running request never runs out and nothing is
//   preempted.
// - Paged engine (Model::enable_paged_kv, vLLM's PagedAttention): blocks are taken as sequences
//   grow. A request is admitted when the blocks its first chunk needs are free; when a step's
//   rows need more blocks than are free, cached prefixes give up blocks (the least recently used
//   prefix's tail block first),
//   then the running request admitted last is preempted by recompute (vLLM's default): its
//   blocks return to the pool and it waits at the front of the queue, to prefill its prompt and
//   the tokens it already emitted again when it is readmitted. Or by swap (vLLM's
//   preemption_mode="swap", within swap_space bytes; past it, recompute): its K/V rows are copied
//   to host memory and copied back into fresh blocks when it is readmitted, nothing recomputed.
//   Static batching reserves each member's prompt + max_tokens blocks instead, so its batches are
//   never preempted.
// - Prefix caching (paged, continuous; vLLM's --enable-prefix-caching): a finished request's
//   sequence is kept with its tokens; a new request whose tokens start with those of a kept
//   sequence or of a running request's cached ones shares them (the blocks by reference count,
//   the partial last block copied on its first write, nothing else copied) and prefills only
//   what follows. The lookup is vLLM's: every full block of those sequences is listed under its
//   chained hash (PrefixIndex), so a prompt finds its longest cached run of full blocks in one
//   probe per block; the holders of its last block are then followed token by token into the
//   next block. A prompt that shares less than one full block shares nothing.
// - Speculative decoding (continuous; vLLM's prompt lookup, `"method": "ngram"`): a decoding
//   request drafts up to spec_tokens tokens by looking its last n tokens up
//   earlier in its own prompt and output, and its row in the step runs its last token and the
//   drafts together (every row's logits). Each position's token is drawn as it would be without
//   speculation (the request's seed and token index), and the drafts are kept while they equal
//   those draws: the output is the one decoding gives, token for token, at any temperature (for a
//   point-mass draft this is the rejection sampling of Leviathan et al.). A constrained request
//   (response_format) is verified under its constraint, stepped along the draws: each position
//   chooses among the tokens the constraint allows after the drafts before it, so its output is
//   again decoding's, and a draft the constraint forbids is never kept. Rejected drafts' K/V are
//   truncated away. Drafted tokens take the token budget before prompt chunks. With a draft
//   model (SchedulerOptions::draft_model) the drafts are its greedy tokens instead: it keeps a
//   sequence per request, catches up on the tokens it has not seen (the prompt, then what was
//   emitted since) in one pass of all drafting requests, then drafts K tokens in K batched decode
//   steps; after verification its cache is cut back to the tokens that were kept.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "serve/prefix_index.h"
#include "serve/serve_request.h"

namespace ib::serve {

enum class Batching { Continuous, Static };
// What a preempted request keeps: nothing (its tokens are prefilled again), or its K/V in host memory.
enum class Preemption { Recompute, Swap };

struct SchedulerOptions {
  Batching batching = Batching::Continuous;
  bool chunked_prefill = true;  // Continuous only: prompts split over steps
  int max_seqs = 16;            // requests running at once (vLLM max_num_seqs)
  int token_budget = 512;       // tokens per forward pass (vLLM max_num_batched_tokens)
  int long_prefill = 0;         // chunked: prompt tokens one request takes per step at most; 0 = the budget
  int64_t kv_tokens = 0;        // contiguous engine: KV positions reserved over all running requests at most; 0 = unbounded
  bool prefix_caching = false;  // paged engine, continuous batching: finished requests' blocks kept for later prompts
  Preemption preemption = Preemption::Recompute;  // paged engine
  int64_t swap_space = int64_t{4} << 30;          // Swap: host bytes preempted requests' K/V may hold (vLLM's 4 GiB)
  int spec_tokens = 0;  // continuous: tokens a decoding request drafts by prompt lookup per step (0: no speculation)
  int spec_ngram_min = 2, spec_ngram_max = 4;  // the lookup's n-gram lengths (vLLM's prompt_lookup_min / _max)
  // With spec_tokens: drafts from this model's greedy continuation instead of prompt lookup (vLLM's
  // draft model). Its vocabulary must be the engine's; it keeps a sequence per speculating request.
  model::Model* draft_model = nullptr;
  model::SamplingParams sampling;
};

// What one step ran.
struct StepResult {
  std::vector<Emitted> tokens;    // in the order of the pass's rows
  std::vector<int64_t> admitted;  // requests whose first rows ran in this step
  int decode_rows = 0;            // requests that decoded one token
  int prefill_tokens = 0;         // prompt tokens run
  int prefill_requests = 0;       // requests with prompt tokens in the pass
  int prefix_hit_tokens = 0;      // prompt tokens admitted requests found cached (prefix caching)
  int preempted = 0;              // running requests preempted (their blocks freed) to make room
  int drafted = 0, accepted = 0;  // speculative decoding: drafted tokens verified, and those kept
  // Prompt log-probabilities (Request::prompt_logprobs): a request's prompt tokens [from, from +
  // tokens.size()) under the logits of the rows before them, as this step's chunk computed them.
  struct PromptLogprobs {
    int64_t request = 0;
    int from = 0;
    std::vector<TokenLogprob> tokens;
  };
  std::vector<PromptLogprobs> prompt_logprobs;
  // Requests ended without a token in this step and why (a constraint that allows no token, its
  // logits not finite): each fails alone, its sequence returned.
  std::vector<std::pair<int64_t, std::string>> failed;
};

// What the scheduler has done since it was made (a server's /metrics counters).
struct SchedulerCounters {
  int64_t admitted = 0;           // first admissions (a readmission after preemption is not counted)
  int64_t prompt_tokens = 0;      // of admitted requests
  int64_t prefix_hit_tokens = 0;  // of those, found in the prefix cache
  int64_t preemptions = 0;
  int64_t recomputed_tokens = 0;                // tokens prefilled again after a preemption
  int64_t swapped_out = 0, swapped_in = 0;      // preemptions by swap; readmissions from host memory
  int64_t swapped_tokens = 0;                   // positions whose K/V were swapped out (not recomputed)
  int peak_blocks = 0;                          // paged: the most KV blocks in use after a step
  int64_t spec_drafted = 0, spec_accepted = 0;  // speculative decoding: drafted tokens verified, kept
};

class Scheduler {
 public:
  Scheduler(model::Model& engine, SchedulerOptions o);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Why a request can never run ("" when it can): no prompt, no output, a prompt + output past the
  // model's context, the KV budget or the block pool, (unchunked) a prompt past the token budget,
  // a token id outside the vocabulary. Reads only the options: safe from any thread.
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
  // Contiguous: KV positions reserved; static batching on a paged engine: blocks reserved. 0 when
  // nothing runs: every reservation returned.
  int64_t kv_reserved() const { return kv_reserved_; }
  int64_t steps() const { return steps_; }
  const SchedulerCounters& counters() const { return counters_; }
  int cached_prefixes() const { return static_cast<int>(cache_.size()); }
  // Swap: host bytes the waiting preempted requests' K/V hold now, and how many requests.
  int64_t swap_bytes() const { return swap_bytes_; }
  int swapped_requests() const;
  // Releases the prefix cache's sequences (their blocks return unless a running request shares them).
  void clear_prefix_cache();

 private:
  struct Active {
    Request request;
    int seq = -1;                             // -1 while waiting
    int cached = 0;                           // tokens of prompt + output in the sequence's cache
    std::vector<int32_t> output;              // generated so far (kept across a preemption)
    int chunk = 0;                            // this step's rows
    bool done = false;                        // its last token emitted
    bool ran = false;                         // its first rows have run (admitted once)
    int lost = 0;                             // tokens its preemptions dropped from the cache (to compute again)
    std::vector<int32_t> draft;               // this step's drafted tokens (speculative decoding): its row is 1 + draft
    int prompt_logprobs_sent = 1;             // prompt tokens whose log-probabilities were emitted (the first has none)
    int draft_seq = -1;                       // its sequence in the draft model (-1: none yet)
    int draft_cached = 0;                     // tokens of prompt + output in that sequence's cache
    std::optional<model::SwappedKv> swapped;  // preempted by swap: its K/V while it waits
    int total() const { return static_cast<int>(request.prompt.size() + output.size()); }
    int32_t token(int i) const {
      const int n = static_cast<int>(request.prompt.size());
      return i < n ? request.prompt[static_cast<size_t>(i)] : output[static_cast<size_t>(i - n)];
    }
    bool decoding() const { return !output.empty() && cached == total() - 1; }
  };
  // A finished request's sequence kept for prefix caching: its cached tokens, computed with its
  // adapter's projections (only a request of the same adapter may reuse them).
  struct CachedPrefix {
    int seq = -1;
    int adapter = -1;
    std::vector<int32_t> tokens;
    uint64_t used = 0;  // LRU clock
  };
  int64_t reservation(const Request& r) const;  // positions (contiguous) or blocks (static, paged)
  int blocks_for(int64_t tokens) const;
  bool admit_front(int budget, int cap);           // the first waiting request into running_, if the limits let it
  bool swap_in_front(int budget, int cap);         // admit_front for a request preempted by swap: its K/V back in blocks
  void run_front(int seq, int cached, int chunk);  // the first waiting request runs on `seq` (its first chunk planned)
  void plan_continuous(StepResult& out);           // each running request's chunk, admissions
  void plan_static();
  // Paged: preempts (LIFO) and evicts cached prefixes until the running requests' chunks fit the
  // free blocks; returns whether anything was preempted.
  bool fit_blocks(StepResult& out);
  int planned_blocks() const;  // blocks the running requests' chunks need
  bool evict_prefix();         // the least recently used cached prefix's last block released; false if none
  void preempt_last(StepResult& out);
  void finish(Active& a);  // its sequence released, or kept in the prefix cache
  // Prefix caching: the engine's sequence `seq` released (or swapped out), its blocks unlisted.
  void release_seq(int seq);
  // How far a running request's or kept prefix's sequence matches tokens[0, most), from `from`
  // on (the tokens before it match); 0 when seq is neither.
  int extend_match(int seq, const std::vector<int32_t>& tokens, int from, int most) const;
  bool covers(const CachedPrefix& longer, const CachedPrefix& shorter) const;  // shorter's tokens start longer's
  // Speculative decoding: the decoding requests' drafts within `budget`; returns the budget left.
  int plan_drafts(int budget);
  // Draft model: each request's draft of up to rooms[i] tokens (its greedy continuation, under
  // a fork of its constraint where it has one).
  void draft_from_model(const std::vector<Active*>& drafting, const std::vector<int>& rooms);
  // A constrained request's draft cut where it leaves the constraint's language or completes it.
  void cut_to_constraint(Active& a) const;
  void release_draft(Active& a);  // its sequence in the draft model freed

  model::Model& engine_;
  SchedulerOptions o_;
  bool paged_ = false;
  std::deque<Active> waiting_;                   // FCFS; preempted requests rejoin at the front
  std::vector<Active> running_;                  // in admission order
  std::unordered_map<int, CachedPrefix> cache_;  // by sequence
  std::optional<PrefixIndex> index_;             // prefix caching: the blocks of running and kept sequences
  uint64_t clock_ = 0;
  int64_t kv_reserved_ = 0;
  int64_t swap_bytes_ = 0;
  int64_t steps_ = 0;
  SchedulerCounters counters_;
};

const char* to_string(Batching b);

// The log-probability of `token` under softmax(logits), and the `top` most likely tokens with theirs.
TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int top);

}  // namespace ib::serve
