// The `prefix-mixed` kind (§8.4): a server's mixed load replayed in arrival order, hit rate, TTFT
// p50/p99, memory held and evictions over a capacity sweep; its own file, as each prefix kind (the
// shared keys, engine and variant list: prefix_kinds.h).
#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "core/registry.h"
#include "core/stats.h"
#include "kinds/params/engine_params.h"
#include "kinds/prefix/prefix_kinds.h"
#include "model/model_choice.h"
#include "prefix/prefix_server.h"
#include "workload/prefix_traces.h"

namespace ib::prefix {
namespace {

using detail::check_workload_keys;
using detail::Clock;
using detail::Engine;
using detail::engine_variants;
using detail::kUnbounded;
using detail::median_of;
using detail::ms_since;
using detail::server_options;

// The kind's keys: the engine, the arrival rate, the mixed workload and the cache.
struct MixedKindKeys {
  detail::EngineKeys engine;
  double qps = 0;
  workload::MixedOptions mixed;
  detail::CacheKeys cache;
};

const ParamSet<MixedKindKeys>& mixed_kind_keys() {
  using K = MixedKindKeys;
  static const ParamSet<MixedKindKeys> set =
      ParamSet<K>()
          .add_group(&K::engine, detail::engine_params())
          .add(&K::qps, key_spec("qps", ParamType::Float, "Poisson arrival rate (requests per second)", Value(10.0), 0.0))
          .add_group(&K::mixed, detail::mixed_params())
          .add_group(&K::cache, detail::cache_params(false));
  return set;
}

// ---- prefix-mixed ----

double percentile_of(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, q);
}

class MixedVariant : public Variant {
 public:
  MixedVariant(Backend b, CacheKind k) : backend_(b), kind_(k) {}

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const MixedKindKeys keys = mixed_kind_keys().read(p);
    workload::MixedOptions o = keys.mixed;
    detail::check_shares(o);
    o.qps = keys.qps;
    const model::ModelConfig* c = nullptr;
    std::optional<model::ModelConfig> pc = model::preset(keys.engine.model);
    if (pc) c = &*pc;
    o.max_prompt = c ? c->max_positions : 0;
    trace_ = workload::mixed_workload(o, c ? c->vocab : 32000, seed);
    int longest = 1;
    for (const auto& r : trace_) longest = std::max(longest, static_cast<int>(r.prompt.size()));
    engine_.build(keys.engine, backend_, rt, seed, longest);
    server_ = std::make_unique<PrefixServer>(*engine_.model, server_options(keys.cache, kind_, kUnbounded));
  }

  Validation validate(BackendRuntime& rt) override {
    const double tol = backend_ == Backend::Cpu ? 1e-4 : 1e-2;
    // One replay from an empty cache: the invariants after every request, and up to 8 cache
    // hits spread over the trace against full prefills. The baseline replays 4 requests.
    const size_t n = kind_ == CacheKind::None ? std::min<size_t>(4, trace_.size()) : trace_.size();
    double worst = 0;
    int compared = 0, hits = 0;
    size_t next_check = 0;
    std::vector<float> l(static_cast<size_t>(engine_.config.vocab));
    int32_t tok = 0;
    for (size_t i = 0; i < n; ++i) {
      const workload::Request& r = trace_[i];
      Served s = server_->serve(r.prompt.data(), static_cast<int>(r.prompt.size()), workload::cache_salt(r), {l.data(), &tok});
      const int hit = s.hit;
      server_->finish(s);
      hits += hit > 0;
      if (std::string e = server_->check(); !e.empty()) {
        server_->clear();
        return {false, "invariants", 1, 0, fmt::format("after request {}: {}", i, e)};
      }
      if ((hit > 0 || kind_ == CacheKind::None) && i >= next_check && compared < 8) {
        rt.synchronize();
        worst = std::max(worst, relative_l2(l, engine_.full_prefill_logits(r.prompt)));
        ++compared;
        next_check = i + std::max<size_t>(1, n / 8);
      }
    }
    server_->clear();
    if (kind_ != CacheKind::None && compared == 0) return {false, "hits", 0, 1, "no request of the trace hit the cache"};
    return {worst <= tol, "rel_l2", worst, tol,
            fmt::format("{} requests replayed ({} hits), {} hits vs full prefills; invariants after every request", n, hits,
                        compared)};
  }

  void run(BackendRuntime&) override {
    double free_at = 0, busy = 0;
    int64_t held_peak = 0, cached_peak = 0, hit = 0, prompt = 0;
    std::vector<double> ttft, book;
    int32_t tok = 0;
    for (const workload::Request& r : trace_) {
      const auto t0 = Clock::now();
      Served s = server_->serve(r.prompt.data(), static_cast<int>(r.prompt.size()), workload::cache_salt(r), {nullptr, &tok});
      held_peak = std::max(held_peak, server_->held_bytes());
      server_->finish(s);
      const double service = ms_since(t0) / 1e3;
      // One server, arrival order: a request waits for the previous one, then is served.
      const double start = std::max(r.arrival, free_at);
      free_at = start + service;
      busy += service;
      ttft.push_back((free_at - r.arrival) * 1e3);
      book.push_back(s.bookkeeping_us());
      hit += s.hit;
      prompt += s.prompt;
      cached_peak = std::max(cached_peak, server_->cached_tokens());
    }
    evicted_.push_back(static_cast<double>(server_->evicted_tokens()));
    server_->clear();
    p50_.push_back(percentile_of(ttft, 0.5));
    p99_.push_back(percentile_of(ttft, 0.99));
    held_.push_back(static_cast<double>(held_peak));
    cached_.push_back(static_cast<double>(cached_peak));
    load_.push_back(trace_.empty() ? 0 : busy / trace_.back().arrival);
    bookkeeping_.push_back(median_of(book));
    hit_rate_ = prompt > 0 ? 100.0 * static_cast<double>(hit) / static_cast<double>(prompt) : 0;
  }

  std::vector<Metric> metrics() const override {
    std::vector<Metric> m = {{"hit rate", hit_rate_, "%"},
                             {"TTFT p50", median_of(p50_), "ms"},
                             {"TTFT p99", median_of(p99_), "ms"},
                             {"server load", median_of(load_), "busy s/s"}};
    if (kind_ != CacheKind::None) {
      m.push_back({"held peak", median_of(held_) / (1 << 20), "MiB"});
      m.push_back({"cached peak", median_of(cached_) * engine_.kv_bytes_per_token / (1 << 20), "MiB"});
      m.push_back({"evicted", median_of(evicted_), "tok/replay"});
      m.push_back({"bookkeeping", median_of(bookkeeping_), "µs/req"});
    }
    return m;
  }

 private:
  Backend backend_;
  CacheKind kind_;
  Engine engine_;
  std::vector<workload::Request> trace_;
  std::unique_ptr<PrefixServer> server_;
  double hit_rate_ = 0;
  std::vector<double> p50_, p99_, held_, cached_, load_, evicted_, bookkeeping_;
};

KindInfo mixed_kind() {
  KindInfo k;
  k.name = "prefix-mixed";
  k.smallest =
      "requests: 6\nqps: 1000\nmean_system_prompt: 32\nuser_tokens: 8\nreply_tokens: 4\nfewshot_tokens: 16\nmax_turns: 2\n";
  k.group = "prefix";
  k.doc =
      "A server's mixed load: several tenants' system prompts, multi-turn chats whose prompt grows each turn, few-shot "
      "prompts, Poisson arrivals at `qps`, served one at a time in arrival order from an empty cache. A sample is one "
      "replay of the whole trace (every request's real service time back to back); TTFT = queueing on a simulated clock "
      "advanced by the measured service times + service. `held` = the engine K/V allocations the cache keeps alive "
      "(holder sequences), `cached` = cached tokens × K/V bytes per token (what a paged cache would hold). The gate: one "
      "replay with the invariants checked after every request and up to 8 hits' logits against full prefills.";
  k.keys = mixed_kind_keys().keys();
  k.check = [](const SpecKeyValues& values) {
    if (auto problem = check_workload_keys(values, /*mixed=*/true)) return problem;
    const SpecValues<MixedKindKeys> v(mixed_kind_keys(), values);
    return model::check_model_weights(v.field([](const MixedKindKeys& x) -> const auto& { return x.engine.model; }),
                                      v.field([](const MixedKindKeys& x) -> const auto& { return x.engine.weights; }));
  };
  return k;
}

const KindRegistration mixed_registration(mixed_kind());

// The CPU engine's, and the CUDA engine's where it is built (make_cuda_model; Model::copy_cache on the device).
const VariantListRegistration mixed_variants("prefix-mixed", engine_variants(mixed_kind().keys, {"block_size", "capacity"},
                                                                             [](Backend b, CacheKind c) {
                                                                               return make_variant<MixedVariant>(b, c);
                                                                             }));

}  // namespace
}  // namespace ib::prefix
