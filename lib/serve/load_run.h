// Runs a workload against the scheduler in real time, as a server would meet it: each request is
// submitted when the wall clock passes its arrival, the scheduler steps while it has work, and
// the loop sleeps until the next arrival when it has none. Every token's time is the end of the
// step that produced it (when a server could send it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serve/scheduler.h"
#include "serve/serve_request.h"
#include "workload/request.h"

namespace ib::serve {

struct RequestRecord {
  int64_t id = 0;
  char type = 's';
  int prompt_tokens = 0;
  double arrival = 0;    // seconds after the load's start
  double scheduled = 0;  // its first rows ran (the queueing delay ends)
  std::vector<double> token_times;
  std::vector<int32_t> tokens;
  std::string refused;  // why the scheduler would not take it ("" when served)
};

struct StepRecord {
  double start = 0, end = 0;
  int decode_rows = 0, prefill_tokens = 0;
};

struct LoadResult {
  std::vector<RequestRecord> requests;  // by request id
  std::vector<StepRecord> steps;
  double duration = 0;  // the load's start to the last token
};

// `interrupted` is polled between steps; when it returns true the load stops and the result
LoadResult run_load(Scheduler& s, const std::vector<workload::Request>& trace, bool (*interrupted)() = nullptr);

}  // namespace ib::serve
