#include "serve/scheduler.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "model/engine_studies.h"

namespace ib::serve {

namespace {
// Prefix caching: how many sequences sharing a block are followed past it (into a partly shared
// block at admission, or to find a kept prompt that covers or is covered by a finished one).
constexpr size_t kFollowed = 32;
}  // namespace

const char* to_string(Batching b) { return b == Batching::Static ? "static" : "continuous"; }

TokenLogprob token_logprob(const float* logits, int vocab, int32_t token, int top) {
  double mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = mx + std::log(sum);
  TokenLogprob t;
  t.token = token;
  t.logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z);
  const int k = std::min(top, vocab);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = i;
  // Most likely first; ties by the smaller id, as a greedy choice breaks them.
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t x, int32_t y) { return logits[x] > logits[y] || (logits[x] == logits[y] && x < y); });
  for (int i = 0; i < k; ++i)
    t.top.emplace_back(ids[static_cast<size_t>(i)],
                       static_cast<float>(static_cast<double>(logits[ids[static_cast<size_t>(i)]]) - log_z));
  return t;
}

Scheduler::Scheduler(model::Model& engine, SchedulerOptions o) : engine_(engine), o_(o), paged_(engine.kv_blocks() != nullptr) {
  if (o_.max_seqs < 1) throw InputError(fmt::format("max_seqs must be at least 1, not {}", o_.max_seqs));
  // As vLLM requires (max_num_batched_tokens >= max_num_seqs): every running request can decode
  // in every step.
  if (o_.token_budget < o_.max_seqs)
    throw InputError(fmt::format("token_budget ({}) must be at least max_seqs ({}): every running request decodes each step",
                                 o_.token_budget, o_.max_seqs));
  if (o_.long_prefill < 0) throw InputError(fmt::format("long_prefill must be 0 or more, not {}", o_.long_prefill));
  if (o_.kv_tokens < 0) throw InputError(fmt::format("kv_tokens must be 0 or more, not {}", o_.kv_tokens));
  if (paged_ && o_.kv_tokens > 0)
    throw InputError("kv_tokens bounds a contiguous engine's reservations; a paged engine admits by its free blocks");
  if (o_.prefix_caching && !paged_) throw InputError("prefix caching needs the paged KV cache (kv_blocks)");
  if (o_.prefix_caching && o_.batching == Batching::Static)
    throw InputError("prefix caching is a continuous-batching option (static batching reserves whole blocks)");
  if (o_.prefix_caching) index_.emplace(engine_.kv_blocks()->block_size());
  if (o_.preemption == Preemption::Swap && !paged_)
    throw InputError("swap preemption needs the paged KV cache (kv_blocks): a contiguous engine never preempts");
  if (o_.swap_space < 0) throw InputError(fmt::format("swap_space must be 0 or more bytes, not {}", o_.swap_space));
  if (o_.draft_model && o_.draft_model->config().vocab != engine.config().vocab)
    throw InputError(fmt::format("the draft model's vocabulary ({} tokens) is not the model's ({})",
                                 o_.draft_model->config().vocab, engine.config().vocab));
}

Scheduler::~Scheduler() {
  for (Active& a : running_) {
    release_seq(a.seq);
    release_draft(a);
  }
  clear_prefix_cache();
}

void Scheduler::clear_prefix_cache() {
  for (const auto& [seq, c] : cache_) release_seq(seq);
  cache_.clear();
}

void Scheduler::release_seq(int seq) {
  if (index_) index_->remove(seq);
  engine_.release(seq);
}

int Scheduler::blocks_for(int64_t tokens) const {
  const int64_t bs = engine_.kv_blocks()->block_size();
  return static_cast<int>((tokens + bs - 1) / bs);
}

int64_t Scheduler::reservation(const Request& r) const {
  const int64_t tokens = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (!paged_) return tokens;
  return o_.batching == Batching::Static ? blocks_for(tokens) : 0;
}

std::string Scheduler::check(const Request& r) const {
  const int64_t need = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  if (r.prompt.empty()) return "an empty prompt";
  if (r.max_tokens < 1) return fmt::format("max_tokens {} (at least 1)", r.max_tokens);
  if (need > engine_.config().max_positions)
    return fmt::format("prompt {} + max_tokens {} is past the model's context of {} tokens", r.prompt.size(), r.max_tokens,
                       engine_.config().max_positions);
  if (o_.kv_tokens > 0 && need > o_.kv_tokens)
    return fmt::format("prompt {} + max_tokens {} is past the KV budget of {} tokens", r.prompt.size(), r.max_tokens,
                       o_.kv_tokens);
  if (paged_ && blocks_for(need) > engine_.kv_blocks()->num_blocks())
    return fmt::format("prompt {} + max_tokens {} needs {} KV blocks of {} tokens and the pool has {}", r.prompt.size(),
                       r.max_tokens, blocks_for(need), engine_.kv_blocks()->block_size(), engine_.kv_blocks()->num_blocks());
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
  if (why.empty()) {
    Active a;
    a.request = std::move(r);
    waiting_.push_back(std::move(a));
  }
  return why;
}

int Scheduler::swapped_requests() const {
  return static_cast<int>(std::count_if(waiting_.begin(), waiting_.end(), [](const Active& a) { return a.swapped.has_value(); }));
}

bool Scheduler::cancel(int64_t id) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
    if (it->request.id == id) {
      if (it->swapped) swap_bytes_ -= it->swapped->bytes();
      waiting_.erase(it);
      return true;
    }
  for (auto it = running_.begin(); it != running_.end(); ++it)
    if (it->request.id == id) {
      release_seq(it->seq);
      release_draft(*it);
      kv_reserved_ -= reservation(it->request);
      running_.erase(it);
      return true;
    }
  return false;
}

bool Scheduler::evict_prefix() {
  if (cache_.empty()) return false;
  auto lru =
      std::min_element(cache_.begin(), cache_.end(), [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
  CachedPrefix& c = lru->second;
  // One block from the tail of the least recently used prefix (vLLM frees a request's blocks
  // tail first, so a prefix's head outlives its tail): under pressure, a long cached prompt
  // gives up only the blocks asked for, and a later request still finds its head.
  const int bs = engine_.kv_blocks()->block_size();
  const int keep = (static_cast<int>(c.tokens.size()) - 1) / bs * bs;
  if (keep <= 0) {
    release_seq(c.seq);
    cache_.erase(lru);
    return true;
  }
  engine_.truncate(c.seq, keep);
  c.tokens.resize(static_cast<size_t>(keep));
  index_->update(c.seq, c.adapter, keep, [&](int i) { return c.tokens[static_cast<size_t>(i)]; });
  return true;
}

int Scheduler::planned_blocks() const {
  int need = 0;
  for (const Active& a : running_)
    if (a.chunk > 0) need += engine_.blocks_needed(a.seq, a.chunk);
  return need;
}

void Scheduler::preempt_last(StepResult& out) {
  Active a = std::move(running_.back());
  running_.pop_back();
  release_draft(a);
  kv_reserved_ -= reservation(a.request);
  const int64_t swap = static_cast<int64_t>(sizeof(float)) * engine_.config().kv_elems_per_token() * a.cached;
  if (index_) index_->remove(a.seq);
  if (o_.preemption == Preemption::Swap && a.cached > 0 && swap_bytes_ + swap <= o_.swap_space) {
    a.swapped = engine_.swap_out(a.seq);  // releases the sequence
    swap_bytes_ += a.swapped->bytes();
    ++counters_.swapped_out;
    counters_.swapped_tokens += a.cached;
  } else {
    engine_.release(a.seq);
    a.lost = std::max(a.lost, a.cached);
    a.cached = 0;
  }
  a.seq = -1;
  a.chunk = 0;
  ++out.preempted;
  ++counters_.preemptions;
  waiting_.push_front(std::move(a));
}

bool Scheduler::fit_blocks(StepResult& out) {
  if (!paged_) return false;
  bool preempted = false;
  while (planned_blocks() > engine_.kv_blocks()->free_blocks()) {
    if (evict_prefix()) continue;
    if (running_.size() <= 1)  // check() keeps a request alone within the pool: this cannot happen
      throw std::logic_error("a lone request's chunk does not fit the KV block pool");
    preempt_last(out);
    preempted = true;
  }
  return preempted;
}

bool Scheduler::admit_front(int budget, int cap) {
  if (waiting_.empty() || static_cast<int>(running_.size()) >= o_.max_seqs) return false;
  Active& w = waiting_.front();
  const int64_t reserve = reservation(w.request);
  if (!paged_ && o_.kv_tokens > 0 && kv_reserved_ + reserve > o_.kv_tokens) return false;
  if (paged_ && o_.batching == Batching::Static && kv_reserved_ + reserve > engine_.kv_blocks()->num_blocks()) return false;
  if (w.swapped) return swap_in_front(budget, cap);
  // Prefix caching: the sequence sharing the longest prefix with the request's tokens, a kept one
  // or (as vLLM shares a block as soon as it is computed) a running request's cached tokens; at
  // least one token is left to prefill (its logits give the next token). A LoRA adapter changes K
  // and V (the index keys blocks by adapter); prompt_logprobs needs every prompt row's logits.
  int hit = 0, from_seq = -1;
  if (index_ && !w.request.prompt_logprobs) {
    std::vector<int32_t> tokens(static_cast<size_t>(w.total()));
    for (int i = 0; i < w.total(); ++i) tokens[static_cast<size_t>(i)] = w.token(i);
    const int most = w.total() - 1;
    const PrefixIndex::Match m = index_->longest(tokens.data(), most, w.request.adapter);
    const int blocks_hit = m.blocks * index_->block_size();
    // Its full blocks are exact; into the next block, the most recently listed holders are
    // followed token by token (a bounded number: a block shared by thousands of kept prompts
    // costs no more than a few).
    const size_t from = m.seqs.size() > kFollowed ? m.seqs.size() - kFollowed : 0;
    for (size_t i = m.seqs.size(); i-- > from;) {
      const int seq = m.seqs[i];
      const int n = extend_match(seq, tokens, blocks_hit, most);
      if (n > hit) {
        hit = n;
        from_seq = seq;
      }
    }
  }
  const int pending = w.total() - hit;
  if (o_.batching == Batching::Continuous && !o_.chunked_prefill && pending > budget) return false;
  int seq = -1;
  if (from_seq >= 0) {
    seq = engine_.share_prefix(from_seq, hit, static_cast<int>(w.request.prompt.size()) + w.request.max_tokens);
    if (const auto kept = cache_.find(from_seq); kept != cache_.end()) kept->second.used = ++clock_;
  } else {
    seq = engine_.new_sequence(static_cast<int>(w.request.prompt.size()) + w.request.max_tokens);
  }
  const int chunk = o_.batching == Batching::Static ? pending : std::min({pending, budget, cap});
  if (paged_ && o_.batching == Batching::Continuous) {
    // Its first chunk's blocks, after the running requests': evict cached prefixes for them, but
    // never preempt a running request to admit a new one.
    for (;;) {
      const int need = planned_blocks() + engine_.blocks_needed(seq, chunk);
      if (need <= engine_.kv_blocks()->free_blocks()) break;
      if (!evict_prefix()) {
        engine_.release(seq);
        return false;
      }
    }
  }
  run_front(seq, hit, chunk);
  return true;
}

void Scheduler::run_front(int seq, int cached, int chunk) {
  Active a = std::move(waiting_.front());
  waiting_.pop_front();
  a.swapped.reset();
  a.seq = seq;
  a.cached = cached;
  a.chunk = chunk;
  // Its rows join the batch's low-rank products of that adapter (Punica's SGMV, S-LoRA): requests
  // of different adapters share every pass.
  if (a.request.adapter >= 0) model::lora_adapters(engine_).set_adapter(a.seq, a.request.adapter);
  kv_reserved_ += reservation(a.request);
  running_.push_back(std::move(a));
}

bool Scheduler::swap_in_front(int budget, int cap) {
  Active& w = waiting_.front();
  const int cached = w.swapped->length;
  const int pending = w.total() - cached;
  if (!o_.chunked_prefill && pending > budget) return false;
  const int chunk = std::min({pending, budget, cap});
  // Its swapped rows' blocks and its first chunk's, after the running requests' (cached prefixes
  // evicted for them; a running request is never preempted to readmit one).
  while (planned_blocks() + blocks_for(static_cast<int64_t>(cached) + chunk) > engine_.kv_blocks()->free_blocks())
    if (!evict_prefix()) return false;
  const int seq = engine_.swap_in(*w.swapped, static_cast<int>(w.request.prompt.size()) + w.request.max_tokens);
  swap_bytes_ -= w.swapped->bytes();
  ++counters_.swapped_in;
  run_front(seq, cached, chunk);
  return true;
}

void Scheduler::plan_continuous(StepResult& out) {
  int budget = o_.token_budget;
  const int cap = !o_.chunked_prefill ? INT_MAX : o_.long_prefill > 0 ? o_.long_prefill : o_.token_budget;
  // Decoding requests first: one token each (the budget holds them all: token_budget >= max_seqs).
  for (Active& a : running_) {
    a.chunk = a.decoding() ? 1 : 0;
    a.draft.clear();
    budget -= a.chunk;
  }
  // Speculative decoding: their drafts, from the budget left, before the prompts.
  if (o_.spec_tokens > 0) budget = plan_drafts(budget);
  // Paged: drafts never cost a cached prefix or a running request its blocks.
  if (paged_ && planned_blocks() > engine_.kv_blocks()->free_blocks())
    for (Active& a : running_)
      if (!a.draft.empty()) {
        budget += static_cast<int>(a.draft.size());
        a.chunk = 1;
        a.draft.clear();
        if (a.draft_seq >= 0 && a.draft_cached > a.total()) {  // the draft model's unverified tokens
          a.draft_cached = a.total();
          o_.draft_model->truncate(a.draft_seq, a.draft_cached);
        }
      }
  // Then the prompts under way (chunked), in admission order.
  for (Active& a : running_) {
    const int pending = a.total() - a.cached;
    if (a.chunk > 0 || pending == 0 || budget == 0) continue;
    a.chunk = std::min({pending, budget, cap});
    budget -= a.chunk;
  }
  // Paged: the blocks for those rows, preempting when they are short; a step that preempts
  // admits nothing.
  if (fit_blocks(out)) return;
  // Then new requests, FCFS: the first that does not fit stops admission (no overtaking).
  while (budget > 0 && admit_front(budget, cap)) budget -= running_.back().chunk;
}

void Scheduler::plan_static() {
  if (running_.empty())
    while (admit_front(INT_MAX, INT_MAX)) {
    }
  bool prefilling = false;
  for (const Active& a : running_) prefilling |= !a.decoding();
  int budget = o_.token_budget;
  bool any = false;
  for (Active& a : running_) {
    const int pending = a.total() - a.cached;
    a.chunk = 0;
    if (!prefilling) {
      a.chunk = 1;  // the batch decodes together
    } else if (!a.decoding() && (pending <= budget || !any)) {
      // Whole prompts under the budget, at least one per step (no chunking in this baseline).
      a.chunk = pending;
      budget -= std::min(budget, pending);
      any = true;
    }
  }
}

StepResult Scheduler::step() {
  StepResult out;
  if (o_.batching == Batching::Static)
    plan_static();
  else
    plan_continuous(out);
  std::vector<int> seqs, counts;
  std::vector<int32_t> tokens;
  std::vector<size_t> rows;     // running_ index of each pass row
  std::vector<int> logit_rows;  // each row's positions whose logits are read: 1, or 1 + its drafts
  bool all_decode = true, drafting = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    Active& a = running_[i];
    if (a.chunk == 0) continue;
    if (a.decoding()) {
      tokens.push_back(a.output.back());
      tokens.insert(tokens.end(), a.draft.begin(), a.draft.end());
      drafting |= !a.draft.empty();
      out.drafted += static_cast<int>(a.draft.size());
      ++out.decode_rows;
    } else {
      if (!a.ran) {
        a.ran = true;
        out.admitted.push_back(a.request.id);
        out.prefix_hit_tokens += a.cached;
        ++counters_.admitted;
        counters_.prompt_tokens += static_cast<int64_t>(a.request.prompt.size());
        counters_.prefix_hit_tokens += a.cached;
      }
      // A preempted request's tokens computed again.
      counters_.recomputed_tokens += std::max(0, std::min(a.cached + a.chunk, a.lost) - a.cached);
      for (int t = 0; t < a.chunk; ++t) tokens.push_back(a.token(a.cached + t));
      out.prefill_tokens += a.chunk;
      ++out.prefill_requests;
      all_decode = false;
    }
    seqs.push_back(a.seq);
    counts.push_back(a.chunk);
    logit_rows.push_back(a.decoding() || a.request.prompt_logprobs ? a.chunk : 1);
    rows.push_back(i);
  }
  if (rows.empty()) throw std::logic_error("Scheduler::step with nothing to run");
  std::vector<int32_t> next(rows.size());
  std::vector<std::string> failure(rows.size());  // why row j's request cannot go on ("" when it can)
  // The tokens row j emits, in order (one, or with speculation the drafts kept and the token after
  // them), and their log-probabilities.
  std::vector<std::vector<int32_t>> picks(rows.size());
  std::vector<std::vector<std::optional<TokenLogprob>>> pick_logprobs(rows.size());
  // Whether a row's last pick completed its constraint's document (the draws stop there).
  std::vector<char> completed(rows.size(), 0);
  std::vector<float> processed;
  std::vector<int32_t> so_far;   // a row's output with the drafts kept so far (its penalties' history)
  bool own_sampling = drafting;  // verification reads the logits on the host
  for (size_t i : rows)
    own_sampling |= running_[i].request.sampling.has_value() || running_[i].request.constraint != nullptr ||
                    running_[i].request.logprobs >= 0 || running_[i].request.processors.active() ||
                    running_[i].request.prompt_logprobs;
  const size_t V = static_cast<size_t>(engine_.config().vocab);
  size_t logit_count = 0;
  for (int l : logit_rows) logit_count += static_cast<size_t>(l);
  std::vector<float> logits(own_sampling ? logit_count * V : 0);
  model::StepOutput so;
  so.sampling = o_.sampling;
  so.step = static_cast<uint64_t>(steps_);
  if (own_sampling)
    so.logits = logits.data();
  else
    so.next = next.data();
  const int n = static_cast<int>(rows.size());
  if (all_decode && !drafting)
    engine_.decode(seqs.data(), tokens.data(), n, so);
  else
    engine_.prefill_batch_rows(seqs.data(), counts.data(), n, tokens.data(), so, logit_rows.data());
  ++steps_;
  if (own_sampling) {
    size_t first_logits = 0;  // row j's first logits row
    for (size_t j = 0; j < rows.size(); ++j) {
      Active& a = running_[rows[j]];
      size_t base = first_logits;
      first_logits += static_cast<size_t>(logit_rows[j]);
      if (!a.decoding() && a.request.prompt_logprobs) {
        // Row t predicts the token at cached + t + 1: the prompt's, not yet sent, are logged.
        StepResult::PromptLogprobs p{a.request.id, a.prompt_logprobs_sent, {}};
        const int prompt = static_cast<int>(a.request.prompt.size());
        for (int t = 0; t < a.chunk; ++t) {
          const int at = a.cached + t + 1;
          if (at >= prompt || at < a.prompt_logprobs_sent) continue;
          p.tokens.push_back(token_logprob(logits.data() + (base + static_cast<size_t>(t)) * V, static_cast<int>(V),
                                           a.request.prompt[static_cast<size_t>(at)], std::max(0, a.request.logprobs)));
        }
        a.prompt_logprobs_sent += static_cast<int>(p.tokens.size());
        if (!p.tokens.empty()) out.prompt_logprobs.push_back(std::move(p));
        base += static_cast<size_t>(logit_rows[j] - 1);  // the token is drawn from the last row
      }
      if (a.cached + a.chunk < a.total()) continue;  // a chunk short of the end: no token
      const model::SamplingParams sp = a.request.sampling.value_or(o_.sampling);
      if (a.request.processors.active() && !a.draft.empty()) so_far = a.output;
      // Position t draws the token decoding would draw there, from the logits after the drafts
      // before it; the next position is read only while the draws equal the drafts.
      for (int t = 0; t < 1 + static_cast<int>(a.draft.size()); ++t) {
        const size_t index = a.output.size() + static_cast<size_t>(t);
        // The request's seed and its token index: the same request draws the same tokens whatever
        // it is batched with, and with or without speculation.
        const float u = model::sample_uniform(sp.seed, index, 0);
        const float* raw = logits.data() + (base + static_cast<size_t>(t)) * V;
        if (!std::all_of(raw, raw + V, [](float x) { return std::isfinite(x); })) {
          failure[j] = "its logits are not finite (NaN or Inf: the model's or its adapter's weights)";
          break;
        }
        // Its logit bias and penalties on a copy: log-probabilities are the raw logits' (vLLM's default).
        const float* l = raw;
        if (a.request.processors.active()) {
          processed.assign(raw, raw + V);
          apply_logits_processors(a.request.processors, a.request.prompt, a.draft.empty() ? a.output : so_far, processed.data(),
                                  static_cast<int>(V));
          l = processed.data();
        }
        int32_t token = -1;
        if (a.request.constraint) {
          const int left = a.request.max_tokens - static_cast<int>(index);
          token = a.request.constraint->choose(l, static_cast<int>(V), sp, u, left);
          if (token < 0) failure[j] = "its constraint allows no token here";
        } else {
          token = model::sample_token(l, static_cast<int>(V), sp, u);
        }
        if (token < 0) break;
        // Every token drawn here is emitted (the drafts kept, then the first draw that differs), so
        // a constraint takes each as it is drawn: the next position is chosen from its state after
        // this token, as decoding would choose it.
        bool complete = false;
        if (a.request.constraint) try {
            complete = a.request.constraint->accept(token);
          } catch (const std::exception& e) {
            failure[j] = e.what();
            break;
          }
        picks[j].push_back(token);
        completed[j] = complete;
        pick_logprobs[j].push_back(a.request.logprobs >= 0 ? std::optional<TokenLogprob>(token_logprob(raw, static_cast<int>(V),
                                                                                                       token, a.request.logprobs))
                                                           : std::nullopt);
        if (complete || static_cast<size_t>(t) >= a.draft.size() || token != a.draft[static_cast<size_t>(t)]) break;
        if (a.request.processors.active()) so_far.push_back(token);
      }
    }
  } else {
    for (size_t j = 0; j < rows.size(); ++j) {
      picks[j] = {next[j]};
      pick_logprobs[j].emplace_back();
    }
  }
  for (size_t j = 0; j < rows.size(); ++j) {
    Active& a = running_[rows[j]];
    a.cached += a.chunk;
    if (a.cached < a.total()) continue;  // a chunk short of the end: its sample is not a token
    // A request that cannot go on fails alone: its batch neighbours' tokens are unaffected.
    auto fail = [&](const std::string& why) {
      a.done = true;
      out.failed.push_back({a.request.id, why});
    };
    int kept = 0;  // drafted tokens emitted
    for (size_t t = 0; t < picks[j].size() && !a.done; ++t) {
      const int32_t token = picks[j][t];
      const bool complete = completed[j] && t + 1 == picks[j].size();
      a.output.push_back(token);
      if (t < a.draft.size() && token == a.draft[t]) ++kept;
      const bool stopped =
          complete || (a.request.eos >= 0 && token == a.request.eos) ||
          std::find(a.request.stop_tokens.begin(), a.request.stop_tokens.end(), token) != a.request.stop_tokens.end();
      a.done = stopped || static_cast<int>(a.output.size()) >= a.request.max_tokens;
      out.tokens.push_back({a.request.id, token, a.done, stopped, std::move(pick_logprobs[j][t])});
    }
    // What stopped the draws (after the tokens drawn before it, as decoding would have emitted them).
    if (!failure[j].empty() && !a.done) fail(failure[j]);
    out.accepted += kept;
    if (!a.draft.empty() && !out.tokens.empty() && out.tokens.back().request == a.request.id) {
      out.tokens.back().drafted = static_cast<int>(a.draft.size());
      out.tokens.back().accepted = kept;
    }
    // Speculation: the K/V of drafts that were not kept are dropped; the cache holds every token
    // but the last emitted, as after a decode step.
    if (!a.draft.empty() && a.cached > a.total() - 1) {
      a.cached = a.total() - 1;
      engine_.truncate(a.seq, a.cached);
    }
    // The draft model's cache holds the tokens before the drafts and all drafts but the last:
    // cut back to those that were kept (what follows is fed to it next time).
    if (a.draft_seq >= 0 && !a.draft.empty() && !a.done) {
      const int valid = a.total() - static_cast<int>(picks[j].size()) + std::min(kept, static_cast<int>(a.draft.size()) - 1);
      if (valid < a.draft_cached) {
        a.draft_cached = valid;
        o_.draft_model->truncate(a.draft_seq, valid);
      }
    }
  }
  counters_.spec_drafted += out.drafted;
  counters_.spec_accepted += out.accepted;
  // Finished requests leave: their sequences (or the prefix cache keeps them) and reservations
  // are returned.
  auto finished = [](const Active& a) { return a.done; };
  for (Active& a : running_)
    if (finished(a)) finish(a);
  running_.erase(std::remove_if(running_.begin(), running_.end(), finished), running_.end());
  // The blocks the running requests filled this step, listed for the next admissions.
  if (index_)
    for (const Active& a : running_) index_->update(a.seq, a.request.adapter, a.cached, [&](int i) { return a.token(i); });
  if (paged_) counters_.peak_blocks = std::max(counters_.peak_blocks, engine_.kv_blocks()->used_blocks());
  return out;
}

void Scheduler::finish(Active& a) {
  release_draft(a);
  kv_reserved_ -= reservation(a.request);
  if (!o_.prefix_caching) {
    engine_.release(a.seq);
    return;
  }
  CachedPrefix c;
  c.seq = a.seq;
  c.adapter = a.request.adapter;
  c.tokens.reserve(static_cast<size_t>(a.cached));
  for (int i = 0; i < a.cached; ++i) c.tokens.push_back(a.token(i));
  c.used = ++clock_;
  index_->update(c.seq, c.adapter, a.cached, [&](int i) { return c.tokens[static_cast<size_t>(i)]; });
  // A kept sequence that covers this one holds all its full blocks: among their holders (the
  // most recently listed, a bounded number), or any kept one when it has no full block listed.
  const int blocks = a.cached / index_->block_size();
  const std::vector<int>* holders = blocks > 0 ? index_->holders(c.seq, blocks - 1) : nullptr;
  std::vector<int> candidates;
  if (holders) {
    const size_t from = holders->size() > kFollowed ? holders->size() - kFollowed : 0;
    candidates.assign(holders->begin() + static_cast<std::ptrdiff_t>(from), holders->end());
  } else {
    for (const auto& [seq, kept] : cache_) candidates.push_back(seq);
  }
  for (int seq : candidates) {
    const auto kept = cache_.find(seq);
    if (kept == cache_.end() || !covers(kept->second, c)) continue;
    release_seq(c.seq);  // a kept sequence covers this one
    kept->second.used = c.used;
    return;
  }
  // A kept prefix of this one is covered by it: released (its blocks are this one's too, as far
  // as they were shared). Its listed blocks end along this one's.
  for (int seq : index_->ending_along(c.seq, kFollowed)) {
    const auto kept = cache_.find(seq);
    if (kept == cache_.end() || !covers(c, kept->second)) continue;
    release_seq(seq);
    cache_.erase(kept);
  }
  cache_.emplace(c.seq, std::move(c));
}

bool Scheduler::covers(const CachedPrefix& longer, const CachedPrefix& shorter) const {
  const size_t n = shorter.tokens.size();
  if (longer.adapter != shorter.adapter || longer.tokens.size() < n) return false;
  // The full blocks compare by their listed keys (one comparison; each key names its whole
  // prefix), the tokens after them one by one.
  const int bs = index_->block_size();
  const int blocks = static_cast<int>(n) / bs;
  size_t from = 0;
  if (blocks > 0) {
    const prefix::Hash128 *x = index_->key(longer.seq, blocks - 1), *y = index_->key(shorter.seq, blocks - 1);
    if (x && y) {
      if (*x != *y) return false;
      from = static_cast<size_t>(blocks) * static_cast<size_t>(bs);
    }
  }
  return std::equal(shorter.tokens.begin() + static_cast<std::ptrdiff_t>(from), shorter.tokens.end(),
                    longer.tokens.begin() + static_cast<std::ptrdiff_t>(from));
}

int Scheduler::extend_match(int seq, const std::vector<int32_t>& tokens, int from, int most) const {
  auto extend = [&](int cached, auto token_at) {
    int n = from;
    const int end = std::min(cached, most);
    while (n < end && token_at(n) == tokens[static_cast<size_t>(n)]) ++n;
    return n;
  };
  if (const auto kept = cache_.find(seq); kept != cache_.end()) {
    const CachedPrefix& c = kept->second;
    return extend(static_cast<int>(c.tokens.size()), [&](int i) { return c.tokens[static_cast<size_t>(i)]; });
  }
  for (const Active& r : running_)
    if (r.seq == seq) return extend(r.cached, [&](int i) { return r.token(i); });
  return 0;
}

}  // namespace ib::serve
