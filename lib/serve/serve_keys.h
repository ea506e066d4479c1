// The `serve-load` kind's keys, declared once as a typed parameter set (core/params.h): the
// model, the workload (serve/workload.h), the scheduler's limits (serve/scheduler.h) and the SLOs
// goodput counts against.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"
#include "serve/workload.h"

namespace ib::serve {

struct ServeKeys {
  std::string model, weights;
  int64_t requests = 0, prompt_len = 0, prompt_len_max = 0, output_len = 0, output_len_max = 0, long_prompt = 0,
          system_prompt = 0;
  double qps = 0, burstiness = 1, long_share = 0;
  Arrival arrival = Arrival::Poisson;
  int64_t max_seqs = 0, token_budget = 0, long_prefill = 0, kv_tokens = 0, kv_blocks = 0, block_size = 16;
  double temperature = 0, slo_ttft = 0, slo_tpot = 0;
  int64_t workload_seed = 0;
};

const ParamSet<ServeKeys>& serve_keys();

// The workload the keys describe.
WorkloadOptions workload_options(const ServeKeys& k);

}  // namespace ib::serve
