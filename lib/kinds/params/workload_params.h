// The keys of a serving workload (workload/serving_load.h) and of the goodput it is judged by, declared
// once for every kind that draws one: `serve-load` (our scheduler in process) and `serve-endpoint`
// (any OpenAI-compatible server over HTTP). A kind's parameter struct derives from WorkloadKeys
// and adds these bindings to its ParamSet (core/params.h) where it wants them in its key list.
#pragma once

#include <cstdint>
#include <string>

#include "core/params.h"
#include "workload/serving_load.h"

namespace ib::serve {

struct WorkloadKeys {
  int64_t requests = 0, prompt_len = 0, prompt_len_max = 0, output_len = 0, output_len_max = 0, long_prompt = 0,
          system_prompt = 0;
  double qps = 0, burstiness = 1, long_share = 0;
  workload::Arrival arrival = workload::Arrival::Poisson;
  double slo_ttft = 0, slo_tpot = 0;
  int64_t workload_seed = 0;
};

// The workload the keys describe.
workload::WorkloadOptions workload_options(const WorkloadKeys& k);

// requests, qps, arrival, burstiness, prompt and output lengths, long prompts, the system prompt.
template <class P>
void add_workload_keys(ParamSet<P>& out) {
  static_assert(std::is_base_of_v<WorkloadKeys, P>, "a workload kind's keys derive from WorkloadKeys");
  using W = WorkloadKeys;
  out.add(static_cast<int64_t P::*>(&W::requests),
          key_spec("requests", ParamType::Int, "requests in the load", Value(int64_t{64}), 1.0, 1e6));
  out.add(static_cast<double P::*>(&W::qps),
          key_spec("qps", ParamType::Float, "mean arrival rate, requests per second (0: all arrive at once)", Value(4.0), 0.0));
  out.add(static_cast<workload::Arrival P::*>(&W::arrival),
          enum_key("arrival",
                   "arrival process: poisson (exponential gaps), gamma (gaps Gamma(burstiness, 1/(burstiness·qps)), "
                   "the same mean; vLLM's --burstiness) or constant (every gap 1/qps; GuideLLM's constant profile)",
                   "poisson", {"poisson", "gamma", "constant"}),
          [](const std::string& s) {
            return s == "gamma"      ? workload::Arrival::Gamma
                   : s == "constant" ? workload::Arrival::Constant
                                     : workload::Arrival::Poisson;
          });
  out.add(static_cast<double P::*>(&W::burstiness),
          key_spec("burstiness", ParamType::Float, "gamma's shape: 1 is Poisson, below 1 burstier", Value(1.0), 0.01, 100.0));
  out.add(static_cast<int64_t P::*>(&W::prompt_len),
          key_spec("prompt_len", ParamType::Int, "prompt tokens of a request (the shortest, with prompt_len_max)",
                   Value(int64_t{128}), 1.0));
  out.add(static_cast<int64_t P::*>(&W::prompt_len_max),
          key_spec("prompt_len_max", ParamType::Int,
                   "prompt tokens drawn uniformly in [prompt_len, prompt_len_max]; 0: prompt_len", Value(int64_t{0}), 0.0));
  out.add(static_cast<int64_t P::*>(&W::output_len),
          key_spec("output_len", ParamType::Int, "output tokens of a request, all generated (vLLM's ignore_eos)",
                   Value(int64_t{64}), 1.0));
  out.add(static_cast<int64_t P::*>(&W::output_len_max),
          key_spec("output_len_max", ParamType::Int,
                   "output tokens drawn uniformly in [output_len, output_len_max]; 0: output_len", Value(int64_t{0}), 0.0));
  out.add(static_cast<double P::*>(&W::long_share),
          key_spec("long_share", ParamType::Float,
                   "fraction of requests whose prompt is long_prompt tokens instead (long documents mixed with chats)",
                   Value(0.0), 0.0, 1.0));
  out.add(static_cast<int64_t P::*>(&W::long_prompt),
          key_spec("long_prompt", ParamType::Int, "prompt tokens of a long request", Value(int64_t{1024}), 1.0));
  out.add(
      static_cast<int64_t P::*>(&W::system_prompt),
      key_spec("system_prompt", ParamType::Int, "tokens of one system prompt every request starts with", Value(int64_t{0}), 0.0));
}

// slo_ttft, slo_tpot (goodput's bounds) and workload_seed.
template <class P>
void add_goodput_and_seed_keys(ParamSet<P>& out) {
  using W = WorkloadKeys;
  out.add(static_cast<double P::*>(&W::slo_ttft),
          key_spec("slo_ttft", ParamType::Seconds, "goodput's TTFT bound (0: none)", Value(0.0), 0.0));
  out.add(static_cast<double P::*>(&W::slo_tpot),
          key_spec("slo_tpot", ParamType::Seconds, "goodput's TPOT bound (0: none)", Value(0.0), 0.0));
  out.add(static_cast<int64_t P::*>(&W::workload_seed),
          key_spec("workload_seed", ParamType::Int,
                   "seed of the load's arrival times, lengths and tokens: every variant of a point serves the same load",
                   Value(int64_t{1}), 0.0));
}

}  // namespace ib::serve
