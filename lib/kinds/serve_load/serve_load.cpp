#include "kinds/serve_load/serve_load.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/interrupt.h"
#include "core/metrics.h"
#include "model/model_choice.h"
#include "model/text_prompt.h"
#include "serve/load_run.h"
#include "workload/serving_load.h"

namespace ib::serve {
namespace {

// Requests checked against a generation alone: the first few, and the first long-prompt one.
constexpr size_t kCheckedRequests = 4;

struct Divergence {
  bool ok = true;    // every token equal, or the first difference at a tie of the reference
  bool tie = false;  // the outputs part at a near-tie of the reference's logits
  size_t position = 0;
  double gap = 0;  // the reference's logit margin of its token over the served one there
};

// `served` against greedy generation of the same prompt alone on `ref` (a fresh sequence): the
// first token that differs must be one the reference itself nearly chose (its logit within `tie`
// of the top one, relative to the top's size): batching changes the order of the sums, and past
// such a tie the two continuations are different texts, both right.
Divergence compare_alone(model::Model& ref, const workload::Request& r, const std::vector<int32_t>& served, double tie) {
  const size_t V = static_cast<size_t>(ref.config().vocab);
  std::vector<float> logits(V);
  model::StepOutput o;
  o.logits = logits.data();
  const int seq = ref.new_sequence(static_cast<int>(r.prompt.size()) + r.max_tokens);
  Divergence d;
  for (size_t i = 0; i < served.size(); ++i) {
    if (i == 0)
      ref.prefill(seq, r.prompt.data(), static_cast<int>(r.prompt.size()), 1, o);
    else
      ref.decode(&seq, &served[i - 1], 1, o);
    const size_t best = static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (static_cast<int32_t>(best) == served[i]) continue;
    d.position = i;
    d.gap = logits[best] - logits[static_cast<size_t>(served[i])];
    d.tie = d.gap <= tie * std::max(1.0, std::fabs(static_cast<double>(logits[best])));
    d.ok = d.tie;
    break;
  }
  ref.release(seq);
  return d;
}

}  // namespace

SchedulerOptions ServeLoad::options(bool greedy) const {
  SchedulerOptions o;
  o.batching = batching_;
  o.chunked_prefill = chunked_;
  o.max_seqs = static_cast<int>(keys_.max_seqs);
  o.token_budget = static_cast<int>(keys_.token_budget);
  o.long_prefill = static_cast<int>(keys_.long_prefill);
  o.kv_tokens = keys_.kv_tokens;
  o.prefix_caching = prefix_caching_;
  o.preemption = keys_.preemption == "swap" ? Preemption::Swap : Preemption::Recompute;
  o.spec_tokens = static_cast<int>(keys_.spec_tokens);
  o.sampling.temperature = greedy ? 0.0f : static_cast<float>(keys_.temperature);
  o.sampling.seed = seed_;
  return o;
}

void ServeLoad::prepare(const Point& p, BackendRuntime& rt, uint64_t seed) {
  keys_ = serve_keys().read(p);
  seed_ = seed;
  model::ModelChoice m = model::choose_model(keys_.model, keys_.weights, seed);
  config_ = m.config;
  weights_ = std::move(m.weights);
  std::vector<std::vector<int32_t>> texts;
  if (auto text = model::text_prompts(keys_.prompts, keys_.weights, config_.vocab)) texts = text->tokens;
  // The row's seed differs per variant; the load must not (the policies are compared on one load).
  trace_ = workload::make_workload(workload_options(keys_), config_.vocab, static_cast<uint64_t>(keys_.workload_seed), texts);
  workload_ = workload::describe_load(trace_);
  if (backend_ == Backend::Cuda) {
    model::EngineOptions o;
    o.max_batch = static_cast<int>(keys_.max_seqs);
    size_t longest = 0;
    for (const workload::Request& r : trace_) longest = std::max(longest, r.prompt.size());
    o.max_prefill = std::min<int>(8192, std::max<int>(static_cast<int>(keys_.token_budget), static_cast<int>(longest)));
    engine_ = model::make_cuda_model(config_, *weights_, o, rt.stream());
  } else {
    engine_ = model::make_cpu_model(config_, *weights_);
  }
  if (keys_.kv_blocks > 0 || prefix_caching_) {
    if (backend_ == Backend::Cuda) throw InputError("kv_blocks: the CUDA engine has no paged KV cache yet");
    int64_t longest = 0;
    for (const workload::Request& r : trace_)
      longest = std::max<int64_t>(longest, static_cast<int64_t>(r.prompt.size()) + r.max_tokens);
    // Unset: a pool as large as max_seqs contiguous caches of the load's longest request.
    const int64_t blocks =
        keys_.kv_blocks > 0 ? keys_.kv_blocks : keys_.max_seqs * ((longest + keys_.block_size - 1) / keys_.block_size);
    engine_->enable_paged_kv(static_cast<int>(std::min<int64_t>(blocks, 1 << 30)), static_cast<int>(keys_.block_size));
  }
  Scheduler check(*engine_, options(true));  // the options are refused here, before anything runs
}

Validation ServeLoad::validate(BackendRuntime&) {
  // One whole load, greedy, as the timed runs will serve it (the schedule does not depend on the
  // tokens: output lengths are fixed).
  LoadResult served;
  const kvcache::BlockManager* blocks = engine_->kv_blocks();
  {
    Scheduler s(*engine_, options(true));
    served = run_load(s, trace_, &interrupted);
    s.clear_prefix_cache();
    const int64_t held = blocks ? blocks->used_blocks() : engine_->kv_bytes();
    if (s.kv_reserved() != 0 || held != 0)
      return {false, "leaked", static_cast<double>(s.kv_reserved()), 0,
              fmt::format("after the load {} KV reservations are still held and the engine holds {} {} of cache", s.kv_reserved(),
                          held, blocks ? "blocks" : "bytes")};
  }
  if (blocks) {
    blocks->check_invariants();  // every reference count matches the tables; no block leaked
    if (blocks->used_blocks() != 0)
      return {false, "leaked", static_cast<double>(blocks->used_blocks()), 0, "the scheduler left sequences in the engine"};
  } else if (engine_->kv_bytes() != 0) {
    return {false, "leaked", static_cast<double>(engine_->kv_bytes()), 0, "the scheduler left sequences in the engine"};
  }
  size_t refused = 0;
  for (const RequestRecord& r : served.requests) refused += !r.refused.empty();
  std::vector<size_t> checked;
  for (size_t i = 0; i < served.requests.size() && checked.size() < kCheckedRequests; ++i)
    if (served.requests[i].refused.empty()) checked.push_back(i);
  for (size_t i = 0; i < served.requests.size(); ++i)
    if (served.requests[i].type == 'l' && served.requests[i].refused.empty()) {
      if (std::find(checked.begin(), checked.end(), i) == checked.end()) checked.push_back(i);
      break;
    }
  auto ref = model::make_cpu_model(config_, *weights_);
  const double tie = backend_ == Backend::Cpu ? 1e-3 : 5e-2;
  size_t wrong = 0, ties = 0, tokens = 0, incomplete = 0;
  std::string first_wrong;
  for (size_t i : checked) {
    const RequestRecord& rec = served.requests[i];
    if (static_cast<int>(rec.tokens.size()) != trace_[i].max_tokens) {
      ++incomplete;
      continue;
    }
    tokens += rec.tokens.size();
    const Divergence d = compare_alone(*ref, trace_[i], rec.tokens, tie);
    ties += d.tie;
    if (!d.ok) {
      ++wrong;
      if (first_wrong.empty())
        first_wrong = fmt::format("; request {} parts from its generation alone at token {} (the reference's margin {:.3g})",
                                  rec.id, d.position, d.gap);
    }
  }
  if (incomplete > 0 && !interrupted())
    return {false, "incomplete", static_cast<double>(incomplete), 0,
            fmt::format("{} checked requests ended short of their max_tokens", incomplete)};
  return {wrong == 0, "mismatches", static_cast<double>(wrong), 0,
          fmt::format("{} requests ({} tokens) of a served greedy load vs each generated alone on the CPU engine: {} identical, "
                      "{} part at a near-tie of the reference's logits (within {:g} of the top){}; every KV {} "
                      "returned; {} of {} requests refused",
                      checked.size(), tokens, checked.size() - wrong - ties, ties, tie, first_wrong,
                      blocks ? "block" : "reservation", refused, served.requests.size())};
}

void ServeLoad::run(BackendRuntime&) {
  const kvcache::BlockManager* blocks = engine_->kv_blocks();
  const int64_t copies = blocks ? blocks->copies_made() : 0;
  Scheduler s(*engine_, options(false));
  const LoadResult r = run_load(s, trace_, &interrupted);
  runs_.push_back(summarize_load(r, Slo{keys_.slo_ttft, keys_.slo_tpot}));
  paged_runs_.push_back({s.counters(), blocks ? blocks->copies_made() - copies : 0, s.counters().peak_blocks});
}

std::vector<Metric> ServeLoad::metrics() const {
  if (runs_.empty()) return {};
  std::vector<std::vector<Metric>> per_run;
  for (size_t i = 0; i < runs_.size(); ++i)
    per_run.push_back(metrics_of(runs_[i], i < paged_runs_.size() ? &paged_runs_[i] : nullptr));
  return median_of_runs(per_run);
}

std::vector<Metric> ServeLoad::metrics_of(const LoadSummary& s, const PagedRun* paged) const {
  std::vector<Metric> m = {
      {"ttft p50", s.ttft.p50 * 1e3, "ms"},
      {"ttft p99", s.ttft.p99 * 1e3, "ms"},
      {"tpot p50", s.tpot.p50 * 1e3, "ms"},
      {"tpot p99", s.tpot.p99 * 1e3, "ms"},
      {"itl p99", s.itl.p99 * 1e3, "ms"},
      {"e2e p50", s.e2e.p50 * 1e3, "ms"},
      {"e2e p99", s.e2e.p99 * 1e3, "ms"},
      {"queue p50", s.queue.p50 * 1e3, "ms"},
      {"req/s", s.request_rate, "req/s"},
      {"tok/s", s.output_rate, "tok/s"},
      {"batch", s.mean_batch, "rows"},
      {"steps", static_cast<double>(s.steps), ""},
      {"refused", static_cast<double>(s.refused), ""},
  };
  if (keys_.slo_ttft > 0 || keys_.slo_tpot > 0) m.push_back({"goodput", s.goodput, "req/s"});
  if (s.ttft_long.n > 0) {
    m.push_back({"ttft short p99", s.ttft_short.p99 * 1e3, "ms"});
    m.push_back({"ttft long p99", s.ttft_long.p99 * 1e3, "ms"});
  }
  if (paged && keys_.spec_tokens > 0) {
    const SchedulerCounters& c = paged->counters;
    m.push_back({"drafted", static_cast<double>(c.spec_drafted), ""});
    m.push_back({"kept", c.spec_drafted > 0 ? 100.0 * static_cast<double>(c.spec_accepted) / c.spec_drafted : 0.0, "%"});
  }
  if (paged && engine_->kv_blocks()) {
    const SchedulerCounters& c = paged->counters;
    const double hit = c.prompt_tokens > 0 ? 100.0 * static_cast<double>(c.prefix_hit_tokens) / c.prompt_tokens : 0.0;
    m.push_back({"prefix hit", hit, "%"});
    m.push_back({"preempted", static_cast<double>(c.preemptions), ""});
    m.push_back({"recomputed", static_cast<double>(c.recomputed_tokens), "tokens"});
    m.push_back({"swapped", static_cast<double>(c.swapped_tokens), "tokens"});
    m.push_back({"block copies", static_cast<double>(paged->block_copies), ""});
    m.push_back({"peak blocks", static_cast<double>(paged->peak_blocks), ""});
  }
  return m;
}

std::string ServeLoad::note() const {
  std::string how = batching_ == Batching::Static ? "static batching"
                    : chunked_                    ? "continuous batching, chunked prefill"
                                                  : "continuous batching, whole prompts";
  std::string s =
      fmt::format("{}: {}; {} (max_seqs {}, token_budget {}", config_.name, workload_, how, keys_.max_seqs, keys_.token_budget);
  if (chunked_ && batching_ == Batching::Continuous && keys_.long_prefill > 0)
    s += fmt::format(", long_prefill {}", keys_.long_prefill);
  if (keys_.kv_tokens > 0) s += fmt::format(", kv_tokens {}", keys_.kv_tokens);
  if (keys_.spec_tokens > 0 && batching_ == Batching::Continuous)
    s += fmt::format(", speculative decoding by prompt lookup, {} tokens", keys_.spec_tokens);
  if (const kvcache::BlockManager* b = engine_ ? engine_->kv_blocks() : nullptr)
    s += fmt::format(", paged KV {} blocks of {}{}{}", b->num_blocks(), b->block_size(),
                     prefix_caching_ ? ", prefix caching" : "", keys_.preemption == "swap" ? ", preemption by swap" : "");
  s += fmt::format("); metrics: medians of {} run{}", runs_.size(), runs_.size() == 1 ? "" : "s");
  return s;
}

}  // namespace ib::serve
