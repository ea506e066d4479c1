// Kind `kv-evict-model` (§8.3, KV-cache eviction on the engine): full, sliding_window,
// streaming_llm and h2o as KV managers with a fixed budget, in a long decode on the CPU engine in
// lock-step with the full cache (teacher forcing on the full cache's greedy output): logit KL,
// top-1 agreement, attention-output error. The engine skips evicted positions (Model::set_kept)
// and hands H2O the step's attention (Model::record_attention). Its keys: evict_keys.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "core/registry.h"
#include "kinds/kvcache/comparison_metrics.h"
#include "kinds/kvcache/engine_decode_keys.h"
#include "kinds/kvcache/evict_keys.h"
#include "kvcache/engine_compare.h"
#include "kvcache/eviction.h"
#include "model/engine_studies.h"

namespace ib::kvcache {
namespace {

using EvictClock = std::chrono::steady_clock;
double seconds_since(EvictClock::time_point t0) { return std::chrono::duration<double>(EvictClock::now() - t0).count(); }

constexpr double kEngineMiB = 1024.0 * 1024.0;

// An engine row's: the engine's decode, then the policy over the prompt and the new tokens.
std::string engine_policy_unsupported(const std::string& policy, const EvictModelKeys& k) {
  if (std::string why = engine_decode_unsupported(k.engine); !why.empty()) return why;
  return policy_unsupported(policy, k.policy, static_cast<int>(k.engine.context()));
}

class EngineEviction : public Variant {
 public:
  // per_head: one policy per (layer, kv head), each fed its own head's attention and evicting
  // from that head only (Model::set_kept_head); otherwise one kept set for the whole model.
  explicit EngineEviction(std::string policy, bool per_head = false) : policy_(std::move(policy)), per_head_(per_head) {}

  std::string unsupported(const Point& p) const override {
    return engine_policy_unsupported(policy_, evict_model_keys().read(p));
  }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const EvictModelKeys k = evict_model_keys().read(p);
    ref_ = reference_decode(k.engine, seed);
    options_ = policy_ == "full" ? PolicyOptions{} : policy_options(k.policy, ref_.context());
  }

  Validation validate(BackendRuntime&) override {
    const Check c = decode(true);
    if (!c.invariant_error.empty()) return {false, "invariants", 1, 0, c.invariant_error};
    if (policy_ == "full") {
      const bool same = logits_ == ref_.logits;
      return {same, "logits == full", same ? 0.0 : 1.0, 0,
              "the full policy's decode (same engine path, nothing masked) reproduces the full cache's logits bit for bit"};
    }
    if (per_head_)
      return {
          c.evicted_weight == 0, "weight on evicted", c.evicted_weight, 0,
          fmt::format("every step and each of the {} layers × {} kv heads: the attention the engine recorded for that head "
                      "puts no weight on a position its own policy evicted; every policy keeps its budget and promised tokens",
                      ref_.config.layers, ref_.config.kv_heads)};
    return {c.evicted_weight == 0, "weight on evicted", c.evicted_weight, 0,
            fmt::format("every step: the attention the engine recorded puts no weight on an evicted position (summed over {} "
                        "layers × {} heads); the policy keeps its budget and promised tokens",
                        ref_.config.layers, ref_.config.heads)};
  }

  void run(BackendRuntime&) override { decode(false); }

  std::vector<Metric> metrics() const override {
    const int steps = ref_.context() - 1;
    const int held = std::min(options_.budget, steps);
    std::vector<Metric> m;
    if (policy_ != "full") m.push_back({"budget", static_cast<double>(options_.budget), "tok"});
    m.push_back({"held", static_cast<double>(held), "tok"});
    m.push_back({"KV held", held * static_cast<double>(ref_.config.kv_elems_per_token()) * 2.0 / kEngineMiB, "MiB bf16"});
    append_comparison_metrics(compare_decode(ref_, logits_, attn_), m);
    m.push_back({"bookkeeping", bookkeeping_s_ / steps * 1e6, "µs/step"});
    return m;
  }
  // Do the sinks exist? The full cache's attention on the first tokens, by layer.
  std::string note() const override { return policy_ == "full" ? first_token_note(ref_) : std::string(); }

 private:
  struct Check {
    std::string invariant_error;
    double evicted_weight = 0;  // largest recorded attention weight on an evicted position
  };

  // One teacher-forced decode of every token with the policy – one for the whole model, or with
  // per_head_ one per (layer, kv head) fed that head's attention; the measured steps' logits and
  // attention outputs are kept for metrics(). `check` verifies each policy and the engine's mask
  // after every step (validation only: it is not part of the timed decode).
  Check decode(bool check) {
    const int H = ref_.config.kv_heads;
    const int count = per_head_ ? ref_.config.layers * H : 1;
    std::vector<std::unique_ptr<KvPolicy>> policies;
    for (int i = 0; i < count; ++i) policies.push_back(make_policy(policy_, options_));
    std::vector<float> slot_weights;
    std::vector<uint8_t> kept;
    Check c;
    bookkeeping_s_ = 0;
    model::KvEvictionStudy& eviction = model::kv_eviction(*ref_.model);  // asked once, outside the timed bookkeeping
    teacher_forced_decode(
        ref_, logits_, attn_,
        [&](int seq, int t) {
          const auto t0 = EvictClock::now();
          for (int i = 0; i < count; ++i) {
            const KvPolicy::Append a = policies[static_cast<size_t>(i)]->on_append(t);
            if (a.evicted < 0) continue;
            if (per_head_)
              eviction.set_kept_head(seq, i / H, i % H, a.evicted, false);
            else
              eviction.set_kept(seq, a.evicted, false);
          }
          bookkeeping_s_ += seconds_since(t0);
        },
        [&](int, int t, const model::AttentionRecord& rec) {
          const size_t n = static_cast<size_t>(t) + 1;  // the recorded rows' length
          for (int i = 0; i < count; ++i) {
            KvPolicy& policy = *policies[static_cast<size_t>(i)];
            const float* w = per_head_ ? rec.kv_head_weights.data() + static_cast<size_t>(i) * n : rec.weights.data();
            if (policy.uses_attention()) {
              const auto t0 = EvictClock::now();
              const std::vector<int>& slots = policy.slots();
              slot_weights.resize(slots.size());
              for (size_t s = 0; s < slots.size(); ++s) slot_weights[s] = w[static_cast<size_t>(slots[s])];
              policy.on_attention(slot_weights.data());
              bookkeeping_s_ += seconds_since(t0);
            }
            if (!check) continue;
            if (c.invariant_error.empty()) c.invariant_error = policy.check_invariants();
            kept.assign(n, 0);
            for (int p : policy.slots()) kept[static_cast<size_t>(p)] = 1;
            for (size_t p = 0; p < n; ++p)
              if (!kept[p]) c.evicted_weight = std::max(c.evicted_weight, static_cast<double>(w[p]));
          }
        });
    return c;
  }

  std::string policy_;
  bool per_head_ = false;
  PolicyOptions options_;
  ReferenceDecode ref_;
  std::vector<float> logits_, attn_;  // of the last decode with the policy
  double bookkeeping_s_ = 0;
};

// StreamingLLM's oracle, "sliding window with re-computation": each measured token's logits from
// a fresh forward pass over the last `budget` tokens alone, at positions 0 .. budget-1 as if the
// text began there. It is the most a cache of `budget` tokens can know of the text (at a
// prefill per token): its perplexity against the full cache's is what the budget loses to
// context alone, and a policy's against it what the policy loses beyond that.
class WindowRecomputeVariant : public Variant {
 public:
  std::string unsupported(const Point& p) const override {
    return engine_policy_unsupported("sliding_window", evict_model_keys().read(p));
  }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const EvictModelKeys k = evict_model_keys().read(p);
    ref_ = reference_decode(k.engine, seed);
    budget_ = policy_options(k.policy, ref_.context()).budget;
    logits_.assign(ref_.logits.size(), 0.0f);
    attn_.assign(ref_.attn.size(), 0.0f);
  }

  // The path itself: the first measured token recomputed over its whole context (prefill, then
  // a decode step) reproduces the full cache's logits, decoded a token at a time.
  Validation validate(BackendRuntime&) override {
    const size_t V = ref_.vocab();
    std::vector<float> row(V), attn(ref_.attn_size());
    const int t = ref_.prompt - 1;
    step(t, t + 1, row.data(), attn.data());
    double worst = 0, scale = 0;
    for (size_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::fabs(static_cast<double>(row[v]) - ref_.logits[v]));
      scale = std::max(scale, std::fabs(static_cast<double>(ref_.logits[v])));
    }
    const double rel = scale > 0 ? worst / scale : worst;
    return {rel <= 1e-4, "logits rel err", rel, 1e-4,
            "the first measured token recomputed over its whole context (a prefill) gives the full cache's logits within "
            "1e-4 of the row's largest"};
  }

  void run(BackendRuntime&) override {
    const size_t V = ref_.vocab(), A = ref_.attn_size();
    for (int i = 0; i < ref_.new_tokens; ++i)
      step(ref_.prompt - 1 + i, budget_, &logits_[static_cast<size_t>(i) * V], &attn_[static_cast<size_t>(i) * A]);
  }

  std::vector<Metric> metrics() const override {
    const int held = std::min(budget_, ref_.context() - 1);
    std::vector<Metric> m;
    m.push_back({"budget", static_cast<double>(budget_), "tok"});
    m.push_back({"held", static_cast<double>(held), "tok"});
    m.push_back({"KV held", held * static_cast<double>(ref_.config.kv_elems_per_token()) * 2.0 / kEngineMiB, "MiB bf16"});
    append_comparison_metrics(compare_decode(ref_, logits_, attn_), m);
    return m;
  }

 private:
  // The logits (and attention outputs) after token t, from the `window` tokens ending at t alone.
  void step(int t, int window, float* logits, float* attn) {
    const int first = std::max(0, t + 1 - window), n = t + 1 - first;
    model::Model& m = *ref_.model;
    const int seq = m.new_sequence(n);
    model::kv_eviction(m).record_attention(seq, true);
    if (n > 1) m.prefill(seq, &ref_.tokens[static_cast<size_t>(first)], n - 1, 1, model::StepOutput{});
    model::StepOutput out;
    out.logits = logits;
    m.decode(&seq, &ref_.tokens[static_cast<size_t>(t)], 1, out);
    const auto& rec = model::kv_eviction(m).attention_record(seq).output;
    std::copy(rec.begin(), rec.end(), attn);
    m.release(seq);
  }

  ReferenceDecode ref_;
  int budget_ = 0;
  std::vector<float> logits_, attn_;
};

KindInfo engine_kind() {
  KindInfo k;
  k.name = "kv-evict-model";
  k.smallest = "prompt: 32\nnew_tokens: 8\n";
  k.group = "kvcache";
  k.doc =
      "KV-cache eviction on the transformer engine (CPU, float32): prompt + new_tokens tokens decoded one at a time, "
      "each policy's sequence in lock-step with the full cache's and fed the same tokens (the full cache's greedy "
      "output: teacher forcing). One kept set serves every layer and head (H2O scores a token by its attention "
      "summed over them), except cpu_h2o_head: one H2O set per layer and kv head, as in the paper; evicted positions are skipped "
      "by the engine's attention. Over the new_tokens measured "
      "steps: KL(full ‖ policy) of the next-token distribution (mean, worst), top-1 agreement, and the relative L2 "
      "of the attention outputs of every layer. A sample is one decode with the policy (bookkeeping, masked "
      "attention, recording the attention it needs). `KV held` = the tokens a cache holding only the kept ones "
      "would allocate (bf16). With random weights the model has no learned sinks or heavy hitters: the claims need "
      "real weights (weights: DIR). With `text: FILE` the decode is the text's own tokens and the measured ones are "
      "scored: perplexity per policy and its ratio to the full cache's (StreamingLLM's table); the cpu_full row's note "
      "gives the attention mass on the first tokens by layer.";
  k.keys = evict_model_keys().keys();
  k.check = check_engine_decode;
  return k;
}

const KindRegistration engine_registration(engine_kind());

// The same on the engine, and H2O per head.
std::vector<DeclaredVariant> engine_policy_variants() {
  const std::vector<KeySpec>& keys = evict_model_keys().keys();
  std::vector<DeclaredVariant> out;
  for (const auto& name : policy_names())
    out.push_back({{"cpu_" + name, Backend::Cpu, std::string(policy_doc(name)) + "; on the CPU engine",
                    policy_variant_keys(keys, name), true},
                   make_variant<EngineEviction>(name)});
  out.push_back({{"cpu_h2o_head", Backend::Cpu,
                  "H2O per head, as its paper runs it: each layer's kv head keeps its own heavy hitters (scored by that head's "
                  "attention, summed over its query heads) + recent window; on the CPU engine",
                  policy_variant_keys(keys, "h2o"), true},
                 make_variant<EngineEviction>(std::string("h2o"), true)});
  out.push_back({{"cpu_window_recompute", Backend::Cpu,
                  "StreamingLLM's oracle (sliding window with re-computation): each measured token from a fresh forward pass "
                  "over the last `budget` tokens alone, positions from 0; what a cache of that size can know at best, at a "
                  "prefill per token; on the CPU engine",
                  policy_variant_keys(keys, "sliding_window"), true},
                 make_variant<WindowRecomputeVariant>()});
  return out;
}

const VariantListRegistration engine_variant_registration("kv-evict-model", engine_policy_variants());

}  // namespace
}  // namespace ib::kvcache
