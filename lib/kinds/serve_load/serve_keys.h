// The `serve-load` kind's keys, declared once as a typed parameter set (core/params.h): the
// model, the workload (workload/serving_load.h), the scheduler's limits (serve/scheduler.h) and the SLOs
// goodput counts against.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"
#include "kinds/params/workload_params.h"
#include "model/text_prompt.h"

namespace ib::serve {

struct ServeKeys : WorkloadKeys {
  std::string model, weights;
  int64_t max_seqs = 0, token_budget = 0, long_prefill = 0, kv_tokens = 0, kv_blocks = 0, block_size = 16;
  std::string preemption = "recompute";  // paged KV: what a preempted request keeps (recompute, swap)
  int64_t spec_tokens = 0;               // speculative decoding by prompt lookup: tokens drafted per request and step (0: off)
  double temperature = 0;
  model::TextPromptSource prompts;  // text prompts in place of the seeded random ones
};

const ParamSet<ServeKeys>& serve_keys();

}  // namespace ib::serve
