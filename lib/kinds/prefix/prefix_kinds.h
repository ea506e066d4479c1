// What the three prefix kinds share, declared for their files (system_prompt_kind.cpp, mixed_kind.cpp,
// cost_kind.cpp; the caches and the server they measure are lib/prefix's): the workload keys and options, the engine the two
// engine kinds build, the cache options and the variant lists. Defined once, in prefix_kinds.cpp (Engine here).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/backend.h"
#include "core/errors.h"
#include "core/params.h"
#include "core/registry.h"
#include "core/sweep.h"
#include "core/value.h"
#include "kinds/params/engine_params.h"
#include "model/model_choice.h"
#include "prefix/prefix_server.h"
#include "workload/prefix_traces.h"

namespace ib::prefix::detail {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0);

double median_of(const std::vector<double>& v);

constexpr int64_t kUnbounded = int64_t{1} << 40;

// ---- keys: typed groups (core/params.h) each kind composes ----

// model, weights, matmul: the engine the two engine kinds build.
struct EngineKeys {
  std::string model, weights;
  model::Matmul matmul = model::Matmul::Cublas;
};
const ParamSet<EngineKeys>& engine_params();
// system_prompt, query_min, query_max: the agent case's requests.
struct SystemPromptShape {
  int64_t system_prompt = 0, query_min = 0, query_max = 0;
};
const ParamSet<SystemPromptShape>& system_prompt_params(bool for_cost);
// requests … fewshot_share into the mixed workload's own options (qps and max_prompt are not keys here).
const ParamSet<workload::MixedOptions>& mixed_params();
// block_size, capacity (0: `zero_capacity` says what it means).
struct CacheKeys {
  int64_t block_size = 16, capacity = 0;
};
const ParamSet<CacheKeys>& cache_params(bool system_prompt_default);
// Spec-time checks across the workload keys a kind has: every query_min at most every query_max;
// chat_share + fewshot_share at most 1 where the kind runs a mixed workload (`mixed`).
std::optional<KeyProblem> check_workload_keys(const SpecKeyValues& values, bool mixed);
// The same check where a run reads the keys (a spec's axes are checked by check_workload_keys).
void check_shares(const workload::MixedOptions& o);

// ---- the engine side shared by system-prompt and mixed ----

struct Engine {
  model::ModelConfig config;
  std::unique_ptr<model::Model> model;
  double kv_bytes_per_token = 0;

  void build(const EngineKeys& keys, Backend backend, BackendRuntime& rt, uint64_t seed, int max_prompt) {
    model::ModelChoice m = model::choose_model(keys.model, keys.weights, seed);
    config = m.config;
    if (max_prompt > config.max_positions)
      throw InputError(fmt::format("a {}-token prompt exceeds {}'s {} positions", max_prompt, config.name, config.max_positions));
    if (backend == Backend::Cuda) {
      model::EngineOptions o;
      o.matmul = keys.matmul;
      o.max_batch = 1;
      o.max_prefill = std::min(std::max(max_prompt, 16), 8192);
      model = model::make_cuda_model(config, *m.weights, o, rt.stream());
    } else {
      model = model::make_cpu_model(config, *m.weights);
    }
    kv_bytes_per_token = static_cast<double>(config.kv_elems_per_token()) * (backend == Backend::Cuda ? 2.0 : 4.0);
  }
  std::vector<float> full_prefill_logits(const std::vector<int32_t>& t) {
    std::vector<float> l(static_cast<size_t>(config.vocab));
    const int s = model->new_sequence(static_cast<int>(t.size()));
    model::StepOutput out;
    out.logits = l.data();
    model->prefill(s, t.data(), static_cast<int>(t.size()), 1, out);
    model->release(s);
    return l;
  }
};

ServerOptions server_options(const CacheKeys& keys, CacheKind kind, int64_t default_capacity);

// ---- kinds ----

// The names of `keys` but those in `drop` (a variant's VariantDecl::uses).
std::vector<std::string> all_but(const std::vector<KeySpec>& keys, const std::vector<std::string>& drop);
// The six variants of an engine kind (none, block_hash, radix, and their cpu_ twins), each made by
// `make` (the CUDA ones only where the CUDA engine is built); `cache_only`: the keys only the
// caching variants read.
std::vector<DeclaredVariant> engine_variants(const std::vector<KeySpec>& keys, const std::vector<std::string>& cache_only,
                                             const std::function<VariantFactory(Backend, CacheKind)>& make);

}  // namespace ib::prefix::detail
