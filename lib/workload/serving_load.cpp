#include "workload/serving_load.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include <fmt/format.h>

#include "core/errors.h"

namespace ib::workload {
namespace {

int draw_len(std::mt19937_64& rng, int lo, int hi) {
  if (hi <= lo) return lo;
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

}  // namespace

std::vector<Request> make_workload(const WorkloadOptions& o, int vocab, uint64_t seed,
                                   const std::vector<std::vector<int32_t>>& texts) {
  if (o.requests < 1) throw InputError(fmt::format("requests must be at least 1, not {}", o.requests));
  if (o.qps < 0) throw InputError(fmt::format("qps must be 0 or more, not {}", o.qps));
  if (o.burstiness <= 0) throw InputError(fmt::format("burstiness must be above 0, not {}", o.burstiness));
  // Separate streams, so that changing the arrival process leaves the lengths and tokens alone.
  std::mt19937_64 time_rng(seed ^ 0x5e7e'a77eULL), len_rng(seed ^ 0x1e46'7a11ULL), tok_rng(seed ^ 0x70c3'4e55ULL);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> system(static_cast<size_t>(std::max(0, o.system_prompt)));
  for (auto& t : system) t = token(tok_rng);
  std::vector<Request> out;
  Arrivals arrivals(o.arrival, o.qps, o.burstiness);
  for (int i = 0; i < o.requests; ++i) {
    Request r;
    r.id = i;
    r.arrival = o.qps > 0 && i > 0 ? arrivals.next(time_rng) : 0;  // the first at once
    const bool is_long = o.long_share > 0 && std::uniform_real_distribution<double>(0, 1)(len_rng) < o.long_share;
    r.type = is_long ? 'l' : 's';
    const int len = is_long ? o.long_prompt : draw_len(len_rng, o.prompt_len, o.prompt_len_max);
    r.max_tokens = draw_len(len_rng, o.output_len, o.output_len_max);
    r.prompt = system;
    if (!texts.empty()) {
      const auto& text = texts[static_cast<size_t>(i) % texts.size()];
      r.prompt.insert(r.prompt.end(), text.begin(), text.end());
    } else {
      for (int j = 0; j < len; ++j) r.prompt.push_back(token(tok_rng));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string describe_load(const std::vector<Request>& trace) {
  if (trace.empty()) return "no requests";
  size_t lo = SIZE_MAX, hi = 0, total = 0, longs = 0, outputs = 0;
  for (const Request& r : trace) {
    lo = std::min(lo, r.prompt.size());
    hi = std::max(hi, r.prompt.size());
    total += r.prompt.size();
    longs += r.type == 'l';
    outputs += static_cast<size_t>(r.max_tokens);
  }
  const double span = trace.back().arrival;
  std::string s =
      fmt::format("{} requests arriving over {:.1f} s; prompts {}", trace.size(), span,
                  lo == hi ? fmt::format("{} tokens", lo) : fmt::format("{}–{} tokens (mean {})", lo, hi, total / trace.size()));
  if (longs > 0) s += fmt::format(", {} long", longs);
  s += fmt::format("; outputs {:.0f} tokens mean", static_cast<double>(outputs) / static_cast<double>(trace.size()));
  return s;
}

}  // namespace ib::workload
