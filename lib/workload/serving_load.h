// Serving workloads as vLLM's benchmark draws them: request arrivals (Poisson at a QPS, or bursty
// gamma-distributed gaps with the same mean), prompt and output lengths (fixed or uniform in a
// range), a share of long prompts mixed with short ones (the chunked-prefill case), an optional
// system prompt every request starts with, and text prompts through a tokenizer in place of
// seeded random tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "workload/arrivals.h"
#include "workload/request.h"

namespace ib::workload {

struct WorkloadOptions {
  int requests = 64;
  double qps = 4;                            // mean arrival rate; 0 = every request at time 0 (an offline batch)
  Arrival arrival = Arrival::Poisson;        // Constant: every gap 1/qps (GuideLLM's constant profile)
  double burstiness = 1;                     // gamma shape k: gaps ~ Gamma(k, 1/(k·qps)); 1 is Poisson, below 1 burstier
  int prompt_len = 128, prompt_len_max = 0;  // short prompts: uniform in [len, max] (max 0: exactly len)
  int output_len = 64, output_len_max = 0;   // output tokens, the same way
  double long_share = 0;                     // fraction of requests with a long prompt instead ('l')
  int long_prompt = 1024;
  int system_prompt = 0;  // tokens every prompt starts with (one shared system prompt)
};

// Requests in arrival order, ids 0, 1, ...; tokens are seeded ids below `vocab`. With `texts`
// (tokenized prompts), request i's prompt is texts[i mod size] after the system prompt and the
// length keys of prompts do not apply.
std::vector<Request> make_workload(const WorkloadOptions& o, int vocab, uint64_t seed,
                                   const std::vector<std::vector<int32_t>>& texts = {});

// "64 requests over 15.9 s (4.0/s Poisson); prompts 128 tokens, 16 of them 1,024; outputs 64".
std::string describe_load(const std::vector<Request>& trace);

}  // namespace ib::workload
