// Kind `serve-load` (the chapter's metrics section under load): a workload of requests arriving
// over time, served by the scheduler over the engine three ways, measured as vLLM's serving
// benchmark measures a server (serve/load_metrics.h).
#include <fmt/format.h>

#include "core/registry.h"
#include "model/decode_variants.h"
#include "model/text_prompt.h"
#include "serve/serve_keys.h"
#include "serve/serve_load.h"

namespace ib::serve {

const ParamSet<ServeKeys>& serve_keys() {
  using P = ServeKeys;
  // One statement per key: as one chained expression GCC 12 reports a false -Wmaybe-uninitialized
  // in std::variant's destructor (libstdc++), inlined from one of the Value temporaries.
  static const ParamSet<ServeKeys> set = [] {
    ParamSet<ServeKeys> out;
    out.add(&P::model, model::model_key("tiny"));
    out.add(&P::weights, model::weights_key());
    out.add(&P::requests, key_spec("requests", ParamType::Int, "requests in the load", Value(int64_t{64}), 1.0, 1e6));
    out.add(&P::qps,
            key_spec("qps", ParamType::Float, "mean arrival rate, requests per second (0: all arrive at once)", Value(4.0), 0.0));
    out.add(&P::arrival,
            enum_key("arrival",
                     "arrival process: poisson (exponential gaps) or gamma (gaps Gamma(burstiness, 1/(burstiness·qps)), "
                     "the same mean; vLLM's --burstiness)",
                     "poisson", {"poisson", "gamma"}),
            [](const std::string& s) { return s == "gamma" ? Arrival::Gamma : Arrival::Poisson; });
    out.add(&P::burstiness,
            key_spec("burstiness", ParamType::Float, "gamma's shape: 1 is Poisson, below 1 burstier", Value(1.0), 0.01, 100.0));
    out.add(&P::prompt_len, key_spec("prompt_len", ParamType::Int,
                                     "prompt tokens of a request (the shortest, with prompt_len_max)", Value(int64_t{128}), 1.0));
    out.add(&P::prompt_len_max,
            key_spec("prompt_len_max", ParamType::Int,
                     "prompt tokens drawn uniformly in [prompt_len, prompt_len_max]; 0: prompt_len", Value(int64_t{0}), 0.0));
    out.add(&P::output_len, key_spec("output_len", ParamType::Int,
                                     "output tokens of a request, all generated (vLLM's ignore_eos)", Value(int64_t{64}), 1.0));
    out.add(&P::output_len_max,
            key_spec("output_len_max", ParamType::Int,
                     "output tokens drawn uniformly in [output_len, output_len_max]; 0: output_len", Value(int64_t{0}), 0.0));
    out.add(&P::long_share, key_spec("long_share", ParamType::Float,
                                     "fraction of requests whose prompt is long_prompt tokens instead (long documents "
                                     "mixed with chats)",
                                     Value(0.0), 0.0, 1.0));
    out.add(&P::long_prompt,
            key_spec("long_prompt", ParamType::Int, "prompt tokens of a long request", Value(int64_t{1024}), 1.0));
    out.add(&P::system_prompt, key_spec("system_prompt", ParamType::Int, "tokens of one system prompt every request starts with",
                                        Value(int64_t{0}), 0.0));
    out.add(&P::max_seqs,
            key_spec("max_seqs", ParamType::Int, "requests running at once (vLLM's max_num_seqs); static: the batch size",
                     Value(int64_t{16}), 1.0, 4096.0));
    out.add(&P::token_budget,
            key_spec("token_budget", ParamType::Int, "tokens one forward pass runs at most (vLLM's max_num_batched_tokens)",
                     Value(int64_t{512}), 1.0));
    out.add(&P::long_prefill, key_spec("long_prefill", ParamType::Int,
                                       "chunked prefill: prompt tokens one request runs per step at most (vLLM's "
                                       "long_prefill_token_threshold), so short prompts share the step; 0: the token budget",
                                       Value(int64_t{0}), 0.0));
    out.add(&P::kv_tokens, key_spec("kv_tokens", ParamType::Int,
                                    "KV-cache positions over all running requests; a request reserves prompt + output "
                                    "tokens when admitted (0: no bound but max_seqs)",
                                    Value(int64_t{0}), 0.0));
    out.add(&P::kv_blocks, key_spec("kv_blocks", ParamType::Int,
                                    "paged KV: the engine's pool of blocks, taken as sequences grow (admission by free "
                                    "blocks, preemption by recompute when they run out); 0: contiguous caches, except "
                                    "cpu_prefix's pool sized for max_seqs of the load's longest requests",
                                    Value(int64_t{0}), 0.0));
    out.add(&P::block_size, key_spec("block_size", ParamType::Int, "paged KV: tokens per block (vLLM's default 16)",
                                     Value(int64_t{16}), 1.0, 1024.0));
    out.add(&P::temperature,
            key_spec("temperature", ParamType::Float, "0 = greedy; else sampling on the backend (validation always runs greedy)",
                     Value(0.0), 0.0));
    out.add(&P::slo_ttft, key_spec("slo_ttft", ParamType::Seconds, "goodput's TTFT bound (0: none)", Value(0.0), 0.0));
    out.add(&P::slo_tpot, key_spec("slo_tpot", ParamType::Seconds, "goodput's TPOT bound (0: none)", Value(0.0), 0.0));
    out.add(&P::workload_seed,
            key_spec("workload_seed", ParamType::Int,
                     "seed of the load's arrival times, lengths and tokens: every variant of a point serves the same load",
                     Value(int64_t{1}), 0.0));
    return out;
  }();
  return set;
}

WorkloadOptions workload_options(const ServeKeys& k) {
  WorkloadOptions o;
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

namespace {

KindInfo serve_kind() {
  KindInfo k;
  k.name = "serve-load";
  k.group = "serve";
  k.doc =
      "A server under load: requests arrive over time (Poisson or bursty at a QPS, prompt and output lengths fixed or "
      "drawn, long prompts mixed in, a shared system prompt), served in real time by an iteration-level scheduler over the "
      "engine: static batching (the baseline), continuous batching, continuous batching with chunked prefill, and that "
      "over a paged KV cache with prefix caching (a hit shares the cached blocks). Reported as vLLM's serving benchmark "
      "does: TTFT, TPOT, ITL, E2E percentiles, queueing delay, request and token throughput, goodput under SLOs. Each "
      "variant is first checked: a served greedy load's requests against each generated alone on the CPU engine, and "
      "every KV reservation returned.";
  k.keys = serve_keys().keys();
  for (auto& t : model::text_prompt_keys()) k.keys.push_back(std::move(t));
  k.check = [](const auto& values) -> std::optional<KeyProblem> {
    if (auto it = values.find("block_size"); it != values.end())
      for (const Value& v : it->second) {
        const int64_t bs = std::get<int64_t>(v);
        if ((bs & (bs - 1)) != 0)
          return KeyProblem{{"block_size"}, fmt::format("block_size {} is not a power of two (8, 16, 32, ...)", bs)};
      }
    if (auto problem = model::check_model_weights(values)) return problem;
    return model::check_text_prompts(values);
  };
  return k;
}

const KindRegistration registration(serve_kind());

const VariantRegistration reg_static("serve-load",
                                     {"static", Backend::Cuda,
                                      "static batching on the CUDA engine: a batch formed when the last ends, run to completion"},
                                     IB_IF_CUDA(make_variant<ServeLoad>(Backend::Cuda, Batching::Static, false, false)));
const VariantRegistration reg_continuous("serve-load",
                                         {"continuous", Backend::Cuda,
                                          "continuous batching on the CUDA engine, whole prompts (no chunking)"},
                                         IB_IF_CUDA(make_variant<ServeLoad>(Backend::Cuda, Batching::Continuous, false, false)));
const VariantRegistration reg_chunked("serve-load",
                                      {"chunked", Backend::Cuda,
                                       "continuous batching on the CUDA engine with chunked prefill mixed into decode steps"},
                                      IB_IF_CUDA(make_variant<ServeLoad>(Backend::Cuda, Batching::Continuous, true, false)));
const VariantRegistration reg_cpu_static("serve-load",
                                         {"cpu_static", Backend::Cpu,
                                          "static batching on the CPU engine: a batch formed when the last ends, run to "
                                          "completion (the baseline)"},
                                         make_variant<ServeLoad>(Backend::Cpu, Batching::Static, false, false));
const VariantRegistration reg_cpu_continuous("serve-load",
                                             {"cpu_continuous", Backend::Cpu,
                                              "continuous batching on the CPU engine: requests join and leave at every step; "
                                              "whole prompts"},
                                             make_variant<ServeLoad>(Backend::Cpu, Batching::Continuous, false, false));
const VariantRegistration reg_cpu_chunked("serve-load",
                                          {"cpu_chunked", Backend::Cpu,
                                           "continuous batching on the CPU engine with chunked prefill: prompt chunks mixed "
                                           "into the decode steps (Sarathi-Serve)"},
                                          make_variant<ServeLoad>(Backend::Cpu, Batching::Continuous, true, false));
const VariantRegistration reg_cpu_prefix("serve-load",
                                         {"cpu_prefix", Backend::Cpu,
                                          "continuous batching with chunked prefill on the CPU engine's paged KV cache, with "
                                          "prefix caching: a request whose prompt starts with a finished one's shares its "
                                          "blocks (vLLM's --enable-prefix-caching)"},
                                         make_variant<ServeLoad>(Backend::Cpu, Batching::Continuous, true, true));

}  // namespace
}  // namespace ib::serve
