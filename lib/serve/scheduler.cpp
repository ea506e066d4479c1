#include "serve/scheduler.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"

namespace ib::serve {

const char* to_string(Batching b) { return b == Batching::Static ? "static" : "continuous"; }

Scheduler::Scheduler(model::Model& engine, SchedulerOptions o) : engine_(engine), o_(o) {
  if (o_.max_seqs < 1) throw InputError(fmt::format("max_seqs must be at least 1, not {}", o_.max_seqs));
  // As vLLM requires (max_num_batched_tokens >= max_num_seqs): every running request can decode
  // in every step.
  if (o_.token_budget < o_.max_seqs)
    throw InputError(fmt::format("token_budget ({}) must be at least max_seqs ({}): every running request decodes each step",
                                 o_.token_budget, o_.max_seqs));
  if (o_.long_prefill < 0) throw InputError(fmt::format("long_prefill must be 0 or more, not {}", o_.long_prefill));
  if (o_.kv_tokens < 0) throw InputError(fmt::format("kv_tokens must be 0 or more, not {}", o_.kv_tokens));
}

Scheduler::~Scheduler() {
  for (const Active& a : running_) engine_.release(a.seq);
}

std::string Scheduler::check(const Request& r) const {
  const int64_t need = reservation(r);
  if (r.prompt.empty()) return "an empty prompt";
  if (r.max_tokens < 1) return fmt::format("max_tokens {} (at least 1)", r.max_tokens);
  if (need > engine_.config().max_positions)
    return fmt::format("prompt {} + max_tokens {} is past the model's context of {} tokens", r.prompt.size(), r.max_tokens,
                       engine_.config().max_positions);
  if (o_.kv_tokens > 0 && need > o_.kv_tokens)
    return fmt::format("prompt {} + max_tokens {} is past the KV budget of {} tokens", r.prompt.size(), r.max_tokens,
                       o_.kv_tokens);
  const bool whole_prompts = o_.batching == Batching::Continuous && !o_.chunked_prefill;
  if (whole_prompts && static_cast<int64_t>(r.prompt.size()) > o_.token_budget)
    return fmt::format("a prompt of {} tokens is past the token budget of {} without chunked prefill", r.prompt.size(),
                       o_.token_budget);
  for (int32_t t : r.prompt)
    if (t < 0 || t >= engine_.config().vocab)
      return fmt::format("token id {} is outside the model's vocabulary of {}", t, engine_.config().vocab);
  return {};
}

std::string Scheduler::submit(Request r) {
  std::string why = check(r);
  if (why.empty()) waiting_.push_back(std::move(r));
  return why;
}

bool Scheduler::cancel(int64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if (it->id == id) {
      waiting_.erase(it);
      return true;
    }
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->request.id == id) {
      engine_.release(it->seq);
      kv_reserved_ -= reservation(it->request);
      running_.erase(it);
      return true;
    }
  return false;
}

bool Scheduler::admit_front() {
  if (waiting_.empty() || static_cast<int>(running_.size()) >= o_.max_seqs) return false;
  const int64_t need = reservation(waiting_.front());
  if (o_.kv_tokens > 0 && kv_reserved_ + need > o_.kv_tokens) return false;
  Active a;
  a.request = std::move(waiting_.front());
  waiting_.pop_front();
  a.seq = engine_.new_sequence(static_cast<int>(need));
  // Its rows join the batch's low-rank products of that adapter (Punica's SGMV, S-LoRA): requests
  // of different adapters share every pass.
  if (a.request.adapter >= 0) engine_.set_adapter(a.seq, a.request.adapter);
  kv_reserved_ += need;
  running_.push_back(std::move(a));
  return true;
}

void Scheduler::plan_continuous() {
  int budget = o_.token_budget;
  const int cap = !o_.chunked_prefill ? INT_MAX : o_.long_prefill > 0 ? o_.long_prefill : o_.token_budget;
  // Decoding requests first: one token each (the budget holds them all: token_budget >= max_seqs).
  for (Active& a : running_) {
    const bool decoding = a.prefilled == static_cast<int>(a.request.prompt.size());
    a.chunk = decoding ? 1 : 0;
    budget -= a.chunk;
  }
  // Then the prompts under way (chunked), in admission order.
  for (Active& a : running_) {
    const int remaining = static_cast<int>(a.request.prompt.size()) - a.prefilled;
    if (remaining == 0 || budget == 0) continue;
    a.chunk = std::min({remaining, budget, cap});
    budget -= a.chunk;
  }
  // Then new requests, FCFS: the first that does not fit stops admission (no overtaking).
  while (budget > 0 && !waiting_.empty()) {
    const int len = static_cast<int>(waiting_.front().prompt.size());
    if (!o_.chunked_prefill && len > budget) break;
    if (!admit_front()) break;
    Active& a = running_.back();
    a.chunk = std::min({len, budget, cap});
    budget -= a.chunk;
  }
}

void Scheduler::plan_static() {
  if (running_.empty())
    while (admit_front()) {
    }
  bool prefilling = false;
  for (const Active& a : running_) prefilling |= a.prefilled < static_cast<int>(a.request.prompt.size());
  int budget = o_.token_budget;
  bool any = false;
  for (Active& a : running_) {
    const int len = static_cast<int>(a.request.prompt.size());
    a.chunk = 0;
    if (!prefilling) {
      a.chunk = 1;  // the batch decodes together
    } else if (a.prefilled < len && (len <= budget || !any)) {
      // Whole prompts under the budget, at least one per step (no chunking in this baseline).
      a.chunk = len;
      budget -= std::min(budget, len);
      any = true;
    }
  }
}

StepResult Scheduler::step() {
  StepResult out;
  if (o_.batching == Batching::Static)
    plan_static();
  else
    plan_continuous();
  std::vector<int> seqs, counts;
  std::vector<int32_t> tokens;
  std::vector<size_t> rows;  // running_ index of each pass row
  bool all_decode = true;
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = running_[i];
    if (a.chunk == 0) continue;
    const bool decoding = a.prefilled == static_cast<int>(a.request.prompt.size());
    if (decoding) {
      tokens.push_back(a.output.back());
      ++out.decode_rows;
    } else {
      if (a.prefilled == 0) out.admitted.push_back(a.request.id);
      tokens.insert(tokens.end(), a.request.prompt.begin() + a.prefilled, a.request.prompt.begin() + a.prefilled + a.chunk);
      out.prefill_tokens += a.chunk;
      ++out.prefill_requests;
      all_decode = false;
    }
    seqs.push_back(a.seq);
    counts.push_back(a.chunk);
    rows.push_back(i);
  }
  if (rows.empty()) throw std::logic_error("Scheduler::step with nothing to run");
  std::vector<int32_t> next(rows.size());
  bool own_sampling = false;
  for (size_t i : rows) own_sampling |= running_[i].request.sampling.has_value() || running_[i].request.constraint != nullptr;
  const size_t V = static_cast<size_t>(engine_.config().vocab);
  std::vector<float> logits(own_sampling ? rows.size() * V : 0);
  model::StepOutput so;
  so.sampling = o_.sampling;
  so.step = static_cast<uint64_t>(steps_);
  if (own_sampling)
    so.logits = logits.data();
  else
    so.next = next.data();
  const int n = static_cast<int>(rows.size());
  if (all_decode)
    engine_.decode(seqs.data(), tokens.data(), n, so);
  else
    engine_.prefill_batch(seqs.data(), counts.data(), n, tokens.data(), so, /*last_only=*/true);
  ++steps_;
  if (own_sampling)
    for (size_t j = 0; j < rows.size(); ++j) {
      const Active& a = running_[rows[j]];
      if (a.prefilled + a.chunk < static_cast<int>(a.request.prompt.size())) continue;  // a chunk: no token
      const model::SamplingParams sp = a.request.sampling.value_or(o_.sampling);
      // The request's seed and its token index: the same request draws the same tokens whatever
      // it is batched with.
      const float u = model::sample_uniform(sp.seed, a.output.size(), 0);
      const float* l = logits.data() + j * V;
      if (a.request.constraint) {
        const int left = a.request.max_tokens - static_cast<int>(a.output.size());
        next[j] = a.request.constraint->choose(l, static_cast<int>(V), sp, u, left);
        if (next[j] < 0) throw std::logic_error(fmt::format("request {}: its constraint allows no token", a.request.id));
      } else {
        next[j] = model::sample_token(l, static_cast<int>(V), sp, u);
      }
    }
  for (size_t j = 0; j < rows.size(); ++j) {
    Active& a = running_[rows[j]];
    const int len = static_cast<int>(a.request.prompt.size());
    if (a.prefilled < len) {
      a.prefilled += a.chunk;
      if (a.prefilled < len) continue;  // a chunk short of the prompt's end: its sample is not a token
    }
    a.output.push_back(next[j]);
    const bool complete = a.request.constraint && a.request.constraint->accept(next[j]);
    const bool stopped = complete || (a.request.eos >= 0 && next[j] == a.request.eos);
    a.done = stopped || static_cast<int>(a.output.size()) >= a.request.max_tokens;
    out.tokens.push_back({a.request.id, next[j], a.done, stopped});
  }
  // Finished requests leave: their sequences and reservations are returned.
  auto finished = [](const Active& a) { return a.done; };
  for (const Active& a : running_)
    if (finished(a)) {
      engine_.release(a.seq);
      kv_reserved_ -= reservation(a.request);
    }
  running_.erase(std::remove_if(running_.begin(), running_.end(), finished), running_.end());
  return out;
}

}  // namespace ib::serve
