// What the `prefix` kinds (§8.4; prefix-system-prompt, prefix-mixed, prefix-cost: a file each) share:
// workload keys and options, cache options, and the variants none / block_hash (vLLM's automatic
// prefix caching) / radix (SGLang's RadixAttention) on the engine of the backend (CPU: cpu_*).
#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/registry.h"
#include "core/stats.h"
#include "core/units.h"
#include "kinds/params/engine_params.h"
#include "kinds/prefix/prefix_kinds.h"
#include "prefix/prefix_server.h"
#include "workload/prefix_traces.h"

namespace ib::prefix {
namespace {

const char* kind_label(CacheKind k) {
  switch (k) {
    case CacheKind::None:
      return "every request fully prefilled (the baseline)";
    case CacheKind::BlockHash:
      return "vLLM-style automatic prefix caching: chained 128-bit block hashes, ref counts, LRU free queue";
    case CacheKind::Radix:
      return "SGLang-style RadixAttention: radix tree, token-granular matches, LRU leaf eviction";
  }
  return "";
}

}  // namespace

namespace detail {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median_of(const std::vector<double>& v) { return v.empty() ? 0.0 : summarize(v).median; }

// ---- keys ----

const ParamSet<EngineKeys>& engine_params() {
  static const ParamSet<EngineKeys> set = [] {
    std::vector<std::string> models = model::preset_names();
    models.push_back("checkpoint");
    return ParamSet<EngineKeys>()
        .add(&EngineKeys::model,
             enum_key("model", "engine preset (random weights unless `weights`), or checkpoint (weights: DIR)", "tiny", models))
        .add(&EngineKeys::weights, key_spec("weights", ParamType::String,
                                            "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
                                            Value(std::string("random"))))
        .add(&EngineKeys::matmul, model::matmul_key(), model::parse_matmul);
  }();
  return set;
}

const ParamSet<SystemPromptShape>& system_prompt_params(bool for_cost) {
  auto make = [](bool cost) {
    using S = SystemPromptShape;
    return ParamSet<S>()
        .add(&S::system_prompt,
             key_spec("system_prompt", ParamType::Int,
                      cost ? "shared system prompt tokens (workload system-prompt)" : "shared system prompt tokens",
                      Value(int64_t{2000}), 0.0))
        .add(&S::query_min,
             key_spec("query_min", ParamType::Int, "fewest tokens of a request's own query", Value(int64_t{7}), 1.0))
        .add(&S::query_max,
             key_spec("query_max", ParamType::Int, "most tokens of a request's own query", Value(int64_t{10}), 1.0));
  };
  static const ParamSet<SystemPromptShape> cost = make(true), engine = make(false);
  return for_cost ? cost : engine;
}

const ParamSet<workload::MixedOptions>& mixed_params() {
  using M = workload::MixedOptions;
  static const ParamSet<workload::MixedOptions> set =
      ParamSet<M>()
          .add(&M::requests, key_spec("requests", ParamType::Int, "requests in the trace", Value(int64_t{200}), 1.0))
          .add(&M::tenants, key_spec("tenants", ParamType::Int, "tenants, each with its own system prompt and few-shot examples",
                                     Value(int64_t{4}), 1.0, 1000.0))
          .add(&M::system_prompt,
               key_spec("mean_system_prompt", ParamType::Int,
                        "mean system prompt tokens (tenant t's: 0.5 … 1.5 × this, spread evenly)", Value(int64_t{1000}), 1.0))
          .add(&M::user_tokens, key_spec("user_tokens", ParamType::Int,
                                         "mean tokens of a user message or question (0.5 … 1.5 × this)", Value(int64_t{40}), 1.0))
          .add(&M::reply_tokens, key_spec("reply_tokens", ParamType::Int,
                                          "mean tokens of an assistant reply carried into the next chat turn (not decoded)",
                                          Value(int64_t{120}), 1.0))
          .add(&M::max_turns, key_spec("max_turns", ParamType::Int, "turns of a chat", Value(int64_t{6}), 1.0))
          .add(&M::fewshot_tokens, key_spec("fewshot_tokens", ParamType::Int,
                                            "a tenant's few-shot examples (after its system prompt)", Value(int64_t{600}), 0.0))
          .add(&M::chat_share,
               key_spec("chat_share", ParamType::Float, "fraction of requests that are chat turns", Value(0.5), 0.0, 1.0))
          .add(&M::fewshot_share, key_spec("fewshot_share", ParamType::Float,
                                           "fraction of requests that are few-shot prompts (the rest: system prompt + question)",
                                           Value(0.25), 0.0, 1.0));
  return set;
}

const ParamSet<CacheKeys>& cache_params(bool system_prompt_default) {
  auto make = [](const char* zero) {
    return ParamSet<CacheKeys>()
        .add(&CacheKeys::block_size,
             key_spec("block_size", ParamType::Int, "tokens per cached block (block_hash; vLLM's default 16)", Value(int64_t{16}),
                      1.0, 1024.0))
        .add(&CacheKeys::capacity,
             key_spec("capacity", ParamType::Int, std::string("cache capacity in tokens (block_hash: whole blocks); 0 = ") + zero,
                      Value(int64_t{0}), 0.0));
  };
  static const ParamSet<CacheKeys> system_prompt = make("the system prompt + 128"), unbounded = make("unbounded");
  return system_prompt_default ? system_prompt : unbounded;
}

// Spec-time checks across the workload keys a kind has: every query_min at most every query_max;
// chat_share + fewshot_share at most 1 wherever a mixed workload reads them.
std::optional<KeyProblem> check_workload_keys(const SpecKeyValues& values, bool mixed) {
  const SpecValues<SystemPromptShape> shape(system_prompt_params(false), values);
  const auto lows = shape.field(&SystemPromptShape::query_min), highs = shape.field(&SystemPromptShape::query_max);
  for (const int64_t lo : lows.values)
    for (const int64_t hi : highs.values)
      if (lo > hi) return KeyProblem{{highs.key, lows.key}, fmt::format("{} {} is below {} {}", highs.key, hi, lows.key, lo)};
  if (!mixed) return std::nullopt;
  const SpecValues<workload::MixedOptions> shares(mixed_params(), values);
  const auto chats = shares.field(&workload::MixedOptions::chat_share),
             fewshots = shares.field(&workload::MixedOptions::fewshot_share);
  for (const double chat : chats.values)
    for (const double fewshot : fewshots.values)
      if (chat + fewshot > 1.0 + 1e-9)
        return KeyProblem{
            {fewshots.key, chats.key},
            fmt::format("{} {} + {} {} exceeds 1", chats.key, format_number(chat), fewshots.key, format_number(fewshot))};
  return std::nullopt;
}

void check_shares(const workload::MixedOptions& o) {
  if (o.chat_share + o.fewshot_share > 1.0 + 1e-9) throw InputError("chat_share + fewshot_share must not exceed 1");
}

ServerOptions server_options(const CacheKeys& keys, CacheKind kind, int64_t default_capacity) {
  ServerOptions o;
  o.kind = kind;
  o.block_size = static_cast<int>(keys.block_size);
  o.capacity_tokens = keys.capacity > 0 ? keys.capacity : default_capacity;
  return o;
}

// ---- kinds ----

std::vector<std::string> all_but(const std::vector<KeySpec>& keys, const std::vector<std::string>& drop) {
  std::vector<std::string> v;
  for (const auto& k : keys)
    if (std::find(drop.begin(), drop.end(), k.name) == drop.end()) v.push_back(k.name);
  return v;
}

std::vector<DeclaredVariant> engine_variants(const std::vector<KeySpec>& keys, const std::vector<std::string>& cache_only,
                                             const std::function<VariantFactory(Backend, CacheKind)>& make) {
  // none reads no cache key, radix no block_size; the CPU variants leave out `matmul` as well (the
  // CPU engine has one matmul: a sweep over the key would repeat their rows).
  auto reads = [&](std::vector<std::string> drop, Backend b) {
    if (b == Backend::Cpu) drop.push_back("matmul");
    return all_but(keys, drop);
  };
#if INFER_BENCH_HAVE_CUDA
  auto cuda = [&](CacheKind c) { return make(Backend::Cuda, c); };
#else
  auto cuda = [](CacheKind) { return VariantFactory{}; };
#endif
  return {
      {{"none", Backend::Cuda, kind_label(CacheKind::None), reads(cache_only, Backend::Cuda)}, cuda(CacheKind::None)},
      {{"block_hash", Backend::Cuda, kind_label(CacheKind::BlockHash), reads({}, Backend::Cuda)}, cuda(CacheKind::BlockHash)},
      {{"radix", Backend::Cuda, kind_label(CacheKind::Radix), reads({"block_size"}, Backend::Cuda)}, cuda(CacheKind::Radix)},
      {{"cpu_none", Backend::Cpu, std::string(kind_label(CacheKind::None)) + "; on the CPU engine",
        reads(cache_only, Backend::Cpu)},
       make(Backend::Cpu, CacheKind::None)},
      {{"cpu_block_hash", Backend::Cpu, std::string(kind_label(CacheKind::BlockHash)) + "; on the CPU engine",
        reads({}, Backend::Cpu)},
       make(Backend::Cpu, CacheKind::BlockHash)},
      {{"cpu_radix", Backend::Cpu, std::string(kind_label(CacheKind::Radix)) + "; on the CPU engine",
        reads({"block_size"}, Backend::Cpu)},
       make(Backend::Cpu, CacheKind::Radix)},
  };
}

}  // namespace detail
}  // namespace ib::prefix
