#include "kinds/kvcache/evict_keys.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "kinds/kvcache/engine_decode_keys.h"
#include "model/model.h"

namespace ib::kvcache {
namespace {

const ParamSet<PolicyKeys>& policy_params() {
  using K = PolicyKeys;
  static const ParamSet<PolicyKeys> set =
      ParamSet<PolicyKeys>()
          .add(&K::budget,
               key_spec("budget", ParamType::Float,
                        "KV budget: a fraction (≤ 1) of the context, or tokens (> 1, a whole number); full ignores it",
                        Value(0.2), 0.001))
          .add(&K::sinks, key_spec("sinks", ParamType::Int, "streaming_llm: first tokens always kept (attention sinks)",
                                   Value(int64_t{4}), 0.0))
          .add(&K::recent,
               key_spec("recent", ParamType::Float,
                        "h2o: share of the budget kept as the recent window (the rest: heavy hitters)", Value(0.5), 0.0, 1.0));
  return set;
}

// The generator's keys but the context (the kind's own first key), defaults from SyntheticParams.
const ParamSet<SyntheticParams>& generator_params() {
  using S = SyntheticParams;
  const S d;
  static const ParamSet<SyntheticParams> set =
      ParamSet<SyntheticParams>()
          .add(&S::head_dim, key_spec("head_dim", ParamType::Int, "dimension of the head (a multiple of 4)",
                                      Value(int64_t{d.head_dim}), 8.0, 1024.0))
          .add(&S::sink_tokens,
               key_spec("sink_tokens", ParamType::Int, "generator: sink tokens at the start", Value(int64_t{d.sink_tokens}), 0.0))
          .add(&S::sink_logit,
               key_spec("sink_logit", ParamType::Float, "generator: logit bonus of a sink token", Value(d.sink_logit)))
          .add(&S::sink_value, key_spec("sink_value", ParamType::Float,
                                        "generator: sink tokens' value norm relative to the others", Value(d.sink_value), 0.0))
          .add(&S::heavy_tokens,
               key_spec("heavy_tokens", ParamType::Int, "generator: heavy-hitter tokens, seeded positions over the context",
                        Value(int64_t{d.heavy_tokens}), 0.0))
          .add(&S::heavy_logit,
               key_spec("heavy_logit", ParamType::Float,
                        "generator: heavy hitters' logit bonus (× a per-query pull in [0.5, 1.5])", Value(d.heavy_logit)))
          .add(&S::recency_logit,
               key_spec("recency_logit", ParamType::Float, "generator: logit bonus at distance 0, decaying as RoPE's mean cosine",
                        Value(d.recency_logit)))
          .add(&S::recency_theta,
               key_spec("recency_theta", ParamType::Float, "generator: base of the rotary frequencies (RoPE's theta)",
                        Value(d.recency_theta), 2.0))
          .add(&S::noise,
               key_spec("noise", ParamType::Float, "generator: std of the diffuse, per-query logits", Value(d.noise), 0.0))
          .add(&S::needle_logit,
               key_spec("needle_logit", ParamType::Float, "probe queries' logit bonus on their needle", Value(d.needle_logit)))
          .add(&S::probe_every, key_spec("probe_every", ParamType::Int, "a needle probe every this many measured steps",
                                         Value(int64_t{d.probe_every}), 1.0));
  return set;
}

}  // namespace

SyntheticParams EvictKeys::synthetic() const {
  SyntheticParams s = generator;
  s.context = static_cast<int>(context);
  return s;
}

const ParamSet<EvictKeys>& evict_keys() {
  using K = EvictKeys;
  static const ParamSet<EvictKeys> set =
      ParamSet<EvictKeys>()
          .add(&K::context, key_spec("context", ParamType::Int, "tokens decoded", Value(int64_t{4096}), 2.0))
          .add(&K::decode_steps,
               key_spec("decode_steps", ParamType::Int,
                        "measured steps at the end of the context (the earlier tokens stream through the policy first)",
                        Value(int64_t{256}), 1.0))
          .add_group(&K::policy, policy_params())
          .add_group(&K::generator, generator_params())
          .add(&K::kv_model, enum_key("kv_model", "model whose K/V bytes per token (all layers, bf16) price the held tokens",
                                      "llama2-7b", model::preset_names()));
  return set;
}

const ParamSet<EvictModelKeys>& evict_model_keys() {
  static const ParamSet<EvictModelKeys> set = ParamSet<EvictModelKeys>()
                                                  .add_group(&EvictModelKeys::engine, engine_decode_params(448, 64))
                                                  .add_group(&EvictModelKeys::policy, policy_params());
  return set;
}

int budget_tokens(double budget, int context) {
  if (budget <= 1.0) return std::max(1, static_cast<int>(std::lround(budget * context)));
  if (budget != std::floor(budget))
    throw InputError(fmt::format("budget {}: above 1 it counts tokens and must be a whole number", budget));
  return static_cast<int>(budget);
}

PolicyOptions policy_options(const PolicyKeys& k, int context) {
  PolicyOptions o;
  o.budget = budget_tokens(k.budget, context);
  o.sinks = static_cast<int>(k.sinks);
  o.recent = k.recent;
  return o;
}

std::string policy_unsupported(const std::string& policy, const PolicyKeys& k, int context) {
  if (policy == "full") return {};
  const int b = budget_tokens(k.budget, context);
  if (policy == "streaming_llm" && b <= k.sinks)
    return fmt::format("a {}-token budget leaves no recent window after {} sinks", b, k.sinks);
  return {};
}

std::vector<std::string> policy_variant_keys(const std::vector<KeySpec>& keys, const std::string& policy) {
  std::vector<std::string> drop;
  if (policy == "full") drop = {"budget", "sinks", "recent"};
  if (policy == "sliding_window") drop = {"sinks", "recent"};
  if (policy == "streaming_llm") drop = {"recent"};
  if (policy == "h2o") drop = {"sinks"};
  std::vector<std::string> v;
  for (const auto& k : keys)
    if (std::find(drop.begin(), drop.end(), k.name) == drop.end()) v.push_back(k.name);
  return v;
}

const char* policy_doc(const std::string& policy) {
  if (policy == "full") return "the full cache: every token kept (the baseline; memory grows with the context)";
  if (policy == "sliding_window") return "the last `budget` tokens, no sinks (the plain window the chapter warns about)";
  if (policy == "streaming_llm") return "StreamingLLM: the first `sinks` tokens + the last budget − sinks";
  return "H2O: the last recent × budget tokens + the older tokens with the most accumulated attention; a new token evicts the "
         "older token with the least";
}

}  // namespace ib::kvcache
