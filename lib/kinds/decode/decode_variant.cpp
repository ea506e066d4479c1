#include "kinds/decode/decode_variant.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/stats.h"
#include "model/model_choice.h"

namespace ib::model {

double DecodeVariant::kv_bytes_per_token() const {
  return static_cast<double>(config_.kv_elems_per_token()) * (backend_ == Backend::Cuda ? 2.0 : 4.0);
}

double DecodeVariant::seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DecodeVariant::prepare(const Point& p, BackendRuntime& rt, uint64_t seed) {
  const DecodeKeys keys = decode_keys().read(p);
  ModelChoice m = choose_model(keys.model, keys.weights, seed);
  config_ = m.config;
  // Points hold only the keys the variant declares it uses (a prefill has no batch: the default 1).
  batch_ = static_cast<int>(keys.batch);
  prompt_ = static_cast<int>(keys.prompt);
  text_ = text_prompts(keys.prompts, keys.weights, config_.vocab);
  if (text_) {  // the longest of the batch's prompts sizes the caches; each keeps its own length
    prompt_ = 0;
    for (int b = 0; b < batch_; ++b)
      prompt_ = std::max(prompt_, static_cast<int>(text_->for_sequence(static_cast<size_t>(b)).size()));
  }
  new_tokens_ = new_tokens(keys);
  sampling_.temperature = static_cast<float>(keys.temperature);
  sampling_.seed = seed;
  if (backend_ == Backend::Cuda) {
    EngineOptions o;
    o.cuda_graph = cuda_graph_;
    o.matmul = keys.matmul;
    o.max_batch = std::max(batch_, 1);
    o.max_prefill = std::min(std::max(prompt_ + new_tokens_, 16), 8192);
    model_ = make_cuda_model(config_, *m.weights, o, rt.stream());
  } else {
    cpu_matmul_ = keys.cpu_matmul;
    model_ = make_cpu_model(config_, *m.weights, cpu_matmul_);
  }
  weights_ = std::move(m.weights);
  const int capacity = prompt_ + capacity_past_prompt();
  prompts_.clear();
  seqs_.clear();
  for (int b = 0; b < batch_; ++b) {
    prompts_.push_back(text_ ? text_->for_sequence(static_cast<size_t>(b))
                             : random_prompt(config_.vocab, prompt_, seed + 17 + static_cast<uint64_t>(b)));
    seqs_.push_back(model_->new_sequence(capacity));
  }
  // A decode step runs at a fixed context: the prompts are prefilled once here.
  if (caches_prompts())
    for (int b = 0; b < batch_; ++b)
      model_->prefill(seqs_[static_cast<size_t>(b)], prompts_[static_cast<size_t>(b)].data(), length_of(b), 1, {});
}

int DecodeVariant::length_of(int b) const { return static_cast<int>(prompts_[static_cast<size_t>(b)].size()); }

// The cached path (decode steps) against a recomputation without a cache: one prefill of the
// whole sequence, whose per-position logits must match the step logits.
Validation DecodeVariant::check_against_recompute(const std::vector<std::vector<float>>& step_logits,
                                                  const std::vector<int32_t>& tokens, int prompt_len, double tolerance) {
  const int n = static_cast<int>(step_logits.size());
  const int fresh = model_->new_sequence(static_cast<int>(tokens.size()));
  std::vector<float> all(static_cast<size_t>(n) * static_cast<size_t>(config_.vocab));
  StepOutput out;
  out.logits = all.data();
  model_->prefill(fresh, tokens.data(), static_cast<int>(tokens.size()), n, out);
  model_->release(fresh);
  std::vector<float> steps;
  for (const auto& s : step_logits) steps.insert(steps.end(), s.begin(), s.end());
  for (float x : steps)
    if (!std::isfinite(x)) return {false, "nan_logits", 1, 0, "a decode step produced NaN/inf logits"};
  const double err = relative_l2(steps, all);
  int agree = 0;
  for (int i = 0; i < n; ++i) {
    const float* a = &steps[static_cast<size_t>(i) * config_.vocab];
    const float* b = &all[static_cast<size_t>(i) * config_.vocab];
    agree += std::max_element(a, a + config_.vocab) - a == std::max_element(b, b + config_.vocab) - b;
  }
  return {err <= tolerance, "rel_l2", err, tolerance,
          fmt::format("{} cached steps after a {}-token prompt vs one uncached prefill; argmax agrees at {}/{}", n, prompt_len,
                      agree, n)};
}

// Int8 activations' logits against float32 ones (relative L2): SmolLM2-135M Q4_1 gives 1-3.4e-2
// through its 30 layers; a wrong layout or scale gives ~1.
constexpr double kInt8Tolerance = 0.1;

// Int8 activations are not the float product: the logits within kInt8Tolerance (relative L2) of
// the float32 reference's while the two engines were fed the same tokens, and where their greedy
// tokens part, ours within kNearTie of the reference's top logit (a near-tie the quantization
// error may flip, as llama.cpp's does), after which their logits follow different texts.
Validation DecodeVariant::validate_int8(Validation v, const std::vector<std::vector<float>>& ref,
                                        const std::vector<std::vector<float>>& got, const std::vector<int32_t>& ref_tokens,
                                        const std::vector<int32_t>& tokens) const {
  constexpr float kNearTie = 0.5f;
  size_t part = 0;  // the first token where the generations differ
  while (part < tokens.size() && part < ref_tokens.size() && tokens[part] == ref_tokens[part]) ++part;
  // logits[i] came from tokens [0, first + i]: comparable while all of those are the same.
  const size_t first = tokens.size() - std::min(tokens.size(), got.size());
  std::vector<float> a, b;
  size_t compared = 0;
  for (size_t i = 0; i < got.size() && i < ref.size() && first + i < part; ++i, ++compared) {
    a.insert(a.end(), got[i].begin(), got[i].end());
    b.insert(b.end(), ref[i].begin(), ref[i].end());
  }
  const double err = relative_l2(a, b);
  if (compared == 0 || err > kInt8Tolerance)
    return {false, "rel_l2", err, kInt8Tolerance,
            fmt::format("the int8-activation GEMV's logits vs the float32 reference engine's over {} steps", compared)};
  std::string parted;
  if (part < tokens.size() && part < ref_tokens.size()) {
    const auto& r = ref[part - first - 1];  // the logits that chose token `part` (compared > 0: part > first)
    const float top = *std::max_element(r.begin(), r.end());
    const float gap = top - r[static_cast<size_t>(tokens[part])];
    if (gap > kNearTie)
      return {false, "greedy_gap", gap, kNearTie,
              fmt::format("the int8-activation engine's greedy token {} is {:.3g} below the reference's top logit",
                          part - first - 1, gap)};
    parted = fmt::format(", greedy parted at token {} on a near-tie ({:.3g})", part - first - 1, gap);
  }
  v.detail +=
      fmt::format("; rel_l2 {:.2g} from the float32 reference engine over {} steps (int8 activations{})", err, compared, parted);
  return v;
}

Validation DecodeVariant::validate(BackendRuntime& rt) {
  // Int8 activations: the decode steps are checked against the prefill's float32 products.
  const double tol = backend_ != Backend::Cpu ? 2e-2 : cpu_matmul_ == CpuMatmul::Int8 ? kInt8Tolerance : 1e-3;
  std::vector<int32_t> tokens;
  const auto logits = validation_logits(*model_, seqs_[0], tokens);
  rt.synchronize();
  // Sequence 0 from its prompt: the last len(logits) positions of `tokens` produced them.
  Validation v = check_against_recompute(logits, tokens, length_of(0), tol);
  if (!v.ok || backend_ != Backend::Cpu || cpu_matmul_ == CpuMatmul::Reference) return v;
  // The packed GEMV against the float32 reference GEMV on the same weights: the same bits.
  auto reference = make_cpu_model(config_, *weights_, CpuMatmul::Reference);
  const int seq = reference->new_sequence(model_->capacity(seqs_[0]));
  if (caches_prompts()) reference->prefill(seq, prompts_[0].data(), length_of(0), 1, {});
  std::vector<int32_t> ref_tokens;
  const auto ref = validation_logits(*reference, seq, ref_tokens);
  if (cpu_matmul_ == CpuMatmul::Int8) return validate_int8(v, ref, logits, ref_tokens, tokens);
  size_t differ = 0, n = 0;
  std::vector<float> got, want;
  for (size_t i = 0; i < ref.size() && i < logits.size(); ++i) {
    for (size_t j = 0; j < ref[i].size(); ++j, ++n) differ += std::memcmp(&ref[i][j], &logits[i][j], sizeof(float)) != 0;
    got.insert(got.end(), logits[i].begin(), logits[i].end());
    want.insert(want.end(), ref[i].begin(), ref[i].end());
  }
  if (cpu_matmul_ == CpuMatmul::Blas) {
    // OpenBLAS sums in its own order: within float32 rounding of the reference, not bit for bit.
    constexpr double kBlasTolerance = 1e-5;
    const double err = relative_l2(got, want);
    if (err > kBlasTolerance || ref_tokens != tokens)
      return {false, "rel_l2", err, kBlasTolerance,
              fmt::format("the OpenBLAS prefill's logits vs the float32 reference engine's{}",
                          ref_tokens != tokens ? " (the greedy tokens differ)" : "")};
    v.detail += fmt::format("; rel_l2 {:.2g} from the float32 reference engine (OpenBLAS prefill, packed GEMV)", err);
    return v;
  }
  if (differ || ref_tokens != tokens)
    return {false, "mismatches", static_cast<double>(differ), 0,
            fmt::format("the packed GEMV's logits differ from the float32 reference GEMV's at {} of {}", differ, n)};
  v.detail += fmt::format("; packed GEMV bit-identical to the float32 reference at {} logits", n);
  return v;
}

std::vector<Metric> DecodeVariant::metrics() const {
  std::vector<Metric> m;
  add_metrics(m);
  if (text_) m.push_back({"prompt tokens", static_cast<double>(length_of(0)), ""});  // the text's, not the `prompt` key's
  m.push_back({"weights", static_cast<double>(model_->weight_bytes()) / (1 << 30), "GiB"});
  m.push_back({"KV", static_cast<double>(model_->kv_bytes()) / (1 << 20), "MiB"});
  return m;
}

std::string DecodeVariant::note() const {
  std::string n = config_.model_type.empty() ? std::string() : config_.describe_details();
  if (text_) {
    std::string t = fmt::format("'{}'", short_text(text_->texts[0], 24));
    if (!generated_.empty()) t += fmt::format(" -> '{}'", short_text(text_->tokenizer->decode(generated_), 32));
    t += fmt::format(" ({} prompt tokens, {})", prompts_[0].size(), text_->tokenizer->name());
    n = n.empty() ? t : t + "; " + n;  // the text first: a terminal's shortened note keeps it
  }
  return n;
}

std::vector<std::pair<std::string, std::string>> DecodeVariant::texts() const {
  if (!text_) return {};
  std::vector<std::pair<std::string, std::string>> t = {{"prompt", text_->texts[0]}};
  if (!generated_.empty()) t.emplace_back("output", text_->tokenizer->decode(generated_));
  return t;
}

}  // namespace ib::model
