#include "serve/engine_loop.h"

#include <chrono>
#include <exception>

#include <fmt/format.h>

#include "core/errors.h"

namespace ib::serve {

bool RequestStream::wait(size_t seen, std::vector<int32_t>& out, double timeout_s) {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done_ || tokens_.size() > seen; });
  if (tokens_.size() > seen) out.insert(out.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(seen), tokens_.end());
  return done_;
}

bool RequestStream::stopped() const {
  std::lock_guard<std::mutex> lock(m_);
  return stopped_;
}

std::string RequestStream::error() const {
  std::lock_guard<std::mutex> lock(m_);
  return error_;
}

std::vector<TokenLogprob> RequestStream::logprobs(size_t from) const {
  std::lock_guard<std::mutex> lock(m_);
  if (from >= logprobs_.size()) return {};
  return std::vector<TokenLogprob>(logprobs_.begin() + static_cast<std::ptrdiff_t>(from), logprobs_.end());
}

void RequestStream::push(int32_t token, bool finished, bool stopped, std::optional<TokenLogprob> logprob, int drafted,
                         int accepted) {
  {
    std::lock_guard<std::mutex> lock(m_);
    tokens_.push_back(token);
    drafted_ += drafted;
    accepted_ += accepted;
    if (logprob) logprobs_.push_back(std::move(*logprob));
    done_ = finished;
    stopped_ = stopped;
  }
  cv_.notify_all();
}

std::vector<TokenLogprob> RequestStream::prompt_logprobs() const {
  std::lock_guard<std::mutex> lock(m_);
  return prompt_logprobs_;
}

void RequestStream::push_prompt(std::vector<TokenLogprob> logprobs) {
  std::lock_guard<std::mutex> lock(m_);
  for (TokenLogprob& l : logprobs) prompt_logprobs_.push_back(std::move(l));
}

std::pair<int64_t, int64_t> RequestStream::speculation() const {
  std::lock_guard<std::mutex> lock(m_);
  return {drafted_, accepted_};
}

void RequestStream::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(m_);
    error_ = why;
    done_ = true;
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(model::Model& engine, SchedulerOptions o) : engine_(engine), scheduler_(engine, o) {
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  stop();
  join();
}

std::shared_ptr<RequestStream> EngineLoop::submit(Request r, int64_t* id) {
  auto stream = std::make_shared<RequestStream>();
  std::lock_guard<std::mutex> lock(m_);
  if (stopping_) throw InputError("the server is shutting down");
  r.id = next_id_++;
  if (std::string why = scheduler_.check(r); !why.empty()) throw InputError(why);
  if (id) *id = r.id;
  ++counters_.submitted;
  counters_.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  streams_[r.id] = stream;
  timing_[r.id].submitted = std::chrono::steady_clock::now();
  inbox_.push_back(std::move(r));
  cv_.notify_all();
  return stream;
}

void EngineLoop::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(m_);
  cancels_.push_back(id);
  cv_.notify_all();
}

void EngineLoop::reset_prefix_cache() {
  std::unique_lock<std::mutex> lock(m_);
  const int64_t ticket = ++resets_asked_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return resets_done_ >= ticket || ended_; });
}

void EngineLoop::stop() {
  std::lock_guard<std::mutex> lock(m_);
  stopping_ = true;
  cv_.notify_all();
}

void EngineLoop::join() {
  if (thread_.joinable()) thread_.join();
}

EngineCounters EngineLoop::counters() const {
  std::lock_guard<std::mutex> lock(m_);
  return counters_;
}

void EngineLoop::update_gauges() {
  counters_.running = scheduler_.running();
  counters_.waiting = scheduler_.waiting();
  counters_.kv_reserved = scheduler_.kv_reserved();
  if (const kvcache::BlockManager* b = engine_.kv_blocks()) {  // the engine thread's own state
    counters_.kv_blocks_used = b->used_blocks();
    counters_.kv_blocks_total = b->num_blocks();
  }
  const SchedulerCounters& sc = scheduler_.counters();
  counters_.cached_prefixes = scheduler_.cached_prefixes();
  counters_.prefix_query_tokens = sc.prompt_tokens;
  counters_.prefix_hit_tokens = sc.prefix_hit_tokens;
  counters_.preemptions = sc.preemptions;
  counters_.swapped_out = sc.swapped_out;
  counters_.swapped_in = sc.swapped_in;
  counters_.swapped_tokens = sc.swapped_tokens;
  counters_.swap_bytes = scheduler_.swap_bytes();
  counters_.swapped_requests = scheduler_.swapped_requests();
  counters_.spec_drafted = sc.spec_drafted;
  counters_.spec_accepted = sc.spec_accepted;
}

void EngineLoop::run() {
  {
    // The gauges and counters from the start, before a first request (a client reading them
    // around its load sees zeros, not metrics that are absent until something ran).
    std::lock_guard<std::mutex> lock(m_);
    update_gauges();
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || resets_done_ < resets_asked_ || scheduler_.has_work();
      });
      for (Request& r : inbox_) scheduler_.submit(std::move(r));  // checked in submit()
      inbox_.clear();
      for (int64_t id : cancels_) {
        auto it = streams_.find(id);
        if (it == streams_.end()) continue;  // already finished
        scheduler_.cancel(id);
        it->second->fail("cancelled");
        streams_.erase(it);
        timing_.erase(id);
        ++counters_.cancelled;
      }
      cancels_.clear();
      if (resets_done_ < resets_asked_) {
        scheduler_.clear_prefix_cache();
        resets_done_ = resets_asked_;
        cv_.notify_all();  // the callers waiting in reset_prefix_cache()
      }
      update_gauges();
      if (!scheduler_.has_work()) {
        if (stopping_) {
          ended_ = true;  // nothing left to reset: waiting callers return
          cv_.notify_all();
          return;
        }
        continue;
      }
    }
    // The step runs unlocked: handlers submit and cancel meanwhile.
    StepResult result;
    std::string failure;
    const auto step_start = std::chrono::steady_clock::now();
    try {
      result = scheduler_.step();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    std::lock_guard<std::mutex> lock(m_);
    ++counters_.steps;
    update_gauges();  // after the step too: the loop may sleep next, and /metrics must not go stale
    if (!failure.empty()) {
      // An engine error (out of memory, say) fails every request in flight; the scheduler drops them.
      for (auto& [id, stream] : streams_) {
        scheduler_.cancel(id);
        stream->fail(failure);
        ++counters_.failed;
      }
      streams_.clear();
      timing_.clear();
      continue;
    }
    for (const auto& [id, why] : result.failed) {  // that request alone
      auto it = streams_.find(id);
      if (it == streams_.end()) continue;
      it->second->fail(fmt::format("request {}: {}", id, why));
      streams_.erase(it);
      timing_.erase(id);
      ++counters_.failed;
    }
    const auto now = std::chrono::steady_clock::now();
    auto seconds = [](std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); };
    for (int64_t id : result.admitted)
      if (auto t = timing_.find(id); t != timing_.end()) counters_.queue.observe(seconds(step_start - t->second.submitted));
    for (StepResult::PromptLogprobs& p : result.prompt_logprobs)  // before the tokens: complete at the first
      if (auto it = streams_.find(p.request); it != streams_.end()) it->second->push_prompt(std::move(p.tokens));
    for (const Emitted& e : result.tokens) {
      auto it = streams_.find(e.request);
      if (it == streams_.end()) continue;
      it->second->push(e.token, e.finished, e.stopped, e.logprob, e.drafted, e.accepted);
      ++counters_.output_tokens;
      Timing& t = timing_[e.request];
      if (t.tokens++ == 0) {
        t.first = now;
        counters_.ttft.observe(seconds(now - t.submitted));
      } else {
        counters_.itl.observe(seconds(now - t.last));
      }
      t.last = now;
      if (e.finished) {
        counters_.e2e.observe(seconds(now - t.submitted));
        if (t.tokens > 1) counters_.tpot.observe(seconds(now - t.first) / static_cast<double>(t.tokens - 1));
        streams_.erase(it);
        timing_.erase(e.request);
        ++counters_.finished;
      }
    }
  }
}

}  // namespace ib::serve
