// A seeded generator of one attention head over a long decode, with the structure trained models
// show, and the measurement of an eviction policy against full attention on it.
//
// Generator. Step t appends token t (key k_t, value v_t) and asks query q_t over tokens 0..t.
// The head's d dimensions split into a rotary part (d/2 dims, m = d/4 frequency pairs), a sink
// axis, a heavy-hitter axis and a content part (c = d/2 − 2 dims), so that the logit is
//     q_t·k_j = recency_logit · ρ(t − j) + sink_logit·[j < sink_tokens] + heavy_logit·η_t·[j heavy]
//               + noise·ε_tj
//   recency  every query and key carry one unit vector rotated by its position, as RoPE rotates
//            them, at frequencies ω_i = recency_theta^(−i/m): ρ(Δ) = (1/m) Σ_i cos(ω_i Δ) is 1 at
//            Δ = 0 and decays roughly like 1 − log(Δ)/log(θ) (RoPE's long-term decay);
//   sinks    the first sink_tokens keys have sink_logit on the sink axis, every query 1: they draw
//            a large share of every query's weight; their values are scaled by sink_value (trained
//            models' sink tokens carry small values: attention parked there is a near no-op);
//   heavy    heavy_tokens positions (seeded, spread over the context) have heavy_logit on the heavy
//            axis; query t's pull η_t is uniform in [0.5, 1.5]: a few tokens every query likes;
//   diffuse  content keys z_j and queries are Gaussian, so ε_tj ~ N(0, 1), fresh for each query.
// Values are Gaussian with unit expected norm. The logit scale 1/sqrt(d) is folded into q.
// Probe: at every probe_every-th measured step a read-only query targets a "needle", a position
// drawn uniformly from [sink_tokens, t/2] (at least half the context back): its content is
// needle_logit · z_n/|z_n|², so the needle's logit gains needle_logit over the same structure.
// Probes are not fed to the policy (H2O does not see them): they ask what the cache still knows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvcache/eviction.h"

namespace ib::kvcache {

struct SyntheticParams {
  int head_dim = 128;
  int context = 4096;  // tokens decoded
  int sink_tokens = 4;
  double sink_logit = 9.0;
  double sink_value = 0.2;
  int heavy_tokens = 16;
  double heavy_logit = 5.5;
  double recency_logit = 6.5;
  double recency_theta = 10000.0;
  double noise = 0.7;
  double needle_logit = 14.0;
  int probe_every = 4;
};

// Why the parameters describe no generator ("" when they do).
std::string synthetic_problem(const SyntheticParams& p);

class SyntheticAttention {
 public:
  SyntheticAttention(const SyntheticParams& p, uint64_t seed);
  const SyntheticParams& params() const { return p_; }
  int head_dim() const { return p_.head_dim; }
  int context() const { return p_.context; }
  // [context][head_dim], position-major.
  const float* keys() const { return k_.data(); }
  const float* values() const { return v_.data(); }
  const float* key(int j) const { return k_.data() + static_cast<size_t>(j) * p_.head_dim; }
  const float* value(int j) const { return v_.data() + static_cast<size_t>(j) * p_.head_dim; }
  const float* query(int t) const { return q_.data() + static_cast<size_t>(t) * p_.head_dim; }
  bool is_sink(int j) const { return j < p_.sink_tokens; }
  bool is_heavy(int j) const { return heavy_[static_cast<size_t>(j)] != 0; }
  // The needle of a probe at step t, and the probe query (head_dim floats).
  int needle(int t) const;
  void probe_query(int t, float* q) const;

 private:
  SyntheticParams p_;
  uint64_t seed_;
  std::vector<float> k_, v_, q_;
  std::vector<uint8_t> heavy_;
};

// out = softmax(q·K)·V over n keys/values ([n][d] rows), float32 with the maximum subtracted;
// the weights go to w (n floats) when it is given.
void attend(const float* q, const float* k, const float* v, int n, int d, float* out, float* w);

// Where full attention puts query t's weight: the sink tokens, the last `recent` tokens, the heavy
// hitters outside both, and the rest (fractions summing to 1).
struct AttentionShares {
  double sinks = 0, recent = 0, heavy = 0, rest = 0;
};
AttentionShares attention_shares(const SyntheticAttention& g, int t, int recent);

// A policy against full attention over the last `decode_steps` steps of the generator's decode.
struct EvictionQuality {
  int steps = 0, probes = 0;
  double err_mean = 0, err_max = 0;  // relative L2 of the attention output vs full attention
  double mass = 0;                   // mean share of full attention on the kept tokens
  double needle_recall = 0;          // fraction of probes whose needle is kept
  double needle_err = 0;             // mean relative L2 of the probes' outputs
  double needle_weight = 0;          // mean full-attention weight of a probe on its needle
  int held = 0;                      // tokens in the cache after the last step
  double kernel_err = 0;             // worst relative L2 vs float64 attention over the kept positions
  std::string invariant_error;       // first broken promise of the policy ("" if none)
};

class EvictionReplay {
 public:
  // Streams tokens [0, context − decode_steps) through the policy (H2O attends to score them;
  // the others only decide) and keeps that state: every decode starts from it.
  EvictionReplay(const SyntheticAttention& g, std::unique_ptr<KvPolicy> policy, int decode_steps);
  int first_step() const { return first_; }
  const KvPolicy& policy() const { return *live_; }
  // One measured decode from the saved state: per step the policy's bookkeeping, the new K/V
  // written into its slot, attention over the slots. What the kv-evict kind times.
  void run();
  // The same decode, each step compared with full attention (and float64 attention over the kept
  // positions), the probes answered, and the policy's promises checked.
  EvictionQuality measure();
  // The policy's bookkeeping alone (on_append, on_attention with the weights measure() saw) over
  // the decode: median seconds per step over repetitions. Call after measure().
  double bookkeeping_seconds_per_step();

 private:
  using StepObserver = std::function<void(int t)>;
  void restore();
  void step(int t, bool attend_always);
  void decode(const StepObserver* observe);

  const SyntheticAttention& g_;
  int first_ = 0;
  std::unique_ptr<KvPolicy> saved_, live_;
  std::vector<float> saved_k_, saved_v_, k_, v_;  // [slots][head_dim]
  std::vector<float> out_, w_;                    // the last step's attention output and weights
  std::vector<std::vector<float>> step_weights_;  // measure()'s weights per step, for bookkeeping timing
};

}  // namespace ib::kvcache
