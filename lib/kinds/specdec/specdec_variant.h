// The base of the `specdec` kind's variants: everything a speculative method shares — the target
// (and draft) engines on a backend, prompts (random, a text prompt, or a bundled text), the caches
// reset between runs, the target's own trajectory, the calibrated decode step, the gates (greedy:
// token for token; sampled: in support and the verification's distributions the target's own) and
// the shared metrics. A method (one class per variant, a file of its own) says what it drafts with,
// reads its keys and generates; see autoregressive.cpp for the smallest one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/variant.h"
#include "kinds/specdec/specdec_keys.h"
#include "model/model.h"
#include "model/text_prompt.h"
#include "specdec/specdec.h"

namespace ib::model {
struct ModelChoice;
}

namespace ib::specdec {

// The target's i-th next token: what controlled drafting draws from, and a forced text's tokens.
using Trajectory = std::function<int32_t(int64_t)>;

class SpecdecVariant : public Variant {
 public:
  explicit SpecdecVariant(Backend backend) : backend_(backend) {}

  std::string unsupported(const Point& p) const final;
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) final;
  Validation validate(BackendRuntime& rt) final;
  // Each measured run draws its own controlled decisions (seed + run), so α̂ and tokens/step
  // average over runs instead of repeating one realisation.
  void run(BackendRuntime& rt) final;
  std::string note() const final;
  std::vector<std::pair<std::string, std::string>> texts() const final;
  std::vector<Metric> metrics() const final;

 protected:
  // ---- what a method declares ----
  // Runs a draft model (the draft, draft_weights, draft_layers, acceptance and alpha keys).
  virtual bool uses_draft_model() const { return false; }
  // Drafts and verifies; false for the baseline, whose sampled rows record no verification.
  virtual bool speculates() const { return true; }
  // The method's own reasons a point cannot run, checked after the draft model's and before the
  // prompt's (empty: it can).
  virtual std::string method_unsupported(const SpecdecKeys&) const { return {}; }
  // Reads the method's keys into cfg_ (and state of its own); the models exist.
  virtual void configure(const SpecdecKeys& keys, uint64_t seed) = 0;
  // The most nodes one verify pass puts in the target's cache past the sequence.
  virtual int verify_nodes() const { return cfg_.k; }
  // The single sequence's n_ tokens (caches reset; `history` holds the prompt).
  virtual std::vector<int32_t> generate_one(const Trajectory& truth, std::vector<int32_t>& history) = 0;
  // Every sequence's n_ tokens (batch > 1, caches reset): for the methods that read `batch`.
  virtual std::vector<std::vector<int32_t>> generate_all(const std::vector<Trajectory>& truths);
  // The method's metrics after the shared ones (target step, TPS, TPOT).
  virtual void add_metrics(std::vector<Metric>& m) const = 0;

  // ---- for the methods ----
  // vLLM's acceptance per position, α̂, drafts kept, tokens/step, verify time, [tree nodes], [the
  // draft's step and c], v: a drafting method's metrics. Returns α̂ (below 1), c and v.
  struct Measured {
    double alpha = 0, c = 0, v = 0;
  };
  Measured add_speculation_metrics(std::vector<Metric>& m, bool tree_nodes) const;
  void add_positions(std::vector<Metric>& m) const;

  SpecConfig cfg_;
  std::unique_ptr<model::Model> target_, draft_;
  int tseq_ = -1, dseq_ = -1, n_ = 0;
  std::vector<int> btseqs_, bdseqs_;  // batch > 1: every sequence's (0 is tseq_ / dseq_)
  std::vector<int32_t> prompt_;
  bool forced_ = false;  // a bundled text's tokens replace the target's choices
  SpecStats stats_;
  double target_step_ = 0;  // the target's decode step at this context and batch (s)
  std::vector<int32_t> lasts() const;

 private:
  std::unique_ptr<model::Model> make(const model::ModelChoice& m, BackendRuntime& rt);
  void reset();
  std::vector<int32_t> generate();
  std::vector<std::vector<int32_t>> generate_batch();
  std::vector<float> fresh_logits(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out);
  Validation greedy_up_to_rounding(const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<std::vector<int32_t>>& outs, int64_t mismatches);
  Validation validate_sampled();
  Validation validate_batch();
  void forget_runs();

  Backend backend_;
  model::EngineOptions engine_;  // of the CUDA engines: the defaults but for `matmul`
  model::CpuMatmul cpu_matmul_ = model::CpuMatmul::Blas;
  int batch_ = 1;
  std::vector<std::vector<int32_t>> bprompts_, btruths_;  // batch > 1: every sequence's prompt and greedy trajectory
  bool gpu_ = false;
  std::vector<int32_t> truth_;
  std::optional<model::TextPrompts> text_;  // a text prompt (prompt_text, prompt_file, prompts)
  std::vector<double> run_seconds_;         // each measured run's generation
  int64_t runs_ = 0;
  uint64_t base_seed_ = 0;
};

}  // namespace ib::specdec
