#include "serve/load_run.h"

#include <chrono>
#include <cstdint>
#include <thread>

namespace ib::serve {

LoadResult run_load(Scheduler& s, const std::vector<workload::Request>& trace, bool (*interrupted)()) {
  using clock = std::chrono::steady_clock;
  LoadResult out;
  out.requests.resize(trace.size());
  std::vector<size_t> index_of_id;  // request id -> its record
  for (size_t i = 0; i < trace.size(); ++i) {
    RequestRecord& r = out.requests[i];
    r.id = trace[i].id;
    r.type = trace[i].type;
    r.prompt_tokens = static_cast<int>(trace[i].prompt.size());
    r.arrival = trace[i].arrival;
    if (static_cast<size_t>(r.id) >= index_of_id.size()) index_of_id.resize(static_cast<size_t>(r.id) + 1, SIZE_MAX);
    index_of_id[static_cast<size_t>(r.id)] = i;
  }
  const auto t0 = clock::now();
  auto now = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };
  size_t next = 0;  // the first request not yet submitted (trace is in arrival order)
  while (next < trace.size() || s.has_work()) {
    if (interrupted && interrupted()) break;
    const double t = now();
    for (; next < trace.size() && trace[next].arrival <= t; ++next) out.requests[next].refused = s.submit(Request(trace[next]));
    if (!s.has_work()) {
      if (next < trace.size()) std::this_thread::sleep_for(std::chrono::duration<double>(trace[next].arrival - t));
      continue;
    }
    StepRecord step;
    step.start = t;
    const StepResult r = s.step();
    step.end = now();
    step.decode_rows = r.decode_rows;
    step.prefill_tokens = r.prefill_tokens;
    out.steps.push_back(step);
    for (int64_t id : r.admitted) out.requests[index_of_id[static_cast<size_t>(id)]].scheduled = step.start;
    for (const Emitted& e : r.tokens) {
      RequestRecord& rec = out.requests[index_of_id[static_cast<size_t>(e.request)]];
      rec.token_times.push_back(step.end);
      rec.tokens.push_back(e.token);
    }
    out.duration = step.end;
  }
  return out;
}

}  // namespace ib::serve
