// Kind `kv-evict` (§8.3, KV-cache eviction): full, sliding_window, streaming_llm and h2o as KV
// managers with a fixed budget, measured for quality against the full cache on one attention
// head with the structure trained models show (sinks, recency, heavy hitters, diffuse rest) from
// the seeded generator of kvcache/synthetic_attention.h; host variants (the policy's bookkeeping
// and attention over its slots on the CPU). Its keys: evict_keys.h. kv-evict-model runs the same
// policies on the engine (kv_evict_model.cpp).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/registry.h"
#include "kinds/kvcache/evict_keys.h"
#include "kvcache/eviction.h"
#include "kvcache/synthetic_attention.h"
#include "model/model.h"

namespace ib::kvcache {
namespace {

constexpr double kSyntheticMiB = 1024.0 * 1024.0;

class SyntheticEviction : public Variant {
 public:
  explicit SyntheticEviction(std::string policy) : policy_(std::move(policy)) {}

  std::string unsupported(const Point& p) const override {
    const EvictKeys k = evict_keys().read(p);
    return policy_unsupported(policy_, k.policy, static_cast<int>(k.context));
  }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const EvictKeys k = evict_keys().read(p);
    const SyntheticParams sp = k.synthetic();
    if (std::string why = synthetic_problem(sp); !why.empty()) throw InputError(why);
    const int steps = static_cast<int>(k.decode_steps);
    if (steps > sp.context) throw InputError(fmt::format("decode_steps {} exceeds the {}-token context", steps, sp.context));
    gen_ = std::make_unique<SyntheticAttention>(sp, seed);
    replay_ = std::make_unique<EvictionReplay>(
        *gen_, make_policy(policy_, policy_ == "full" ? PolicyOptions{} : policy_options(k.policy, sp.context)), steps);
    const auto kv = model::preset(k.kv_model);
    kv_bytes_per_token_ = static_cast<double>(kv->kv_elems_per_token()) * 2.0;  // bf16
  }

  Validation validate(BackendRuntime&) override {
    quality_ = replay_->measure();
    bookkeeping_s_ = replay_->bookkeeping_seconds_per_step();
    const int last = gen_->context() - 1;
    const AttentionShares s = attention_shares(*gen_, last, std::max(1, gen_->context() / 20));
    const std::string shares = fmt::format(
        "full attention of the last query: sinks {:.0f}%, last 5% of tokens {:.0f}%, heavy hitters {:.0f}%, rest {:.0f}%; "
        "probes put {:.0f}% on their needle",
        100 * s.sinks, 100 * s.recent, 100 * s.heavy, 100 * s.rest, 100 * quality_.needle_weight);
    if (!quality_.invariant_error.empty()) return {false, "invariants", 1, 0, quality_.invariant_error};
    if (policy_ == "full" && quality_.err_max != 0)
      return {false, "rel_l2 vs full", quality_.err_max, 0, "the full cache must reproduce full attention exactly"};
    const double tol = 1e-4;
    return {quality_.kernel_err <= tol, "rel_l2", quality_.kernel_err, tol,
            "each step's attention over the slot cache vs float64 attention over the kept positions; the policy keeps its "
            "budget and promised tokens every step; " +
                shares};
  }

  void run(BackendRuntime&) override { replay_->run(); }

  // Attention over the kept tokens of each measured step: 4·head_dim FLOPs and a K and V row
  // (fp32) read per kept token.
  Work work() const override {
    double kept = 0;
    const int budget = replay_->policy().budget();
    for (int t = replay_->first_step(); t < gen_->context(); ++t) kept += std::min(budget, t + 1);
    return {4.0 * gen_->head_dim() * kept, 8.0 * gen_->head_dim() * kept};
  }

  std::vector<Metric> metrics() const override {
    std::vector<Metric> m;
    if (policy_ != "full") m.push_back({"budget", static_cast<double>(replay_->policy().budget()), "tok"});
    m.push_back({"held", static_cast<double>(quality_.held), "tok"});
    m.push_back({"KV held", quality_.held * kv_bytes_per_token_ / kSyntheticMiB, "MiB bf16"});
    m.push_back({"err mean", quality_.err_mean, "rel L2"});
    m.push_back({"err worst", quality_.err_max, "rel L2"});
    m.push_back({"attn mass kept", 100 * quality_.mass, "%"});
    m.push_back({"needle recall", 100 * quality_.needle_recall, "%"});
    m.push_back({"needle err", quality_.needle_err, "rel L2"});
    m.push_back({"bookkeeping", bookkeeping_s_ * 1e6, "µs/step"});
    return m;
  }

 private:
  std::string policy_;
  std::unique_ptr<SyntheticAttention> gen_;
  std::unique_ptr<EvictionReplay> replay_;  // after gen_: refers to it
  EvictionQuality quality_;
  double bookkeeping_s_ = 0, kv_bytes_per_token_ = 0;
};

KindInfo synthetic_kind() {
  KindInfo k;
  k.name = "kv-evict";
  k.smallest = "context: 256\ndecode_steps: 8\nhead_dim: 32\n";
  k.group = "kvcache";
  k.doc =
      "KV-cache eviction on one attention head with the structure trained models show, from a documented seeded "
      "generator (lib/kvcache/synthetic_attention.h): a few sink tokens with large logits and small values, RoPE-style "
      "recency, a few heavy hitters every query likes, a diffuse rest. Tokens stream through the policy (a KV manager "
      "with `budget` slots); the last decode_steps steps are measured against full attention: relative L2 of the "
      "attention output (mean, worst step), the full-attention mass on the kept tokens, and probes that target a "
      "needle at least half the context back (recall = needle still kept). A sample is one measured decode: the "
      "policy's bookkeeping, the new K/V written into its slot and attention over the slots. `bookkeeping` times the "
      "policy's decisions alone. `KV held` prices the held tokens at kv_model's K/V bytes (all layers, bf16).";
  k.keys = evict_keys().keys();
  k.roofline = true;
  return k;
}

const KindRegistration synthetic_registration(synthetic_kind());

// One host variant per policy, reading the keys its policy reads.
std::vector<DeclaredVariant> synthetic_policy_variants() {
  const std::vector<KeySpec>& keys = evict_keys().keys();
  std::vector<DeclaredVariant> out;
  for (const auto& name : policy_names())
    out.push_back(
        {{name, Backend::Cpu, policy_doc(name), policy_variant_keys(keys, name), true}, make_variant<SyntheticEviction>(name)});
  return out;
}

const VariantListRegistration synthetic_variant_registration("kv-evict", synthetic_policy_variants());

}  // namespace
}  // namespace ib::kvcache
