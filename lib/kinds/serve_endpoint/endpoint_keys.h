// The `serve-endpoint` kind's keys, declared once as a typed parameter set (core/params.h): the
// servers, the client's limits, the load (kinds/params/workload_params.h) and where its prompts
// come from (seeded tokens, a dataset of conversations, a trace's arrivals and blocks).
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"
#include "kinds/params/workload_params.h"

namespace ib::serve {

struct EndpointKeys : WorkloadKeys {
  std::string endpoint, baseline_endpoint, served_model, weights, api, api_key_env, shard, save_result, response_schema;
  std::string dataset, trace, trace_time_unit;
  int64_t max_concurrency = 0, dataset_output_len = 0, trace_block = 512;
  double request_timeout = 300, max_send_lag = 0.01, start_at = 0, duration = 0;
};

const ParamSet<EndpointKeys>& endpoint_keys();

}  // namespace ib::serve
