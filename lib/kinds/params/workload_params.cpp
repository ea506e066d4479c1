#include "kinds/params/workload_params.h"

namespace ib::serve {

workload::WorkloadOptions workload_options(const WorkloadKeys& k) {
  workload::WorkloadOptions o;
  o.requests = static_cast<int>(k.requests);
  o.qps = k.qps;
  o.arrival = k.arrival;
  o.burstiness = k.burstiness;
  o.prompt_len = static_cast<int>(k.prompt_len);
  o.prompt_len_max = static_cast<int>(k.prompt_len_max);
  o.output_len = static_cast<int>(k.output_len);
  o.output_len_max = static_cast<int>(k.output_len_max);
  o.long_share = k.long_share;
  o.long_prompt = static_cast<int>(k.long_prompt);
  o.system_prompt = static_cast<int>(k.system_prompt);
  return o;
}

}  // namespace ib::serve
