#include "workload/prefix_traces.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "numerics/random.h"
#include "workload/arrivals.h"

namespace ib::workload {
namespace {

std::vector<int32_t> random_tokens(int vocab, int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(std::max(n, 0)));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(random_bits(seed, i) % static_cast<uint64_t>(vocab));
  return t;
}

int around(std::mt19937_64& rng, int mean) {
  if (mean <= 1) return std::max(mean, 1);
  std::uniform_int_distribution<int> d(std::max(1, mean / 2), mean + mean / 2);
  return d(rng);
}

}  // namespace

SystemPromptWorkload::SystemPromptWorkload(int vocab, int system_prompt, int query_min, int query_max, uint64_t seed)
    : vocab_(vocab), query_min_(query_min), query_max_(std::max(query_min, query_max)), seed_(seed) {
  if (vocab <= 0 || system_prompt < 0 || query_min < 1) throw std::invalid_argument("system-prompt workload: bad sizes");
  system_ = random_tokens(vocab, system_prompt, mix64(seed ^ 0x5157ull));
}

SystemPromptWorkload::SystemPromptWorkload(std::vector<int32_t> system, std::vector<std::vector<int32_t>> queries)
    : system_(std::move(system)), queries_(std::move(queries)) {
  if (queries_.empty()) throw std::invalid_argument("system-prompt workload: no queries");
}

std::vector<int32_t> SystemPromptWorkload::request(uint64_t i) const {
  if (!queries_.empty()) {
    std::vector<int32_t> t = system_;
    const auto& q = queries_[i % queries_.size()];
    t.insert(t.end(), q.begin(), q.end());
    return t;
  }
  const uint64_t s = mix64(seed_ + 0x9E3779B97F4A7C15ull * (i + 1));
  const int q = query_min_ + static_cast<int>(s % static_cast<uint64_t>(query_max_ - query_min_ + 1));
  std::vector<int32_t> t = system_;
  const auto query = random_tokens(vocab_, q, s);
  t.insert(t.end(), query.begin(), query.end());
  return t;
}

std::vector<Request> system_prompt_trace(const SystemPromptWorkload& w, int count, double qps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Arrivals arrivals(Arrival::Poisson, qps > 0 ? qps : 1.0);
  std::vector<Request> trace(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i) {
    Request& r = trace[static_cast<size_t>(i)];
    r.id = i;
    r.prompt = w.request(static_cast<uint64_t>(i));
    r.arrival = arrivals.next(rng);
  }
  return trace;
}

std::vector<Request> mixed_workload(const MixedOptions& o, int vocab, uint64_t seed) {
  if (o.tenants < 1 || o.requests < 0 || o.qps <= 0) throw std::invalid_argument("mixed workload: tenants >= 1, qps > 0");
  std::mt19937_64 rng(seed);
  uint64_t stream = mix64(seed ^ 0xC0FFEEull);
  auto fresh = [&](int n) { return random_tokens(vocab, n, stream = mix64(stream + 1)); };

  std::vector<std::vector<int32_t>> system, fewshot;
  for (int t = 0; t < o.tenants; ++t) {
    const double scale = o.tenants == 1 ? 1.0 : 0.5 + static_cast<double>(t) / (o.tenants - 1);
    system.push_back(fresh(static_cast<int>(std::lround(o.system_prompt * scale))));
    fewshot.push_back(fresh(o.fewshot_tokens));
  }
  const size_t cap = o.max_prompt > 0 ? static_cast<size_t>(o.max_prompt) : SIZE_MAX;
  auto fits = [&](const std::vector<int32_t>& v) { return !v.empty() && v.size() <= cap; };

  struct Chat {
    std::vector<int32_t> history;
    int turns = 0;
  };
  std::vector<Chat> open;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> tenant(0, o.tenants - 1);
  Arrivals arrivals(Arrival::Poisson, o.qps);
  std::vector<Request> trace;
  while (static_cast<int>(trace.size()) < o.requests) {
    Request r;
    const double x = u(rng);
    const int t = tenant(rng);
    if (x < o.chat_share) {
      r.type = 'c';
      if (open.empty() || (open.size() < 8 && u(rng) >= 0.7)) open.push_back({system[static_cast<size_t>(t)], 0});
      const size_t pick = std::uniform_int_distribution<size_t>(0, open.size() - 1)(rng);
      Chat& c = open[pick];
      std::vector<int32_t> prompt = c.history;
      const auto msg = fresh(around(rng, o.user_tokens));
      prompt.insert(prompt.end(), msg.begin(), msg.end());
      const auto reply = fresh(around(rng, o.reply_tokens));
      if (!fits(prompt)) {  // too long for the model: the chat ends without this turn
        if (c.turns == 0)
          throw std::invalid_argument(
              fmt::format("mixed workload: a first chat turn of {} tokens exceeds the model's {} positions", prompt.size(), cap));
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
        continue;
      }
      r.prompt = prompt;
      c.history = std::move(prompt);
      c.history.insert(c.history.end(), reply.begin(), reply.end());
      if (++c.turns >= o.max_turns) open.erase(open.begin() + static_cast<std::ptrdiff_t>(pick));
    } else if (x < o.chat_share + o.fewshot_share) {
      r.type = 'f';
      r.prompt = system[static_cast<size_t>(t)];
      r.prompt.insert(r.prompt.end(), fewshot[static_cast<size_t>(t)].begin(), fewshot[static_cast<size_t>(t)].end());
      const auto q = fresh(around(rng, o.user_tokens));
      r.prompt.insert(r.prompt.end(), q.begin(), q.end());
    } else {
      r.type = 's';
      r.prompt = system[static_cast<size_t>(t)];
      const auto q = fresh(around(rng, o.user_tokens));
      r.prompt.insert(r.prompt.end(), q.begin(), q.end());
    }
    if (!fits(r.prompt))
      throw std::invalid_argument(
          fmt::format("mixed workload: a {}-token prompt exceeds the model's {} positions", r.prompt.size(), cap));
    r.arrival = arrivals.next(rng);
    r.id = static_cast<int64_t>(trace.size());
    trace.push_back(std::move(r));
  }
  return trace;
}

std::string describe_prefix_trace(const std::vector<Request>& trace) {
  int c = 0, f = 0, s = 0;
  size_t lo = SIZE_MAX, hi = 0, sum = 0;
  for (const auto& r : trace) {
    c += r.type == 'c';
    f += r.type == 'f';
    s += r.type == 's';
    lo = std::min(lo, r.prompt.size());
    hi = std::max(hi, r.prompt.size());
    sum += r.prompt.size();
  }
  if (trace.empty()) return "no requests";
  return fmt::format("{} requests: {} chat turns, {} few-shot, {} single; prompts {}–{} tokens (mean {})", trace.size(), c, f, s,
                     lo, hi, sum / trace.size());
}

}  // namespace ib::workload
