// The `prefix-cost` kind (§8.4): API prompt-caching prices applied to the cache hits of the same
// workloads; host arithmetic over the caches' bookkeeping (no engine), so its variants are host
// variants. Its own file, as each prefix kind (what they share: prefix_kinds.h).
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/registry.h"
#include "kinds/prefix/prefix_kinds.h"
#include "prefix/prefix_server.h"
#include "workload/prefix_traces.h"

namespace ib::prefix {
namespace {

using detail::all_but;
using detail::check_workload_keys;
using detail::kUnbounded;
using detail::server_options;

enum class CostWorkload { SystemPrompt, Mixed };

// The kind's keys: which trace, both traces' shapes, the cache, and the providers' prices.
struct CostKeys {
  CostWorkload workload = CostWorkload::SystemPrompt;
  detail::SystemPromptShape shape;
  workload::MixedOptions mixed;
  detail::CacheKeys cache;
  double input_price = 0, anthropic_read = 0, anthropic_write = 0, openai_read = 0;
  int64_t anthropic_min = 0, openai_min = 0, openai_step = 1;
};

const ParamSet<CostKeys>& cost_keys() {
  using K = CostKeys;
  static const ParamSet<CostKeys> set =
      ParamSet<K>()
          .add(
              &K::workload,
              enum_key("workload", "which trace: system-prompt (one shared prompt + a query) or mixed (tenants, chats, few-shot)",
                       "system-prompt", {"system-prompt", "mixed"}),
              [](const std::string& w) { return w == "mixed" ? CostWorkload::Mixed : CostWorkload::SystemPrompt; })
          .add_group(&K::shape, detail::system_prompt_params(true))
          .add_group(&K::mixed, detail::mixed_params())
          .add_group(&K::cache, detail::cache_params(false))
          .add(&K::input_price, key_spec("input_price", ParamType::Float,
                                         "USD per million input tokens (an input, not a measurement)", Value(3.0), 0.0))
          .add(&K::anthropic_read,
               key_spec("anthropic_read", ParamType::Float, "cache read price / input price", Value(0.1), 0.0))
          .add(&K::anthropic_write,
               key_spec("anthropic_write", ParamType::Float, "cache write price / input price", Value(1.25), 0.0))
          .add(&K::anthropic_min,
               key_spec("anthropic_min", ParamType::Int, "shortest cacheable prompt (tokens)", Value(int64_t{1024}), 0.0))
          .add(&K::openai_read, key_spec("openai_read", ParamType::Float, "cached input price / input price", Value(0.5), 0.0))
          .add(&K::openai_min,
               key_spec("openai_min", ParamType::Int, "caching starts at this many prompt tokens", Value(int64_t{1024}), 0.0))
          .add(&K::openai_step, key_spec("openai_step", ParamType::Int,
                                         "cached tokens count in increments of this past the minimum", Value(int64_t{128}), 1.0));
  return set;
}

// ---- prefix-cost ----

// A provider's prompt-caching rules: reads at `read` × the input price once the cached prefix
// reaches `min_tokens` (counted in `step` increments past it), newly cached tokens at `write` ×.
struct Pricing {
  double read = 1, write = 1;
  int min_tokens = 0, step = 1;
};

struct Bill {
  double tokens = 0, reads = 0, writes = 0, cost = 0;  // cost in input-token equivalents
};

Bill bill(const std::vector<CacheReplay::Step>& steps, const Pricing& pr, bool cached) {
  Bill b;
  for (const auto& s : steps) {
    double r = 0, w = 0;
    if (cached && s.prompt >= pr.min_tokens) {
      if (s.hit >= pr.min_tokens) r = pr.min_tokens + (s.hit - pr.min_tokens) / pr.step * pr.step;
      w = s.written;
    }
    b.tokens += s.prompt;
    b.reads += r;
    b.writes += w;
    b.cost += (s.prompt - r - w) + r * pr.read + w * pr.write;
  }
  return b;
}

class CostVariant : public Variant {
 public:
  explicit CostVariant(CacheKind k) : kind_(k) {}

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    constexpr int kVocab = 32000;  // Llama 2's: only which prompts share prefixes matters here
    const CostKeys k = cost_keys().read(p);
    if (k.workload == CostWorkload::SystemPrompt) {
      workload::SystemPromptWorkload w(kVocab, static_cast<int>(k.shape.system_prompt), static_cast<int>(k.shape.query_min),
                                       static_cast<int>(k.shape.query_max), seed);
      trace_ = workload::system_prompt_trace(w, k.mixed.requests, 1.0, seed);
    } else {
      detail::check_shares(k.mixed);
      trace_ = workload::mixed_workload(k.mixed, kVocab, seed);
    }
    options_ = server_options(k.cache, kind_, kUnbounded);
    input_price_ = k.input_price;
    anthropic_ = {k.anthropic_read, k.anthropic_write, static_cast<int>(k.anthropic_min), 1};
    openai_ = {k.openai_read, 1.0, static_cast<int>(k.openai_min), static_cast<int>(k.openai_step)};
  }

  Validation validate(BackendRuntime&) override {
    CacheReplay replay(options_);
    for (size_t i = 0; i < trace_.size(); ++i) {
      const workload::Request& r = trace_[i];
      const auto s = replay.step(r.prompt.data(), static_cast<int>(r.prompt.size()), workload::cache_salt(r));
      if (s.hit > s.prompt - 1 || s.written > s.prompt - s.hit || s.hit < 0 || s.written < 0)
        return {false, "accounting", 1, 0,
                fmt::format("request {}: {} hit + {} written of {} tokens", i, s.hit, s.written, s.prompt)};
      if (std::string e = replay.check(); !e.empty())
        return {false, "invariants", 1, 0, fmt::format("after request {}: {}", i, e)};
    }
    return {true, "invariants", 0, 0,
            fmt::format("the trace's {} requests replayed through the cache; invariants after each", trace_.size())};
  }

  void run(BackendRuntime&) override {
    CacheReplay replay(options_);
    steps_.clear();
    steps_.reserve(trace_.size());
    for (const workload::Request& r : trace_)
      steps_.push_back(replay.step(r.prompt.data(), static_cast<int>(r.prompt.size()), workload::cache_salt(r)));
  }

  std::vector<Metric> metrics() const override {
    const bool cached = kind_ != CacheKind::None;
    const Bill a = bill(steps_, anthropic_, cached), o = bill(steps_, openai_, cached);
    double hit = 0;
    for (const auto& s : steps_) hit += s.hit;
    const double tokens = a.tokens;
    const double per_1k = steps_.empty() ? 0 : input_price_ / 1e6 * 1000.0 / static_cast<double>(steps_.size());
    auto pct = [&](double x) { return tokens > 0 ? 100.0 * x / tokens : 0; };
    return {{"hit rate", pct(hit), "%"},
            {"uncached", tokens * per_1k, "$/1k req"},
            {"anthropic", a.cost * per_1k, "$/1k req"},
            {"anthropic saved", pct(tokens - a.cost), "%"},
            {"anthropic reads", pct(a.reads), "% of tokens"},
            {"anthropic writes", pct(a.writes), "% of tokens"},
            {"openai", o.cost * per_1k, "$/1k req"},
            {"openai saved", pct(tokens - o.cost), "%"},
            {"openai reads", pct(o.reads), "% of tokens"}};
  }

 private:
  CacheKind kind_;
  std::vector<workload::Request> trace_;
  ServerOptions options_;
  double input_price_ = 0;
  Pricing anthropic_, openai_;
  std::vector<CacheReplay::Step> steps_;
};

KindInfo cost_kind() {
  KindInfo k;
  k.name = "prefix-cost";
  k.smallest = "requests: 20\nsystem_prompt: 64\nmean_system_prompt: 64\nfewshot_tokens: 32\n";
  k.group = "prefix";
  k.doc =
      "What API prompt caching saves in money on the same workloads. The caches replay the trace (bookkeeping only: "
      "hits do not depend on the engine) and each request's measured hit and newly cached tokens are priced under both "
      "providers' rules: reads at read × the input price once the cached prefix reaches the minimum (OpenAI: in "
      "`openai_step` increments), newly cached tokens at write × (Anthropic), the rest at 1×. Prices are inputs from the "
      "spec, not measurements; output tokens are not priced. A sample is the replay's bookkeeping time.";
  k.keys = cost_keys().keys();
  k.check = [](const SpecKeyValues& values) {
    const std::vector<CostWorkload> workloads = SpecValues<CostKeys>(cost_keys(), values).field(&CostKeys::workload).values;
    return check_workload_keys(values, std::find(workloads.begin(), workloads.end(), CostWorkload::Mixed) != workloads.end());
  };
  return k;
}

const KindRegistration cost_registration(cost_kind());

std::vector<DeclaredVariant> cost_variants() {
  const std::vector<KeySpec> keys = cost_kind().keys;
  return {{{"none", Backend::Cpu, "no prompt caching: every input token at the input price",
            all_but(keys, {"block_size", "capacity"}), true},
           make_variant<CostVariant>(CacheKind::None)},
          {{"block_hash", Backend::Cpu, "hits of the block-hash cache (16-token blocks)", {}, true},
           make_variant<CostVariant>(CacheKind::BlockHash)},
          {{"radix", Backend::Cpu, "hits of the radix cache (token-granular)", all_but(keys, {"block_size"}), true},
           make_variant<CostVariant>(CacheKind::Radix)}};
}
const VariantListRegistration cost_variant_registration("prefix-cost", cost_variants());

}  // namespace
}  // namespace ib::prefix
