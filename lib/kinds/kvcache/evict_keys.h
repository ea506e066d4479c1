// The keys of the eviction kinds (kv-evict, kv-evict-model), declared once as typed parameter sets
// (core/params.h): the policy's group (budget, sinks, recent) both kinds share, the synthetic
// head's generator, and the engine's decode (engine_decode_keys.h); and what a policy makes of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/params.h"
#include "kvcache/engine_compare.h"
#include "kvcache/eviction.h"
#include "kvcache/synthetic_attention.h"

namespace ib::kvcache {

struct PolicyKeys {
  double budget = 0.2;  // a fraction (<= 1) of the context, or tokens (> 1)
  int64_t sinks = 4;
  double recent = 0.5;
};

struct EvictKeys {
  int64_t context = 0, decode_steps = 0;
  PolicyKeys policy;
  SyntheticParams generator;  // its context is `context` (synthetic())
  std::string kv_model;       // the preset whose K/V bytes price the held tokens

  SyntheticParams synthetic() const;
};
const ParamSet<EvictKeys>& evict_keys();

struct EvictModelKeys {
  EngineDecodeOptions engine;
  PolicyKeys policy;
};
const ParamSet<EvictModelKeys>& evict_model_keys();

// Budget in tokens of a `context`-token decode (an InputError for a fractional count above 1).
int budget_tokens(double budget, int context);
// The policy's options for a `context`-token decode.
PolicyOptions policy_options(const PolicyKeys& k, int context);
// Why a policy cannot run a `context`-token decode ("" when it can; full reads none of the keys).
std::string policy_unsupported(const std::string& policy, const PolicyKeys& k, int context);
// The keys a policy's variant reads of its kind's: full none of the policy's, the windows not
// H2O's share, ...
std::vector<std::string> policy_variant_keys(const std::vector<KeySpec>& keys, const std::string& policy);
// The policy's line in the variant tables.
const char* policy_doc(const std::string& policy);

}  // namespace ib::kvcache
