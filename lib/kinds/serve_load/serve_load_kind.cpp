// Kind `serve-load` (the chapter's metrics section under load): a workload of requests arriving
// over time, served by the scheduler over the engine three ways, measured as vLLM's serving
// benchmark measures a server (serve/load_metrics.h).
#include <fmt/format.h>

#include "core/registry.h"
#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"
#include "kinds/serve_load/serve_keys.h"
#include "kinds/serve_load/serve_load.h"
#include "model/model_choice.h"
#include "model/text_prompt.h"

namespace ib::serve {

const ParamSet<ServeKeys>& serve_keys() {
  using P = ServeKeys;
  // One statement per key: as one chained expression GCC 12 reports a false -Wmaybe-uninitialized
  // in std::variant's destructor (libstdc++), inlined from one of the Value temporaries.
  static const ParamSet<ServeKeys> set = [] {
    ParamSet<ServeKeys> out;
    out.add(&P::model, model::model_key("tiny"));
    out.add(&P::weights, model::weights_key());
    add_workload_keys(out);
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
                                    "blocks, preemption when they run out); 0: contiguous caches, except "
                                    "cpu_prefix's pool sized for max_seqs of the load's longest requests",
                                    Value(int64_t{0}), 0.0));
    out.add(&P::block_size, key_spec("block_size", ParamType::Int, "paged KV: tokens per block (vLLM's default 16)",
                                     Value(int64_t{16}), 1.0, 1024.0));
    out.add(&P::preemption, enum_key("preemption",
                                     "paged KV: a preempted request's K/V dropped and prefilled again when it is readmitted "
                                     "(recompute, vLLM's default) or copied to host memory and back (swap)",
                                     "recompute", {"recompute", "swap"}));
    out.add(&P::spec_tokens,
            key_spec("spec_tokens", ParamType::Int,
                     "speculative decoding by prompt lookup (serve --speculative-config's num_speculative_tokens): tokens a "
                     "decoding request drafts from its own context per step, verified in the batch (0: off)",
                     Value(int64_t{0}), 0.0, 64.0));
    out.add(&P::temperature,
            key_spec("temperature", ParamType::Float, "0 = greedy; else sampling on the backend (validation always runs greedy)",
                     Value(0.0), 0.0));
    add_goodput_and_seed_keys(out);
    out.add_group(&P::prompts, kinds::text_prompt_params());
    return out;
  }();
  return set;
}

namespace {

KindInfo serve_kind() {
  KindInfo k;
  k.name = "serve-load";
  k.smallest = "requests: 6\nqps: 1000\nprompt_len: 16\noutput_len: 8\nmax_seqs: 4\ntoken_budget: 64\n";
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
  k.check = [](const auto& values) -> std::optional<KeyProblem> {
    const SpecValues<ServeKeys> v(serve_keys(), values);
    const auto block_sizes = v.field(&ServeKeys::block_size);
    for (const int64_t bs : block_sizes.values)
      if ((bs & (bs - 1)) != 0)
        return KeyProblem{{block_sizes.key}, fmt::format("{} {} is not a power of two (8, 16, 32, ...)", block_sizes.key, bs)};
    const auto model = v.field(&ServeKeys::model), weights = v.field(&ServeKeys::weights);
    if (auto problem = model::check_model_weights(model, weights)) return problem;
    return model::check_text_prompts(values, v.field([](const ServeKeys& x) -> const auto& { return x.prompts.tokenizer; }),
                                     weights, model);
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
