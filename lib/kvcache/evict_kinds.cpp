// Kinds `kv-evict` and `kv-evict-model` (§8.3, KV-cache eviction): full, sliding_window,
// streaming_llm and h2o as KV managers with a fixed budget, measured for quality against the full
// cache.
//   kv-evict        one attention head with the structure trained models show (sinks, recency,
//                   heavy hitters, diffuse rest) from the seeded generator of synthetic_attention.h;
//                   host variants (the policy's bookkeeping and attention over its slots on the CPU)
//   kv-evict-model  a long decode on the CPU engine with each policy in lock-step with the full
//                   cache (teacher forcing on the full cache's greedy output): logit KL, top-1
//                   agreement, attention-output error. The engine skips evicted positions
//                   (Model::set_kept) and hands H2O the step's attention (Model::record_attention).
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/registry.h"
#include "kvcache/engine_compare.h"
#include "kvcache/eviction.h"
#include "kvcache/synthetic_attention.h"

namespace ib::kvcache {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr double kMiB = 1024.0 * 1024.0;

// ---- keys shared by both kinds ----

KeySpec budget_key() {
  return key_spec("budget", ParamType::Float,
                  "KV budget: a fraction (≤ 1) of the context, or tokens (> 1, a whole number); full ignores it", Value(0.2),
                  0.001);
}
std::vector<KeySpec> policy_keys() {
  return {budget_key(),
          key_spec("sinks", ParamType::Int, "streaming_llm: first tokens always kept (attention sinks)", Value(int64_t{4}), 0.0),
          key_spec("recent", ParamType::Float, "h2o: share of the budget kept as the recent window (the rest: heavy hitters)",
                   Value(0.5), 0.0, 1.0)};
}

// Budget in tokens of a `context`-token decode.
int budget_tokens(double budget, int context) {
  if (budget <= 1.0) return std::max(1, static_cast<int>(std::lround(budget * context)));
  if (budget != std::floor(budget))
    throw InputError(fmt::format("budget {}: above 1 it counts tokens and must be a whole number", budget));
  return static_cast<int>(budget);
}

// A point holds only the keys some listed variant reads: sinks and recent may be absent.
PolicyOptions policy_options(const Point& p, int context) {
  PolicyOptions o;
  o.budget = budget_tokens(p.number("budget"), context);
  if (p.find("sinks")) o.sinks = static_cast<int>(p.integer("sinks"));
  if (p.find("recent")) o.recent = p.number("recent");
  return o;
}

// Why a policy cannot run this point (the variant's own keys only: full reads none of them).
std::string policy_unsupported(const std::string& policy, const Point& p, int context) {
  if (policy == "full") return {};
  const int b = budget_tokens(p.number("budget"), context);
  if (policy == "streaming_llm" && b <= p.integer("sinks"))
    return fmt::format("a {}-token budget leaves no recent window after {} sinks", b, p.integer("sinks"));
  return {};
}

// Keys a policy's variant reads: full none of the policy keys, the windows not H2O's share, ...
std::vector<std::string> keys_for(const std::vector<KeySpec>& keys, const std::string& policy) {
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

// ---- kv-evict: the synthetic study ----

SyntheticParams synthetic_params(const Point& p) {
  SyntheticParams s;
  s.head_dim = static_cast<int>(p.integer("head_dim"));
  s.context = static_cast<int>(p.integer("context"));
  s.sink_tokens = static_cast<int>(p.integer("sink_tokens"));
  s.sink_logit = p.number("sink_logit");
  s.sink_value = p.number("sink_value");
  s.heavy_tokens = static_cast<int>(p.integer("heavy_tokens"));
  s.heavy_logit = p.number("heavy_logit");
  s.recency_logit = p.number("recency_logit");
  s.recency_theta = p.number("recency_theta");
  s.noise = p.number("noise");
  s.needle_logit = p.number("needle_logit");
  s.probe_every = static_cast<int>(p.integer("probe_every"));
  return s;
}

// An engine row's: the engine's decode, then the policy over the prompt and the new tokens.
std::string engine_policy_unsupported(const std::string& policy, const Point& p) {
  if (std::string why = engine_decode_unsupported(p); !why.empty()) return why;
  return policy_unsupported(policy, p, static_cast<int>(p.integer("prompt") + p.integer("new_tokens")));
}

class SyntheticVariant : public Variant {
 public:
  explicit SyntheticVariant(std::string policy) : policy_(std::move(policy)) {}

  std::string unsupported(const Point& p) const override {
    return policy_unsupported(policy_, p, static_cast<int>(p.integer("context")));
  }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const SyntheticParams sp = synthetic_params(p);
    if (std::string why = synthetic_problem(sp); !why.empty()) throw InputError(why);
    const int steps = static_cast<int>(p.integer("decode_steps"));
    if (steps > sp.context) throw InputError(fmt::format("decode_steps {} exceeds the {}-token context", steps, sp.context));
    gen_ = std::make_unique<SyntheticAttention>(sp, seed);
    replay_ = std::make_unique<EvictionReplay>(
        *gen_, make_policy(policy_, policy_ == "full" ? PolicyOptions{} : policy_options(p, sp.context)), steps);
    const auto kv = model::preset(p.text("kv_model"));
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
    m.push_back({"KV held", quality_.held * kv_bytes_per_token_ / kMiB, "MiB bf16"});
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
  k.keys = {
      key_spec("context", ParamType::Int, "tokens decoded", Value(int64_t{4096}), 2.0),
      key_spec("decode_steps", ParamType::Int,
               "measured steps at the end of the context (the earlier tokens stream through the policy first)",
               Value(int64_t{256}), 1.0),
  };
  for (auto& key : policy_keys()) k.keys.push_back(key);
  const SyntheticParams d;
  std::vector<KeySpec> gen = {
      key_spec("head_dim", ParamType::Int, "dimension of the head (a multiple of 4)", Value(int64_t{d.head_dim}), 8.0, 1024.0),
      key_spec("sink_tokens", ParamType::Int, "generator: sink tokens at the start", Value(int64_t{d.sink_tokens}), 0.0),
      key_spec("sink_logit", ParamType::Float, "generator: logit bonus of a sink token", Value(d.sink_logit)),
      key_spec("sink_value", ParamType::Float, "generator: sink tokens' value norm relative to the others", Value(d.sink_value),
               0.0),
      key_spec("heavy_tokens", ParamType::Int, "generator: heavy-hitter tokens, seeded positions over the context",
               Value(int64_t{d.heavy_tokens}), 0.0),
      key_spec("heavy_logit", ParamType::Float, "generator: heavy hitters' logit bonus (× a per-query pull in [0.5, 1.5])",
               Value(d.heavy_logit)),
      key_spec("recency_logit", ParamType::Float, "generator: logit bonus at distance 0, decaying as RoPE's mean cosine",
               Value(d.recency_logit)),
      key_spec("recency_theta", ParamType::Float, "generator: base of the rotary frequencies (RoPE's theta)",
               Value(d.recency_theta), 2.0),
      key_spec("noise", ParamType::Float, "generator: std of the diffuse, per-query logits", Value(d.noise), 0.0),
      key_spec("needle_logit", ParamType::Float, "probe queries' logit bonus on their needle", Value(d.needle_logit)),
      key_spec("probe_every", ParamType::Int, "a needle probe every this many measured steps", Value(int64_t{d.probe_every}),
               1.0),
  };
  for (auto& key : gen) k.keys.push_back(key);
  k.keys.push_back(enum_key("kv_model", "model whose K/V bytes per token (all layers, bf16) price the held tokens", "llama2-7b",
                            model::preset_names()));
  return k;
}

// ---- kv-evict-model: the engine ----

std::vector<KeySpec> engine_keys() {
  std::vector<KeySpec> k = engine_decode_keys(448, 64);
  for (auto& key : policy_keys()) k.push_back(key);
  return k;
}

class EngineVariant : public Variant {
 public:
  // per_head: one policy per (layer, kv head), each fed its own head's attention and evicting
  // from that head only (Model::set_kept_head); otherwise one kept set for the whole model.
  explicit EngineVariant(std::string policy, bool per_head = false) : policy_(std::move(policy)), per_head_(per_head) {}

  std::string unsupported(const Point& p) const override { return engine_policy_unsupported(policy_, p); }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    ref_ = reference_decode(p, seed);
    options_ = policy_ == "full" ? PolicyOptions{} : policy_options(p, ref_.context());
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
    m.push_back({"KV held", held * static_cast<double>(ref_.config.kv_elems_per_token()) * 2.0 / kMiB, "MiB bf16"});
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
    teacher_forced_decode(
        ref_, logits_, attn_,
        [&](int seq, int t) {
          const auto t0 = Clock::now();
          for (int i = 0; i < count; ++i) {
            const KvPolicy::Append a = policies[static_cast<size_t>(i)]->on_append(t);
            if (a.evicted < 0) continue;
            if (per_head_)
              ref_.model->set_kept_head(seq, i / H, i % H, a.evicted, false);
            else
              ref_.model->set_kept(seq, a.evicted, false);
          }
          bookkeeping_s_ += seconds_since(t0);
        },
        [&](int, int t, const model::AttentionRecord& rec) {
          const size_t n = static_cast<size_t>(t) + 1;  // the recorded rows' length
          for (int i = 0; i < count; ++i) {
            KvPolicy& policy = *policies[static_cast<size_t>(i)];
            const float* w = per_head_ ? rec.kv_head_weights.data() + static_cast<size_t>(i) * n : rec.weights.data();
            if (policy.uses_attention()) {
              const auto t0 = Clock::now();
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
  std::string unsupported(const Point& p) const override { return engine_policy_unsupported("sliding_window", p); }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    ref_ = reference_decode(p, seed);
    budget_ = policy_options(p, ref_.context()).budget;
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
    m.push_back({"KV held", held * static_cast<double>(ref_.config.kv_elems_per_token()) * 2.0 / kMiB, "MiB bf16"});
    append_comparison_metrics(compare_decode(ref_, logits_, attn_), m);
    return m;
  }

 private:
  // The logits (and attention outputs) after token t, from the `window` tokens ending at t alone.
  void step(int t, int window, float* logits, float* attn) {
    const int first = std::max(0, t + 1 - window), n = t + 1 - first;
    model::Model& m = *ref_.model;
    const int seq = m.new_sequence(n);
    m.record_attention(seq, true);
    if (n > 1) m.prefill(seq, &ref_.tokens[static_cast<size_t>(first)], n - 1, 1, model::StepOutput{});
    model::StepOutput out;
    out.logits = logits;
    m.decode(&seq, &ref_.tokens[static_cast<size_t>(t)], 1, out);
    const auto& rec = m.attention_record(seq).output;
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
  k.keys = engine_keys();
  k.check = check_engine_decode;
  return k;
}

const KindRegistration synthetic_registration(synthetic_kind());
const KindRegistration engine_registration(engine_kind());

// One host variant per policy, reading the keys its policy reads.
std::vector<DeclaredVariant> synthetic_policy_variants() {
  const std::vector<KeySpec> keys = synthetic_kind().keys;
  std::vector<DeclaredVariant> out;
  for (const auto& name : policy_names())
    out.push_back({{name, Backend::Cpu, policy_doc(name), keys_for(keys, name), true}, make_variant<SyntheticVariant>(name)});
  return out;
}

// The same on the engine, and H2O per head.
std::vector<DeclaredVariant> engine_policy_variants() {
  const std::vector<KeySpec> keys = engine_kind().keys;
  std::vector<DeclaredVariant> out;
  for (const auto& name : policy_names())
    out.push_back(
        {{"cpu_" + name, Backend::Cpu, std::string(policy_doc(name)) + "; on the CPU engine", keys_for(keys, name), true},
         make_variant<EngineVariant>(name)});
  out.push_back({{"cpu_h2o_head", Backend::Cpu,
                  "H2O per head, as its paper runs it: each layer's kv head keeps its own heavy hitters (scored by that head's "
                  "attention, summed over its query heads) + recent window; on the CPU engine",
                  keys_for(keys, "h2o"), true},
                 make_variant<EngineVariant>(std::string("h2o"), true)});
  out.push_back({{"cpu_window_recompute", Backend::Cpu,
                  "StreamingLLM's oracle (sliding window with re-computation): each measured token from a fresh forward pass "
                  "over the last `budget` tokens alone, positions from 0; what a cache of that size can know at best, at a "
                  "prefill per token; on the CPU engine",
                  keys_for(keys, "sliding_window"), true},
                 make_variant<WindowRecomputeVariant>()});
  return out;
}

const VariantListRegistration synthetic_variant_registration("kv-evict", synthetic_policy_variants());
const VariantListRegistration engine_variant_registration("kv-evict-model", engine_policy_variants());

}  // namespace
}  // namespace ib::kvcache
