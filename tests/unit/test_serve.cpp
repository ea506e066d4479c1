// The serving scheduler (serve/scheduler.h) on the CPU engine: every request gets its tokens and
// every reservation comes back; greedy outputs equal each request generated alone under every
// policy; the token budget, chunked prefill's per-request cap, static batching's closed batch and
// KV admission hold step by step; on a paged KV cache, preemption by recompute and prefix caching.
// The workload, the load's metrics and the `serve-load` kind: test_serve_load.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "core/errors.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "numerics/random.h"
#include "serve/scheduler.h"

namespace ib::serve {
namespace {

struct ServeEngine {
  model::ModelConfig config = *model::preset("tiny");
  std::unique_ptr<model::WeightSource> weights = model::random_weights(config, 11);
  std::unique_ptr<model::Model> engine = model::make_cpu_model(config, *weights);
};

Request serve_request(int64_t id, int prompt, int max_tokens, uint64_t seed) {
  Request r;
  r.id = id;
  r.max_tokens = max_tokens;
  for (int i = 0; i < prompt; ++i)
    r.prompt.push_back(static_cast<int32_t>((seed * 7919 + static_cast<uint64_t>(i) * 104729) % 512));
  return r;
}

// Greedy generation of one request alone: one prefill, then one decode per token.
std::vector<int32_t> generate_alone(model::Model& m, const Request& r) {
  const int seq = m.new_sequence(static_cast<int>(r.prompt.size()) + r.max_tokens);
  std::vector<int32_t> out(1);
  model::StepOutput o;
  o.next = out.data();
  m.prefill(seq, r.prompt.data(), static_cast<int>(r.prompt.size()), 1, o);
  std::vector<int32_t> tokens = {out[0]};
  while (static_cast<int>(tokens.size()) < r.max_tokens) {
    m.decode(&seq, &tokens.back(), 1, o);
    tokens.push_back(out[0]);
  }
  m.release(seq);
  return tokens;
}

// Each request's greedy generation alone, on a contiguous cache (what any policy must give it).
std::vector<std::vector<int32_t>> generations_alone(const std::vector<Request>& rs) {
  ServeEngine flat;
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : rs) alone.push_back(generate_alone(*flat.engine, r));
  return alone;
}

// Runs the scheduler to the end; the tokens each request received, and every step's result.
std::map<int64_t, std::vector<int32_t>> drain(Scheduler& s, std::vector<StepResult>* steps = nullptr) {
  std::map<int64_t, std::vector<int32_t>> out;
  for (int guard = 0; s.has_work() && guard < 100000; ++guard) {
    StepResult r = s.step();
    for (const Emitted& e : r.tokens) out[e.request].push_back(e.token);
    if (steps) steps->push_back(std::move(r));
  }
  return out;
}

std::vector<Request> mixed_requests() {
  std::vector<Request> rs;
  const int prompts[] = {5, 40, 3, 70, 12, 9, 33};
  const int outputs[] = {6, 3, 9, 4, 1, 7, 5};
  for (int i = 0; i < 7; ++i) rs.push_back(serve_request(i, prompts[i], outputs[i], 100 + static_cast<uint64_t>(i)));
  return rs;
}

// The step in which request `id` was admitted, or finished.
size_t step_admitting(const std::vector<StepResult>& steps, int64_t id) {
  for (size_t i = 0; i < steps.size(); ++i)
    if (std::count(steps[i].admitted.begin(), steps[i].admitted.end(), id)) return i;
  return SIZE_MAX;
}
size_t step_finishing(const std::vector<StepResult>& steps, int64_t id) {
  for (size_t i = 0; i < steps.size(); ++i)
    for (const Emitted& t : steps[i].tokens)
      if (t.request == id && t.finished) return i;
  return SIZE_MAX;
}

SchedulerOptions policy(Batching b, bool chunked) {
  SchedulerOptions o;
  o.batching = b;
  o.chunked_prefill = chunked;
  o.max_seqs = 3;
  o.token_budget = 24;
  o.long_prefill = chunked ? 10 : 0;
  return o;
}

// Prefix caching on continuous batching, each of the tests' prompts admitted whole (64 tokens a step).
SchedulerOptions prefix_policy() {
  SchedulerOptions o = policy(Batching::Continuous, true);
  o.prefix_caching = true;
  o.token_budget = 64;
  o.long_prefill = 0;
  return o;
}

TEST(ServeScheduler, EveryPolicyGivesEachRequestItsGenerationAlone) {
  ServeEngine e;
  const auto rs = mixed_requests();
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : rs) alone.push_back(generate_alone(*e.engine, r));
  for (auto [b, chunked] : {std::pair{Batching::Static, false}, {Batching::Continuous, false}, {Batching::Continuous, true}}) {
    SCOPED_TRACE(std::string(to_string(b)) + (chunked ? " chunked" : ""));
    SchedulerOptions o = policy(b, chunked);
    if (!chunked) o.token_budget = 80;  // whole prompts must fit the budget
    Scheduler s(*e.engine, o);
    for (const Request& r : rs) ASSERT_EQ(s.submit(r), "");
    const auto got = drain(s);
    for (const Request& r : rs) EXPECT_EQ(got.at(r.id), alone[static_cast<size_t>(r.id)]) << "request " << r.id;
    EXPECT_EQ(s.kv_reserved(), 0);
    EXPECT_EQ(e.engine->kv_bytes(), 0);  // every sequence released
  }
}

TEST(ServeScheduler, ChunkedPrefillKeepsTheBudgetTheCapAndTheDecodes) {
  ServeEngine e;
  Scheduler s(*e.engine, policy(Batching::Continuous, true));
  for (const Request& r : mixed_requests()) ASSERT_EQ(s.submit(r), "");
  std::vector<StepResult> steps;
  drain(s, &steps);
  bool split = false;
  int running_decoders = 0;  // requests that had their first token before the step
  std::set<int64_t> started;
  for (const StepResult& st : steps) {
    EXPECT_LE(st.decode_rows + st.prefill_tokens, 24);
    EXPECT_LE(st.prefill_tokens, 10 * st.prefill_requests);  // long_prefill per request
    EXPECT_EQ(st.decode_rows, running_decoders);             // no decoding request ever waits a step
    split |= st.prefill_tokens > 0 && st.decode_rows > 0;
    for (const Emitted& t : st.tokens) {
      if (started.insert(t.request).second) ++running_decoders;
      if (t.finished) --running_decoders;
    }
  }
  EXPECT_TRUE(split) << "no step mixed prompt chunks with decode rows";
  // The 70-token prompt took at least 7 steps of at most 10 tokens.
  EXPECT_GE(steps.size(), 7u);
}

TEST(ServeScheduler, ShortPromptsShareTheStepWithALongOne) {
  ServeEngine e;
  SchedulerOptions o = policy(Batching::Continuous, true);
  o.token_budget = 32;
  o.long_prefill = 8;
  Scheduler s(*e.engine, o);
  ASSERT_EQ(s.submit(serve_request(0, 200, 2, 1)), "");
  ASSERT_EQ(s.submit(serve_request(1, 6, 2, 2)), "");
  const StepResult first = s.step();
  // Both admitted in the first step: the long prompt takes its 8, the short one all of its 6.
  EXPECT_EQ(first.admitted, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(first.prefill_tokens, 14);
  ASSERT_EQ(first.tokens.size(), 1u);  // the short request's first token
  EXPECT_EQ(first.tokens[0].request, 1);
  // Whole prompts instead: the long prompt alone in a step, the short one behind it.
  Scheduler whole(*e.engine, [] {
    SchedulerOptions w;
    w.chunked_prefill = false;
    w.max_seqs = 3;
    w.token_budget = 200;
    return w;
  }());
  ASSERT_EQ(whole.submit(serve_request(0, 200, 2, 1)), "");
  ASSERT_EQ(whole.submit(serve_request(1, 6, 2, 2)), "");
  EXPECT_EQ(whole.step().admitted, (std::vector<int64_t>{0}));
  EXPECT_EQ(whole.step().admitted, (std::vector<int64_t>{1}));
}

TEST(ServeScheduler, StaticBatchingAdmitsNothingUntilTheBatchEnds) {
  ServeEngine e;
  SchedulerOptions o = policy(Batching::Static, false);
  o.max_seqs = 2;
  o.token_budget = 200;
  Scheduler s(*e.engine, o);
  ASSERT_EQ(s.submit(serve_request(0, 4, 2, 1)), "");
  ASSERT_EQ(s.submit(serve_request(1, 4, 6, 2)), "");
  ASSERT_EQ(s.submit(serve_request(2, 4, 2, 3)), "");
  std::vector<StepResult> steps;
  drain(s, &steps);
  // Request 2 is admitted only after request 1 (6 tokens) is done, though request 0 left after 2.
  EXPECT_GT(step_admitting(steps, 2), step_finishing(steps, 1));
  // Continuous batching takes request 2 into the slot request 0 freed.
  Scheduler c(*e.engine, [&] {
    SchedulerOptions w = o;
    w.batching = Batching::Continuous;
    w.chunked_prefill = false;
    return w;
  }());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(c.submit(serve_request(i, 4, i == 1 ? 6 : 2, static_cast<uint64_t>(i + 1))), "");
  steps.clear();
  drain(c, &steps);
  EXPECT_LT(step_admitting(steps, 2), step_finishing(steps, 1));
}

TEST(ServeScheduler, KvBudgetBoundsWhatRunsAndRefusesWhatCannotFit) {
  ServeEngine e;
  SchedulerOptions o = policy(Batching::Continuous, true);
  o.kv_tokens = 30;
  Scheduler s(*e.engine, o);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(s.submit(serve_request(i, 10, 5, static_cast<uint64_t>(i))), "");
  EXPECT_NE(s.submit(serve_request(9, 30, 5, 9)), "");  // 35 positions: never fits
  int most = 0;
  while (s.has_work()) {
    s.step();
    EXPECT_LE(s.kv_reserved(), 30);
    most = std::max(most, s.running());
  }
  EXPECT_EQ(most, 2);  // two reservations of 15
  EXPECT_EQ(s.kv_reserved(), 0);
  // Unchunked, a prompt past the token budget can never run; nor one past the model's context.
  Scheduler whole(*e.engine, policy(Batching::Continuous, false));
  EXPECT_NE(whole.submit(serve_request(0, 25, 1, 1)), "");
  EXPECT_NE(whole.submit(serve_request(1, e.config.max_positions, 1, 1)), "");
  EXPECT_NE(whole.submit(serve_request(2, 0, 1, 1)), "");
  EXPECT_THROW(Scheduler(*e.engine,
                         [] {
                           SchedulerOptions w;
                           w.max_seqs = 8;
                           w.token_budget = 4;
                           return w;
                         }()),
               InputError);
}

// The same engine with a paged KV cache of `blocks` blocks of 4 tokens.
struct PagedEngine : ServeEngine {
  explicit PagedEngine(int blocks) { engine->enable_paged_kv(blocks, 4); }
  const kvcache::BlockManager& blocks() const { return *engine->kv_blocks(); }
};

TEST(ServePaged, EveryPolicyOnPagedKvGivesEachRequestItsGenerationAloneAndReturnsEveryBlock) {
  const auto rs = mixed_requests();
  const auto alone = generations_alone(rs);
  for (auto [b, chunked, prefix] : {std::tuple{Batching::Static, false, false},
                                    {Batching::Continuous, false, false},
                                    {Batching::Continuous, true, false},
                                    {Batching::Continuous, true, true}}) {
    SCOPED_TRACE(std::string(to_string(b)) + (chunked ? " chunked" : "") + (prefix ? " prefix" : ""));
    PagedEngine e(64);
    SchedulerOptions o = policy(b, chunked);
    o.prefix_caching = prefix;
    if (!chunked) o.token_budget = 80;
    Scheduler s(*e.engine, o);
    for (const Request& r : rs) ASSERT_EQ(s.submit(r), "");
    const auto got = drain(s);
    for (const Request& r : rs) EXPECT_EQ(got.at(r.id), alone[static_cast<size_t>(r.id)]) << "request " << r.id;
    EXPECT_EQ(s.kv_reserved(), 0);
    EXPECT_EQ(s.counters().preemptions, 0);  // 64 blocks hold three of these at once
    s.clear_prefix_cache();
    EXPECT_EQ(e.blocks().used_blocks(), 0);
    e.blocks().check_invariants();
  }
}

// Five requests of 24 to 38 positions (a 16-block pool of 4 tokens holds two or three at once),
// and each one's tokens generated alone on a contiguous cache.
struct PreemptedLoad {
  std::vector<Request> requests;
  std::vector<std::vector<int32_t>> alone;
  PreemptedLoad() {
    for (int i = 0; i < 5; ++i) requests.push_back(serve_request(i, 10 + 3 * i, 14, 40 + static_cast<uint64_t>(i)));
    alone = generations_alone(requests);
  }
};

// A pool too small for the requests running at once: the last admitted is preempted, recomputed
// later, and still gets exactly its tokens; the blocks in use never pass the pool.
TEST(ServePaged, BlocksRunningOutPreemptByRecomputeAndLoseNoToken) {
  const PreemptedLoad load;
  const auto& rs = load.requests;
  const auto& alone = load.alone;
  PagedEngine e(16);  // 64 positions; the five need 24 to 38 each
  SchedulerOptions o = policy(Batching::Continuous, true);
  o.max_seqs = 4;
  Scheduler s(*e.engine, o);
  for (const Request& r : rs) ASSERT_EQ(s.submit(r), "");
  EXPECT_NE(s.submit(serve_request(9, 60, 10, 1)), "");  // 70 positions: 18 blocks, never fits
  std::vector<StepResult> steps;
  const auto got = drain(s, &steps);
  for (const Request& r : rs) EXPECT_EQ(got.at(r.id), alone[static_cast<size_t>(r.id)]) << "request " << r.id;
  int preempted = 0;
  for (const StepResult& st : steps) preempted += st.preempted;
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(s.counters().preemptions, preempted);
  EXPECT_GT(s.counters().recomputed_tokens, 0);
  EXPECT_LE(s.counters().peak_blocks, 16);
  EXPECT_EQ(s.counters().admitted, 5);  // a readmission is not a new admission
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  e.blocks().check_invariants();
}

// Preemption by swap: the same pool and requests; the preempted request's K/V goes to host memory
// and comes back into fresh blocks, so nothing is prefilled twice and every request still gets
// exactly its tokens. With too little swap space for any request, it falls back to recompute.
TEST(ServePaged, SwapPreemptionMovesKvToHostAndBackAndRecomputesNothing) {
  const PreemptedLoad load;
  const auto& rs = load.requests;
  const auto& alone = load.alone;
  for (const int64_t space : {int64_t{1} << 30, int64_t{64}}) {
    SCOPED_TRACE("swap space " + std::to_string(space));
    PagedEngine e(16);
    SchedulerOptions o = policy(Batching::Continuous, true);
    o.max_seqs = 4;
    o.preemption = Preemption::Swap;
    o.swap_space = space;
    Scheduler s(*e.engine, o);
    for (const Request& r : rs) ASSERT_EQ(s.submit(r), "");
    std::map<int64_t, std::vector<int32_t>> got;
    int64_t most_swapped = 0;
    for (int guard = 0; s.has_work() && guard < 100000; ++guard) {
      for (const Emitted& t : s.step().tokens) got[t.request].push_back(t.token);
      most_swapped = std::max(most_swapped, s.swap_bytes());
      EXPECT_LE(s.swap_bytes(), space);
      EXPECT_EQ(s.swapped_requests() > 0, s.swap_bytes() > 0);
    }
    for (const Request& r : rs) EXPECT_EQ(got.at(r.id), alone[static_cast<size_t>(r.id)]) << "request " << r.id;
    const SchedulerCounters& c = s.counters();
    EXPECT_GT(c.preemptions, 0);
    if (space > 64) {
      EXPECT_EQ(c.swapped_out, c.preemptions);  // every preemption swapped
      EXPECT_EQ(c.swapped_in, c.swapped_out);
      EXPECT_GT(c.swapped_tokens, 0);
      EXPECT_EQ(c.recomputed_tokens, 0);
    } else {
      EXPECT_EQ(c.swapped_out, 0);  // 64 bytes hold no request's K/V: recompute
      EXPECT_GT(c.recomputed_tokens, 0);
    }
    EXPECT_LE(c.peak_blocks, 16);
    EXPECT_EQ(s.swap_bytes(), 0);
    if (space > 64) {
      EXPECT_GT(most_swapped, 0);
    }
    EXPECT_EQ(e.blocks().used_blocks(), 0);
    e.blocks().check_invariants();
  }
}

// A swapped-out sequence's K/V rows come back bit for bit into other blocks, and a pool too full
// to take them back refuses with KvBlocksExhausted and changes nothing.
TEST(ServePaged, SwapOutAndInRestoreTheSameRowsOrRefuseWhenBlocksAreShort) {
  PagedEngine e(8);
  const Request r = serve_request(0, 13, 1, 3);
  const int seq = e.engine->new_sequence(20);
  model::StepOutput none;
  std::vector<float> logits(static_cast<size_t>(e.config.vocab));
  none.logits = logits.data();
  e.engine->prefill(seq, r.prompt.data(), 13, 1, none);
  const model::SwappedKv out = e.engine->swap_out(seq);
  EXPECT_EQ(out.length, 13);
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  const int hog = e.engine->new_sequence(32);
  std::vector<int32_t> filler(25, 1);
  e.engine->prefill(hog, filler.data(), 25, 1, none);  // 7 of 8 blocks
  EXPECT_THROW(e.engine->swap_in(out, 20), model::KvBlocksExhausted);
  EXPECT_EQ(e.blocks().used_blocks(), 7);
  e.engine->release(hog);
  const int back = e.engine->swap_in(out, 20);
  EXPECT_EQ(e.engine->length(back), 13);
  const model::SwappedKv again = e.engine->swap_out(back);
  EXPECT_EQ(again.rows, out.rows);
  // The next token's logits from the restored cache are those of the uninterrupted one.
  const int restored = e.engine->swap_in(out, 20);
  const int fresh = e.engine->new_sequence(20);
  e.engine->prefill(fresh, r.prompt.data(), 13, 1, none);
  std::vector<float> a(logits.size()), b(logits.size());
  const int32_t next = 5;
  none.logits = a.data();
  e.engine->decode(&restored, &next, 1, none);
  none.logits = b.data();
  e.engine->decode(&fresh, &next, 1, none);
  EXPECT_EQ(a, b);
  e.engine->release(restored);
  e.engine->release(fresh);
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  e.blocks().check_invariants();
}

// Requests sharing a 41-token system prompt, one after another: each after the first finds the
// prompt in the cache and prefills only its own part; the hit shares blocks (the one partial
// block copied on its first write, nothing else); outputs are those of each request alone.
TEST(ServePaged, APrefixHitPrefillsOnlyWhatFollowsAndCopiesAtMostTheHitsPartialBlock) {
  const Request system = serve_request(0, 41, 1, 5);
  std::vector<Request> rs;
  for (int i = 0; i < 4; ++i) {
    Request r = serve_request(i, 6, 5, 70 + static_cast<uint64_t>(i));
    r.prompt.insert(r.prompt.begin(), system.prompt.begin(), system.prompt.end());
    rs.push_back(r);
  }
  const auto alone = generations_alone(rs);
  PagedEngine e(64);
  SchedulerOptions o = prefix_policy();
  Scheduler s(*e.engine, o);
  for (const Request& r : rs) {
    ASSERT_EQ(s.submit(r), "");
    const int64_t copies = e.blocks().copies_made();
    std::vector<StepResult> steps;
    EXPECT_EQ(drain(s, &steps).at(r.id), alone[static_cast<size_t>(r.id)]) << "request " << r.id;
    ASSERT_FALSE(steps.empty());
    if (r.id == 0) {
      EXPECT_EQ(steps[0].prefix_hit_tokens, 0);
      EXPECT_EQ(steps[0].prefill_tokens, 47);
    } else {
      EXPECT_GE(steps[0].prefix_hit_tokens, 41) << "request " << r.id;
      EXPECT_EQ(steps[0].prefill_tokens, 47 - steps[0].prefix_hit_tokens) << "request " << r.id;
      EXPECT_LE(e.blocks().copies_made() - copies, 1) << "request " << r.id;  // only the partial block
    }
    EXPECT_EQ(s.cached_prefixes(), static_cast<int>(r.id) + 1);  // none covers another
  }
  EXPECT_GE(s.counters().prefix_hit_tokens, 3 * 41);
  // The pool is full of cached prefixes only when a request needs it: a long request evicts them.
  Request big = serve_request(9, 200, 8, 9);
  ASSERT_EQ(s.submit(big), "");
  drain(s);
  EXPECT_LT(s.cached_prefixes(), 5);
  s.clear_prefix_cache();
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  e.blocks().check_invariants();
  // Prefix caching needs the paged cache and continuous batching; kv_tokens is the contiguous bound.
  ServeEngine flat;
  SchedulerOptions bad = o;
  EXPECT_THROW(Scheduler(*flat.engine, bad), InputError);
  bad.batching = Batching::Static;
  EXPECT_THROW(Scheduler(*e.engine, bad), InputError);
  bad = policy(Batching::Continuous, true);
  bad.kv_tokens = 100;
  EXPECT_THROW(Scheduler(*e.engine, bad), InputError);
}

// Twelve cached prompts after one system prompt: a new prompt finds the one it shares the most
// with through the block index (its full blocks by their keys, then token by token into the next
// block), shares those tokens and prefills the rest; a prompt that shares less than one full block
// shares nothing (vLLM's granularity).
TEST(ServePaged, AmongManyCachedPromptsANewOneSharesWithTheOneItMatchesLongest) {
  const Request system = serve_request(0, 20, 1, 5);  // five 4-token blocks
  auto with_tail = [&](int64_t id, std::vector<int32_t> tail) {
    Request r = system;
    r.id = id;
    r.max_tokens = 2;
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    return r;
  };
  std::vector<Request> rs;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> tail;
    for (int j = 0; j < 6; ++j) tail.push_back(100 + 10 * i + j);
    rs.push_back(with_tail(i, tail));
  }
  // Request 7's tail for five tokens, then its own: 25 tokens in common with request 7 only.
  rs.push_back(with_tail(20, {170, 171, 172, 173, 174, 400, 401, 402}));
  // Three tokens of the system prompt, then others.
  Request short_share = serve_request(21, 12, 2, 99);
  std::copy(system.prompt.begin(), system.prompt.begin() + 3, short_share.prompt.begin());
  rs.push_back(short_share);
  const auto alone = generations_alone(rs);
  PagedEngine e(256);
  SchedulerOptions o = prefix_policy();
  Scheduler s(*e.engine, o);
  for (size_t k = 0; k < rs.size(); ++k) {
    const Request& r = rs[k];
    ASSERT_EQ(s.submit(r), "");
    const int64_t copies = e.blocks().copies_made();
    std::vector<StepResult> steps;
    EXPECT_EQ(drain(s, &steps).at(r.id), alone[k]) << "request " << r.id;
    const int hit = steps.at(0).prefix_hit_tokens;
    const int want = r.id == 20 ? 25 : r.id == 0 || r.id == 21 ? 0 : 20;  // 20: the system prompt
    EXPECT_EQ(hit, want) << "request " << r.id;
    EXPECT_LE(e.blocks().copies_made() - copies, 1) << "request " << r.id;  // only a partial block
  }
  EXPECT_EQ(s.cached_prefixes(), 14);
  s.clear_prefix_cache();
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  e.blocks().check_invariants();
}

// The index against a brute force: 40 prompts drawn from three tokens (long shared prefixes, many
// partial ones), each sent after the last finished. A prompt's hit must be its longest common
// prefix with any earlier request's cached tokens when that reaches a full block (4 tokens), else
// 0; its output must be its generation alone; and every block must come back.
TEST(ServePaged, PrefixHitsAreTheLongestSharedPrefixOfAnyEarlierRequest) {
  std::vector<Request> rs;
  for (int i = 0; i < 40; ++i) {
    Request r;
    r.id = i;
    r.max_tokens = 1 + static_cast<int>(ib::random_bits(11, static_cast<uint64_t>(i)) % 3);
    const int n = 3 + static_cast<int>(ib::random_bits(12, static_cast<uint64_t>(i)) % 20);
    for (int j = 0; j < n; ++j)
      r.prompt.push_back(static_cast<int32_t>(7 + ib::random_bits(13, static_cast<uint64_t>(i * 64 + j)) % 3));
    rs.push_back(r);
  }
  const auto alone = generations_alone(rs);
  PagedEngine e(512);
  Scheduler s(*e.engine, prefix_policy());
  std::vector<std::vector<int32_t>> cached;  // each earlier request's tokens in the cache: all but its last
  for (size_t k = 0; k < rs.size(); ++k) {
    const Request& r = rs[k];
    std::vector<int32_t> tokens = r.prompt;
    const int most = static_cast<int>(tokens.size()) - 1;
    int want = 0;
    for (const auto& c : cached) {
      int n = 0;
      while (n < most && n < static_cast<int>(c.size()) && c[static_cast<size_t>(n)] == tokens[static_cast<size_t>(n)]) ++n;
      want = std::max(want, n);
    }
    if (want < 4) want = 0;
    ASSERT_EQ(s.submit(r), "");
    std::vector<StepResult> steps;
    const auto out = drain(s, &steps).at(r.id);
    EXPECT_EQ(out, alone[k]) << "request " << r.id;
    EXPECT_EQ(steps.at(0).prefix_hit_tokens, want) << "request " << r.id;
    tokens.insert(tokens.end(), out.begin(), out.end() - 1);
    cached.push_back(tokens);
  }
  s.clear_prefix_cache();
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  e.blocks().check_invariants();
}

// Under block pressure a cached prefix gives up blocks from its tail, one at a time, as many as
// another request needs (vLLM frees a request's blocks tail first): a later request with the same
// prompt still finds its head, where evicting whole prefixes left it nothing.
TEST(ServePaged, UnderPressureACachedPrefixGivesUpItsTailBlocksFirst) {
  const Request a = serve_request(0, 40, 2, 31);
  const Request b = serve_request(1, 24, 4, 32);
  Request c = serve_request(2, 6, 3, 33);
  c.prompt.insert(c.prompt.begin(), a.prompt.begin(), a.prompt.end());
  const auto alone = generations_alone({a, b, c});
  PagedEngine e(16);  // 4-token blocks: a's 41 cached tokens hold 11, leaving 5 free
  SchedulerOptions o = prefix_policy();
  Scheduler s(*e.engine, o);
  int hits = 0;
  for (const Request& r : {a, b, c}) {
    ASSERT_EQ(s.submit(r), "");
    std::vector<StepResult> steps;
    EXPECT_EQ(drain(s, &steps).at(r.id), alone[static_cast<size_t>(r.id)]) << "request " << r.id;
    if (r.id == 1) {
      EXPECT_EQ(s.cached_prefixes(), 2);  // a's prefix was cut, not dropped
    }
    if (r.id == 2) hits = steps.at(0).prefix_hit_tokens;
  }
  // b (27 tokens, 7 blocks) took two of a's blocks: a's first 36 tokens stayed cached.
  EXPECT_EQ(hits, 36);
  s.clear_prefix_cache();
  EXPECT_EQ(e.blocks().used_blocks(), 0);
  e.blocks().check_invariants();
}

// A constraint that allows nothing from its `dead_at`-th token on (an empty language found late),
// or throws when a token is accepted (a constraint's fault): greedy otherwise.
class FailingConstraint : public TokenConstraint {
 public:
  FailingConstraint(int dead_at, bool throws) : dead_at_(dead_at), throws_(throws) {}
  int32_t choose(const float* logits, int vocab, const model::SamplingParams&, float, int) override {
    if (!throws_ && n_ >= dead_at_) return -1;
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  bool accept(int32_t) override {
    if (throws_ && ++n_ > dead_at_) throw std::logic_error("the constraint's fault");
    if (!throws_) ++n_;
    return false;
  }

 private:
  int dead_at_, n_ = 0;
  bool throws_;
};

// Prompt log-probabilities (the API's `echo` with logprobs): each prompt token's under the rows
// before it, across chunks, equal to one whole prefill's; the request takes nothing from the
// prefix cache (its rows' logits are needed) and emits each position once.
TEST(ServeScheduler, PromptLogprobsCoverThePromptOnceAcrossChunks) {
  ServeEngine e;
  const Request base = serve_request(0, 37, 3, 5);
  const int V = e.config.vocab, n = static_cast<int>(base.prompt.size());
  std::vector<float> whole(static_cast<size_t>(n) * static_cast<size_t>(V));
  {
    const int seq = e.engine->new_sequence(n + 4);
    e.engine->prefill(seq, base.prompt.data(), n, n, {whole.data()});
    e.engine->release(seq);
  }
  PagedEngine paged(64);
  SchedulerOptions o = policy(Batching::Continuous, true);  // prompts in chunks of 10
  o.prefix_caching = true;
  Scheduler s(*paged.engine, o);
  for (int64_t id : {1, 2}) {  // the second would hit the first's cached prompt
    Request r = base;
    r.id = id;
    r.prompt_logprobs = true;
    r.logprobs = 2;
    ASSERT_EQ(s.submit(r), "");
    std::vector<TokenLogprob> got;
    int hits = 0;
    for (int guard = 0; s.has_work() && guard < 1000; ++guard) {
      StepResult step = s.step();
      hits += step.prefix_hit_tokens;
      for (auto& p : step.prompt_logprobs) {
        EXPECT_EQ(p.from, 1 + static_cast<int>(got.size()));
        got.insert(got.end(), p.tokens.begin(), p.tokens.end());
      }
    }
    EXPECT_EQ(hits, 0);
    ASSERT_EQ(got.size(), static_cast<size_t>(n - 1));
    for (int i = 1; i < n; ++i) {
      const TokenLogprob want =
          token_logprob(whole.data() + static_cast<size_t>(i - 1) * V, V, base.prompt[static_cast<size_t>(i)], 2);
      EXPECT_EQ(got[static_cast<size_t>(i - 1)].token, base.prompt[static_cast<size_t>(i)]);
      EXPECT_NEAR(got[static_cast<size_t>(i - 1)].logprob, want.logprob, 1e-4) << "position " << i;
      ASSERT_EQ(got[static_cast<size_t>(i - 1)].top.size(), 2u);
      EXPECT_EQ(got[static_cast<size_t>(i - 1)].top[0].first, want.top[0].first);
    }
  }
}

TEST(ServeScheduler, ARequestThatCannotGoOnFailsAloneAndItsNeighboursGetTheirTokens) {
  for (bool throws : {false, true}) {
    ServeEngine e;
    Scheduler s(*e.engine, policy(Batching::Continuous, true));
    std::vector<Request> rs = mixed_requests();
    rs.resize(3);
    for (Request& r : rs) r.max_tokens = 6;
    rs[1].constraint = std::make_shared<FailingConstraint>(2, throws);
    std::vector<std::vector<int32_t>> alone;
    for (const Request& r : rs) alone.push_back(generate_alone(*e.engine, r));
    for (const Request& r : rs) ASSERT_EQ(s.submit(r), "");
    std::map<int64_t, std::vector<int32_t>> got;
    std::vector<std::pair<int64_t, std::string>> failed;
    for (int guard = 0; s.has_work() && guard < 1000; ++guard) {
      StepResult r = s.step();
      for (const Emitted& t : r.tokens) got[t.request].push_back(t.token);
      failed.insert(failed.end(), r.failed.begin(), r.failed.end());
    }
    ASSERT_EQ(failed.size(), 1u) << throws;
    EXPECT_EQ(failed[0].first, 1);
    EXPECT_NE(failed[0].second.find(throws ? "the constraint's fault" : "allows no token"), std::string::npos);
    EXPECT_EQ(got[0], alone[0]);
    EXPECT_EQ(got[2], alone[2]);
    EXPECT_EQ(got[1].size(), 2u);  // its tokens before it failed, and nothing after
    EXPECT_EQ(s.running(), 0);
    EXPECT_EQ(e.engine->kv_bytes(), 0);  // its sequence returned too
  }
}

}  // namespace
}  // namespace ib::serve
