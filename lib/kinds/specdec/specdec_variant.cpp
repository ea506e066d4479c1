#include "kinds/specdec/specdec_variant.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/stats.h"
#include "model/model_choice.h"
#include "specdec/step_helpers.h"
#include "specdec/texts.h"

namespace ib::specdec {

using detail::since;

std::string SpecdecVariant::unsupported(const Point& p) const {
  const SpecdecKeys k = specdec_keys().read(p);
  if (uses_draft_model()) {
    if (k.draft == k.target && k.draft_weights == k.target_weights) return "draft and target are the same model";
    if (k.draft == "self") {
      const auto tc = model::preset(k.target);
      if (k.draft_layers < 1) return "draft: self needs draft_layers >= 1";
      if (tc && k.draft_layers >= tc->layers)
        return fmt::format("draft_layers {} is not below the target's {} layers", k.draft_layers, tc->layers);
    }
  }
  if (std::string why = method_unsupported(k); !why.empty()) return why;
  // The prompt and the new tokens must fit the models' positions (a bundled text's prompt is short).
  const int64_t need = (k.bundled_text() ? 0 : k.prompt) + k.new_tokens;
  for (const auto& [role, name] : {std::pair<const char*, const std::string&>{"target", k.target}, {"draft", k.draft}}) {
    if (std::string(role) == "draft" && !uses_draft_model()) continue;
    if (const auto c = model::preset(name); c && need > c->max_positions)
      return fmt::format("a {}-token sequence exceeds the {} {}'s {} positions", need, role, c->name, c->max_positions);
  }
  if (k.batch > 1 && k.bundled_text()) return "a bundled text is one sequence; batched rows need text: none";
  if (k.bundled_text() && (!k.prompts.text.empty() || !k.prompts.file.empty() || !k.prompts.jsonl.empty()))
    return "a bundled text brings its own prompt: give text: none with prompt_text, prompt_file or prompts";
  if (k.sampled()) {
    if (k.bundled_text()) return "a bundled text forces a greedy trajectory; sampled rows need text: none";
    if (uses_draft_model() && k.acceptance == Acceptance::Controlled)
      return "controlled acceptance decides tokens for greedy verification; sampling needs acceptance: model";
  }
  return {};
}

std::unique_ptr<model::Model> SpecdecVariant::make(const model::ModelChoice& m, BackendRuntime& rt) {
  if (backend_ == Backend::Cuda) return model::make_cuda_model(m.config, *m.weights, engine_, rt.stream());
  return model::make_cpu_model(m.config, *m.weights, cpu_matmul_);
}

void SpecdecVariant::prepare(const Point& p, BackendRuntime& rt, uint64_t seed) {
  const SpecdecKeys k = specdec_keys().read(p);
  engine_.matmul = k.matmul;   // the CUDA target's and draft's
  cpu_matmul_ = k.cpu_matmul;  // the CPU engines'
  const model::ModelChoice tm = model::choose_model(k.target, k.target_weights, seed, "target", "target_weights");
  target_ = make(tm, rt);
  draft_.reset();
  const model::ModelConfig& tc = target_->config();
  if (uses_draft_model()) {
    if (k.draft == "self") {
      // Self-speculative: the target's own first layers (read from its weights) as the draft.
      model::ModelChoice dm;
      const int layers = static_cast<int>(k.draft_layers);
      dm.config = model::first_layers_config(tm.config, layers);
      dm.weights = model::first_layers(*tm.weights, layers);
      draft_ = make(dm, rt);
    } else {
      draft_ = make(model::choose_model(k.draft, k.draft_weights, seed + 1, "draft", "draft_weights"), rt);
    }
    cfg_.source = k.acceptance == Acceptance::Model ? DraftSource::Model : DraftSource::Controlled;
    cfg_.alpha = k.alpha;
  }
  configure(k, seed);
  cfg_.seed = base_seed_ = seed;
  cfg_.sampling.temperature = static_cast<float>(k.temperature);
  cfg_.sampling.top_k = static_cast<int>(k.top_k);
  cfg_.sampling.top_p = static_cast<float>(k.top_p);
  cfg_.sampling.seed = seed;
  gpu_ = backend_ == Backend::Cuda;
  n_ = static_cast<int>(k.new_tokens);
  forced_ = k.bundled_text();
  text_.reset();
  truth_.clear();
  if (forced_) {
    TokenizedText t = load_text(k.text);
    prompt_ = t.prompt;
    truth_ = t.output;
    n_ = std::min<int>(n_, static_cast<int>(truth_.size()));
  } else if ((text_ = model::text_prompts(k.prompts, k.target_weights, tc.vocab))) {
    prompt_ = text_->for_sequence(0);
    if (draft_ && text_->tokenizer->vocab_size() > draft_->config().vocab)
      throw InputError(fmt::format("tokenizer: {} has {} tokens, past the draft's vocabulary of {}", text_->tokenizer->name(),
                                   text_->tokenizer->vocab_size(), draft_->config().vocab));
  } else {
    prompt_ = model::random_prompt(tc.vocab, static_cast<int>(k.prompt), seed + 5);
  }
  const int cap = static_cast<int>(prompt_.size()) + n_ + verify_nodes() + 2;
  const int need = static_cast<int>(prompt_.size()) + n_;
  for (const model::Model* m : {target_.get(), draft_.get()})
    if (m && need > m->config().max_positions)  // a checkpoint's max_position_embeddings (presets: unsupported rows)
      throw InputError(fmt::format("a {}-token sequence exceeds {}'s {} positions (max_position_embeddings)", need,
                                   m->config().name, m->config().max_positions));
  tseq_ = target_->new_sequence(cap);
  dseq_ = draft_ ? draft_->new_sequence(cap) : -1;
  batch_ = static_cast<int>(k.batch);
  bprompts_.clear();
  btseqs_.clear();
  bdseqs_.clear();
  btruths_.clear();
  if (batch_ > 1) {
    // Sequence 0 is the one above; the others get prompts of their own.
    bprompts_ = {prompt_};
    btseqs_ = {tseq_};
    bdseqs_ = {dseq_};
    for (int b = 1; b < batch_; ++b) {
      bprompts_.push_back(
          text_ ? text_->for_sequence(static_cast<size_t>(b))
                : model::random_prompt(tc.vocab, static_cast<int>(prompt_.size()), seed + 5 + 1000 * static_cast<uint64_t>(b)));
      btseqs_.push_back(target_->new_sequence(cap));
      if (draft_) bdseqs_.push_back(draft_->new_sequence(cap));
    }
  }
  reset();
  // The target's own greedy trajectory: the reference of the gate and Controlled's truth.
  if (batch_ > 1 && cfg_.sampling.greedy())
    btruths_ = autoregressive_generate_batch(*target_, btseqs_, lasts(), n_);
  else if (!forced_ && cfg_.sampling.greedy())
    truth_ = autoregressive_generate(*target_, tseq_, prompt_.back(), n_, {}, {}, false);
  // Calibration: the target's decode step at this context and batch (c and v are relative to it).
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) {
    reset();
    const auto t0 = std::chrono::steady_clock::now();
    if (batch_ > 1)
      autoregressive_generate_batch(*target_, btseqs_, lasts(), 1);
    else
      autoregressive_generate(*target_, tseq_, prompt_.back(), 1, {}, {}, false);
    t.push_back(since(t0));
  }
  target_step_ = summarize(t).median;
  forget_runs();
  reset();
}

void SpecdecVariant::forget_runs() {
  runs_ = 0;
  stats_ = {};
  run_seconds_.clear();
  cfg_.seed = cfg_.sampling.seed = base_seed_;
}

Validation SpecdecVariant::validate(BackendRuntime&) {
  if (!cfg_.sampling.greedy()) return validate_sampled();
  if (batch_ > 1) return validate_batch();
  const std::vector<int32_t> out = generate();
  int64_t wrong = 0;
  for (int i = 0; i < n_; ++i) wrong += out[static_cast<size_t>(i)] != truth_[static_cast<size_t>(i)];
  const int cached = target_->length(tseq_), want = static_cast<int>(prompt_.size()) - 1 + n_;
  if (cached != want)
    return {false, "cache_length", static_cast<double>(cached), static_cast<double>(want), "the target's cache after generation"};
  forget_runs();
  if (wrong > 0 && gpu_ && !forced_) {
    const Validation v = greedy_up_to_rounding({prompt_}, {out}, wrong);
    // Controlled drafts follow the trajectory the verify passes take (past the near-tie), not
    // the decode steps' one, which verification would no longer meet.
    if (v.ok) truth_ = out;
    return v;
  }
  return {wrong == 0, "mismatches", static_cast<double>(wrong), 0,
          fmt::format("{} tokens vs {}", n_, forced_ ? "the text" : "the target decoding alone (greedy)")};
}

// The target's logits before each of the n_ output tokens, from one fresh prefill of prompt +
// output (a sequence of its own): the reference the gates compare against.
std::vector<float> SpecdecVariant::fresh_logits(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  const int tv = target_->config().vocab;
  std::vector<int32_t> full = prompt;
  for (int i = 0; i + 1 < n_; ++i) full.push_back(out[static_cast<size_t>(i)]);
  for (auto& t : full) t %= tv;
  std::vector<float> logits(static_cast<size_t>(n_) * static_cast<size_t>(tv));
  const int fs = target_->new_sequence(static_cast<int>(full.size()) + 1);
  model::StepOutput o;
  o.logits = logits.data();
  target_->prefill(fs, full.data(), static_cast<int>(full.size()), n_, o);
  target_->release(fs);
  return logits;
}

// The GPU's verify pass (a GEMM over K + 1 rows) and its decode step (a GEMV) round bf16
// differently, so where two tokens' logits nearly tie the speculative output may take the other
// one and then continue from there. Such an output is still the target's greedy decoding up to
// rounding: each token is within a hair of the best at its position, with the logits of a fresh
// prefill of prompt + output (a third path). Passes when every token's gap to the row's maximum is
// at most 1% of the row's logit range; a wrong token (a misaligned position, a stale cache) is
// typically a large part of the range away.
Validation SpecdecVariant::greedy_up_to_rounding(const std::vector<std::vector<int32_t>>& prompts,
                                                 const std::vector<std::vector<int32_t>>& outs, int64_t mismatches) {
  const int tv = target_->config().vocab;
  double worst = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const std::vector<float> logits = fresh_logits(prompts[b], outs[b]);
    for (int i = 0; i < n_; ++i) {
      const float* row = &logits[static_cast<size_t>(i) * static_cast<size_t>(tv)];
      const auto [lo, hi] = std::minmax_element(row, row + tv);
      const double range = std::max(1e-6, static_cast<double>(*hi - *lo));
      worst = std::max(worst, static_cast<double>(*hi - row[outs[b][static_cast<size_t>(i)]]) / range);
    }
  }
  return {worst <= 1e-2, "greedy_gap", worst, 1e-2,
          fmt::format("{} of {} tokens differ from the target decoding alone (bf16 near-ties); every token's logit within this "
                      "fraction of its row's range of the best (fresh prefill)",
                      mismatches, static_cast<int64_t>(prompts.size()) * n_)};
}

void SpecdecVariant::run(BackendRuntime&) {
  cfg_.seed = cfg_.sampling.seed = base_seed_ + static_cast<uint64_t>(++runs_);
  const auto t0 = std::chrono::steady_clock::now();
  generate();
  run_seconds_.push_back(since(t0));
}

// The target checkpoint's settings and, with a text prompt, the prompt and the target's greedy
// continuation (what every verified output equals), decoded.
std::string SpecdecVariant::note() const {
  const model::ModelConfig& c = target_->config();
  std::string n = c.model_type.empty() ? std::string() : "target " + c.describe_details();
  if (text_) {
    std::string t = fmt::format("'{}'", model::short_text(text_->texts[0], 24));
    if (!truth_.empty()) t += fmt::format(" -> '{}'", model::short_text(text_->tokenizer->decode(truth_), 32));
    t += fmt::format(" ({} prompt tokens, {})", prompt_.size(), text_->tokenizer->name());
    n = n.empty() ? t : t + "; " + n;  // the text first: a terminal's shortened note keeps it
  }
  return n;
}

std::vector<std::pair<std::string, std::string>> SpecdecVariant::texts() const {
  if (!text_) return {};
  std::vector<std::pair<std::string, std::string>> t = {{"prompt", text_->texts[0]}};
  if (!truth_.empty()) t.emplace_back("output", text_->tokenizer->decode(truth_));
  return t;
}

std::vector<Metric> SpecdecVariant::metrics() const {
  std::vector<Metric> m;
  m.push_back({"target step", target_step_ * 1e3, "ms"});
  if (!run_seconds_.empty()) {
    // Per measured run (new_tokens for each of the batch's sequences): output tokens per second
    // and time per output token of a sequence, medians over the runs.
    const double t = summarize(run_seconds_).median;
    m.push_back({"TPS", static_cast<double>(batch_) * n_ / t, "tok/s"});
    m.push_back({"TPOT", t / n_ * 1e3, "ms"});
  }
  add_metrics(m);
  return m;
}

// vLLM's acceptance per position: of the steps that drafted position i, the share whose first
// i tokens were all accepted (for a tree or lookahead, depth i). Up to 8 positions.
void SpecdecVariant::add_positions(std::vector<Metric>& m) const {
  for (size_t i = 0; i < std::min<size_t>(8, stats_.drafted_at.size()); ++i)
    m.push_back({fmt::format("accepted @{}", i + 1), 100.0 * stats_.acceptance_at(i), "%"});
}

SpecdecVariant::Measured SpecdecVariant::add_speculation_metrics(std::vector<Metric>& m, bool tree_nodes) const {
  add_positions(m);
  const double steps = static_cast<double>(stats_.steps);
  const double passes = static_cast<double>(stats_.passes);  // one per step, or per batched step
  const double verify = passes > 0 ? stats_.verify_seconds / passes : 0;
  m.push_back({"acceptance α̂", 100.0 * stats_.acceptance(), "%"});
  m.push_back({"drafts kept", 100.0 * stats_.drafts_kept(), "%"});
  m.push_back({"tokens/step", stats_.tokens_per_step(), ""});
  m.push_back({"verify", verify * 1e3, "ms"});
  Measured out;
  out.v = verify / target_step_;
  if (tree_nodes) m.push_back({"tree nodes", steps > 0 ? static_cast<double>(stats_.tree_nodes) / steps : 0, ""});
  if (uses_draft_model() && stats_.draft_forward > 0) {
    const double draft_step = stats_.draft_seconds / static_cast<double>(stats_.draft_forward);
    out.c = draft_step / target_step_;
    m.push_back({"draft step", draft_step * 1e3, "ms"});
    m.push_back({"c", out.c, ""});
  }
  m.push_back({"v", out.v, ""});
  out.alpha = std::min(stats_.acceptance(), 0.999999);
  return out;
}

// Sampled rows: the output cannot equal the target's own draw token for token. What is checked:
// every emitted token lies in the support of the target's sampling distribution at its position,
// and (speculative variants) the distribution verification used there is the target's own,
// recomputed by a fresh prefill of prompt + output — total variation under 1e-3 on the CPU, 0.15
// on the GPU (bf16 verify and prefill passes take different kernels and round differently: a
// 1–2% logit difference is ~0.02–0.04 per row at temperature 0.7; a misaligned position or a
// corrupted cache gives ~0.5 and more). That the rejection sampling
// preserves the distribution is proven by the unit tests (chi-square-style checks over many draws).
Validation SpecdecVariant::validate_sampled() {
  std::vector<std::vector<std::vector<float>>> used(static_cast<size_t>(batch_));
  if (speculates()) {
    if (batch_ > 1)
      cfg_.record_batch = &used;
    else
      cfg_.record_target = &used[0];
  }
  const std::vector<std::vector<int32_t>> outs = batch_ > 1 ? generate_batch() : std::vector<std::vector<int32_t>>{generate()};
  cfg_.record_target = nullptr;
  cfg_.record_batch = nullptr;
  forget_runs();
  const int tv = target_->config().vocab;
  int64_t off = 0;
  double worst = 0;
  for (int b = 0; b < batch_; ++b) {
    const std::vector<int32_t>& prompt = batch_ > 1 ? bprompts_[static_cast<size_t>(b)] : prompt_;
    const std::vector<int32_t>& out = outs[static_cast<size_t>(b)];
    const std::vector<std::vector<float>>& rows = used[static_cast<size_t>(b)];
    const int seq = batch_ > 1 ? btseqs_[static_cast<size_t>(b)] : tseq_;
    const int cached = target_->length(seq), want = static_cast<int>(prompt.size()) - 1 + n_;
    if (cached != want)
      return {false, "cache_length", static_cast<double>(cached), static_cast<double>(want),
              fmt::format("the target's cache of sequence {} after generation", b)};
    if (speculates() && static_cast<int>(rows.size()) != n_)
      return {false, "recorded_rows", static_cast<double>(rows.size()), static_cast<double>(n_),
              fmt::format("target distributions recorded by verification of sequence {}", b)};
    // The target's own distributions at every output position: one fresh prefill.
    const std::vector<float> fresh = fresh_logits(prompt, out);
    std::vector<float> pf(static_cast<size_t>(tv));
    for (int i = 0; i < n_; ++i) {
      model::sampling_distribution(&fresh[static_cast<size_t>(i) * static_cast<size_t>(tv)], tv, cfg_.sampling, pf.data());
      const int32_t t = out[static_cast<size_t>(i)];
      off += t < 0 || t >= tv || !(pf[static_cast<size_t>(t)] > 0);
      if (rows.empty()) continue;
      double d = 0;
      for (int x = 0; x < tv; ++x)
        d += std::fabs(static_cast<double>(pf[static_cast<size_t>(x)]) - rows[static_cast<size_t>(i)][static_cast<size_t>(x)]);
      worst = std::max(worst, d / 2);
    }
  }
  const int64_t total = static_cast<int64_t>(batch_) * n_;
  const std::string what =
      batch_ > 1 ? fmt::format("{} sequences × {} sampled tokens", batch_, n_) : fmt::format("{} sampled tokens", n_);
  if (off > 0)
    return {false, "off_support", static_cast<double>(off), 0,
            fmt::format("of {} sampled tokens outside the target's distribution", total)};
  if (!speculates())
    return {true, "off_support", 0, 0, fmt::format("{}, all in the target's distribution (fresh prefill)", what)};
  const double tol = gpu_ ? 0.15 : 1e-3;
  return {worst <= tol, "tv_target", worst, tol,
          fmt::format("{} in support; max total variation of the verification's target distributions vs a fresh prefill", what)};
}

// Batched rows: every sequence's output equals its own greedy trajectory, every cache the
// prompt plus the output.
Validation SpecdecVariant::validate_batch() {
  const auto out = generate_batch();
  int64_t wrong = 0;
  for (int b = 0; b < batch_; ++b)
    for (int i = 0; i < n_; ++i)
      wrong += out[static_cast<size_t>(b)][static_cast<size_t>(i)] != btruths_[static_cast<size_t>(b)][static_cast<size_t>(i)];
  const int want = static_cast<int>(prompt_.size()) - 1 + n_;
  for (int b = 0; b < batch_; ++b)
    if (target_->length(btseqs_[static_cast<size_t>(b)]) != want)
      return {false, "cache_length", static_cast<double>(target_->length(btseqs_[static_cast<size_t>(b)])),
              static_cast<double>(want), fmt::format("the target's cache of sequence {} after generation", b)};
  forget_runs();
  if (wrong > 0 && gpu_) {
    const Validation v = greedy_up_to_rounding(bprompts_, out, wrong);
    if (v.ok) btruths_ = out;  // as in validate(): controlled drafts follow the verify passes' trajectory
    return v;
  }
  return {wrong == 0, "mismatches", static_cast<double>(wrong), 0,
          fmt::format("{} sequences × {} tokens vs each one's target decoding alone (greedy)", batch_, n_)};
}

std::vector<int32_t> SpecdecVariant::lasts() const {
  std::vector<int32_t> l;
  for (const auto& pr : bprompts_) l.push_back(pr.back());
  return l;
}

std::vector<std::vector<int32_t>> SpecdecVariant::generate_all(const std::vector<Trajectory>&) {
  throw std::logic_error("specdec: this method decodes one sequence (its variant does not read `batch`)");
}

std::vector<std::vector<int32_t>> SpecdecVariant::generate_batch() {
  reset();
  std::vector<Trajectory> truths;
  for (int b = 0; b < batch_; ++b)
    truths.push_back([this, b](int64_t i) {
      const auto& tr = btruths_[static_cast<size_t>(b)];
      return tr.empty() ? 0 : tr[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(tr.size()) - 1))];
    });
  return generate_all(truths);
}

// Both caches back to the prompt minus its last token (the first token fed at generation).
void SpecdecVariant::reset() {
  const int keep = static_cast<int>(prompt_.size()) - 1;
  auto fill = [&](model::Model& m, int seq, const std::vector<int32_t>& prompt) {
    if (m.length(seq) > keep) m.truncate(seq, keep);
    if (m.length(seq) < keep) {
      std::vector<int32_t> in(prompt.begin() + m.length(seq), prompt.begin() + keep);
      for (auto& t : in) t %= m.config().vocab;
      m.prefill(seq, in.data(), static_cast<int>(in.size()), 1, {});
    }
  };
  fill(*target_, tseq_, prompt_);
  if (draft_) fill(*draft_, dseq_, prompt_);
  for (int b = 1; b < batch_; ++b) {
    fill(*target_, btseqs_[static_cast<size_t>(b)], bprompts_[static_cast<size_t>(b)]);
    if (draft_) fill(*draft_, bdseqs_[static_cast<size_t>(b)], bprompts_[static_cast<size_t>(b)]);
  }
}

std::vector<int32_t> SpecdecVariant::generate() {
  if (batch_ > 1) return generate_batch()[0];
  reset();
  Trajectory truth = [this](int64_t i) {
    return truth_.empty() ? 0 : truth_[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(truth_.size()) - 1))];
  };
  std::vector<int32_t> history = prompt_;
  return generate_one(truth, history);
}

}  // namespace ib::specdec
