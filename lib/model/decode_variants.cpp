#include "model/decode_variants.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "model/checkpoint.h"
#include "numerics/random.h"
#include "core/stats.h"

namespace ib::model {

ModelChoice choose_model(const Point& p, uint64_t seed) { return choose_model(p.text("model"), p.text("weights"), seed); }

ModelChoice choose_model(const std::string& name, const std::string& weights, uint64_t seed, const std::string& model_key,
                         const std::string& weights_key) {
  ModelChoice m;
  if (name == "checkpoint") {
    if (weights == "random")
      throw InputError(fmt::format("{}: checkpoint needs {}: DIR (a Hugging Face checkpoint directory)", model_key, weights_key));
    m.config = checkpoint_config(weights);
    m.weights = checkpoint_weights(m.config, weights);
    return m;
  }
  auto c = preset(name);
  if (!c) throw InputError(fmt::format("{}: unknown preset '{}'", model_key, name));
  m.config = *c;
  m.weights = weights == "random" ? random_weights(m.config, seed) : checkpoint_weights(m.config, weights);
  return m;
}

std::optional<KeyProblem> check_model_weights(const std::map<std::string, std::vector<Value>>& values,
                                              const std::string& model_key, const std::string& weights_key) {
  auto m = values.find(model_key);
  auto w = values.find(weights_key);
  if (m == values.end() || w == values.end()) return std::nullopt;
  for (const Value& wv : w->second) {
    const std::string& weights = std::get<std::string>(wv);
    for (const Value& mv : m->second) {
      const std::string& name = std::get<std::string>(mv);
      if (weights == "random") {
        if (name == "checkpoint")
          return KeyProblem{
              {weights_key, model_key},
              fmt::format("{} checkpoint needs {}: DIR (a Hugging Face checkpoint directory)", model_key, weights_key)};
        continue;
      }
      try {
        std::optional<ModelConfig> c = name == "checkpoint" ? checkpoint_config(weights) : preset(name);
        if (c) checkpoint_weights(*c, weights);  // headers only: every tensor's name, dtype and shape
      } catch (const std::exception& e) {        // InputError, or a JSON type error in an index file
        return KeyProblem{{weights_key}, e.what()};
      }
    }
  }
  return std::nullopt;
}

KeySpec model_key(const std::string& default_preset) {
  KeySpec model =
      key_spec("model", ParamType::Enum, "engine preset (random weights unless `weights`), or checkpoint (weights: DIR)",
               Value(default_preset));
  model.choices = preset_names();
  model.choices.push_back("checkpoint");
  return model;
}

KeySpec weights_key() {
  return key_spec("weights", ParamType::String,
                  "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
                  Value(std::string("random")));
}

KeySpec matmul_key(const std::string& engines) {
  return enum_key("matmul",
                  engines +
                      " matmuls: cublas, or gemv (our weight-streaming GEMV for products of <= 8 rows whose `in` is a "
                      "multiple of 8, cuBLAS for the others)",
                  "cublas", matmul_names());
}

std::vector<std::string> with_matmul(std::vector<std::string> keys) {
  keys.push_back("matmul");
  return keys;
}

KeySpec cpu_matmul_key() {
  return enum_key(
      "cpu_matmul",
      "CPU engine's products: blas (the packed decode GEMV, prefills of > 32 rows through OpenBLAS; within "
      "float32 rounding of reference), packed (decode GEMV on each matrix packed once in its stored type, bf16 "
      "where exact; our SGEMM for prefills; bit for bit reference), int8 (blas, but GGUF Q8_0/Q4_0/Q4_1 weights multiply "
      "activations quantized to int8 per 32 inputs with integer dot products, AVX-512 VNNI: llama.cpp's "
      "arithmetic at every row count, so a row's products do not depend on its pass; within a stated tolerance of "
      "reference) or reference (float32 [in][out] GEMV and our "
      "SGEMM: the check of the others)",
      "blas", cpu_matmul_names());
}
CpuMatmul cpu_matmul_of(const Point& p) {
  return p.find("cpu_matmul") ? parse_cpu_matmul(p.text("cpu_matmul")) : CpuMatmul::Blas;
}

std::vector<std::string> with_cpu_matmul(std::vector<std::string> keys) {
  keys.push_back("cpu_matmul");
  return keys;
}

Matmul matmul_of(const Point& p) { return p.find("matmul") ? parse_matmul(p.text("matmul")) : Matmul::Cublas; }

std::vector<int32_t> random_prompt(int vocab, int n, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(vocab));
  return t;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::string DecodeVariant::unsupported(const Point& p) const {
  if (what_ == DecodeMeasure::Generate && p.integer("new_tokens") < 2) return "generation needs new_tokens >= 2 (TPOT)";
  return {};
}

void DecodeVariant::prepare(const Point& p, BackendRuntime& rt, uint64_t seed) {
  ModelChoice m = choose_model(p, seed);
  config_ = m.config;
  // Points hold only the keys the variant declares it uses (a prefill has no batch).
  batch_ = p.find("batch") ? static_cast<int>(p.integer("batch")) : 1;
  prompt_ = static_cast<int>(p.integer("prompt"));
  text_ = text_prompts(p, p.text("weights"), config_.vocab);
  if (text_) {  // the longest of the batch's prompts sizes the caches; each keeps its own length
    prompt_ = 0;
    for (int b = 0; b < batch_; ++b)
      prompt_ = std::max(prompt_, static_cast<int>(text_->for_sequence(static_cast<size_t>(b)).size()));
  }
  new_tokens_ = p.find("new_tokens") ? static_cast<int>(p.integer("new_tokens")) : 0;
  sampling_.temperature = static_cast<float>(p.number("temperature"));
  sampling_.seed = seed;
  if (backend_ == Backend::Cuda) {
    EngineOptions o;
    o.cuda_graph = cuda_graph_;
    o.matmul = matmul_of(p);
    o.max_batch = std::max(batch_, 1);
    o.max_prefill = std::min(std::max(prompt_ + new_tokens_, 16), 8192);
    model_ = make_cuda_model(config_, *m.weights, o, rt.stream());
  } else {
    cpu_matmul_ = cpu_matmul_of(p);
    model_ = make_cpu_model(config_, *m.weights, cpu_matmul_);
  }
  weights_ = std::move(m.weights);
  const int capacity = prompt_ + (what_ == DecodeMeasure::Generate ? new_tokens_ : 1);
  prompts_.clear();
  seqs_.clear();
  for (int b = 0; b < batch_; ++b) {
    prompts_.push_back(text_ ? text_->for_sequence(static_cast<size_t>(b))
                             : random_prompt(config_.vocab, prompt_, seed + 17 + static_cast<uint64_t>(b)));
    seqs_.push_back(model_->new_sequence(capacity));
  }
  // A decode step runs at a fixed context: the prompts are prefilled once here.
  if (what_ == DecodeMeasure::Step)
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

// What validation runs on sequence 0, on `m` (the measured engine, or the reference GEMV's):
// the per-step logits it compares, and in `tokens` the sequence that produced them.
std::vector<std::vector<float>> DecodeVariant::validation_logits(Model& m, int seq, std::vector<int32_t>& tokens) {
  const std::vector<int32_t>& prompt = prompts_[0];
  const int n0 = length_of(0);
  std::vector<std::vector<float>> logits;
  tokens = prompt;
  if (what_ == DecodeMeasure::Step) {
    // The prompt is cached already: one step with logits (the batch's other rows do not change
    // row 0's: each row's product is row-independent).
    const bool own = &m == model_.get();
    const int rows = own ? batch_ : 1;
    std::vector<float> l(static_cast<size_t>(config_.vocab) * static_cast<size_t>(rows));
    std::vector<int32_t> in(static_cast<size_t>(rows), 1), next(static_cast<size_t>(rows));
    StepOutput out;
    out.logits = l.data();
    out.next = next.data();
    m.decode(own ? seqs_.data() : &seq, in.data(), rows, out);
    if (own)
      for (int b = 0; b < batch_; ++b) m.truncate(seqs_[static_cast<size_t>(b)], length_of(b));
    logits.emplace_back(l.begin(), l.begin() + config_.vocab);
    tokens.push_back(1);
  } else if (what_ == DecodeMeasure::Prefill) {
    // The prompt in two chunks (the second attends to the cached first) vs in one piece.
    std::vector<float> l(static_cast<size_t>(config_.vocab));
    StepOutput out;
    out.logits = l.data();
    m.truncate(seq, 0);
    const int half = n0 / 2;
    if (half > 0) m.prefill(seq, prompt.data(), half, 1, {});
    m.prefill(seq, prompt.data() + half, n0 - half, 1, out);
    m.truncate(seq, 0);
    logits.push_back(l);
  } else {
    // A short greedy generation on sequence 0, keeping each step's logits.
    m.truncate(seq, 0);
    const int steps = std::min(new_tokens_ > 0 ? new_tokens_ : 4, 8);
    std::vector<float> l(static_cast<size_t>(config_.vocab));
    int32_t next = 0;
    StepOutput out;
    out.logits = l.data();
    out.next = &next;
    const int cap = m.capacity(seq);
    m.prefill(seq, prompt.data(), n0, 1, out);
    logits.push_back(l);
    for (int i = 1; i < steps && n0 + i < cap; ++i) {
      tokens.push_back(next);
      m.decode(&seq, &tokens.back(), 1, out);
      logits.push_back(l);
    }
    m.truncate(seq, 0);
  }
  return logits;
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
  if (what_ == DecodeMeasure::Step) reference->prefill(seq, prompts_[0].data(), length_of(0), 1, {});
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

void DecodeVariant::run(BackendRuntime&) {
  StepOutput out;
  std::vector<int32_t> next(static_cast<size_t>(batch_));
  out.next = next.data();
  out.sampling = sampling_;
  if (what_ == DecodeMeasure::Step) {
    // The next tokens come back to the host, so the wall time is the step's (TPS = batch / it).
    std::vector<int32_t> in(static_cast<size_t>(batch_), 1);
    out.step = step_++;
    const auto t0 = std::chrono::steady_clock::now();
    model_->decode(seqs_.data(), in.data(), batch_, out);
    tps_.push_back(batch_ / seconds_since(t0));
    for (int b = 0; b < batch_; ++b) model_->truncate(seqs_[static_cast<size_t>(b)], length_of(b));
    return;
  }
  if (what_ == DecodeMeasure::Prefill) {
    model_->truncate(seqs_[0], 0);
    out.step = step_++;
    model_->prefill(seqs_[0], prompts_[0].data(), length_of(0), 1, out);
    return;
  }
  // Generation: every prompt prefilled (first tokens on the host = TTFT), then new_tokens − 1
  // decode steps of the whole batch. Token ids come back to the host every step, as a server's do.
  const auto t0 = std::chrono::steady_clock::now();
  for (int b = 0; b < batch_; ++b) {
    model_->truncate(seqs_[static_cast<size_t>(b)], 0);
    out.step = step_++;
    model_->prefill(seqs_[static_cast<size_t>(b)], prompts_[static_cast<size_t>(b)].data(), length_of(b), 1,
                    {nullptr, &next[static_cast<size_t>(b)], sampling_, out.step});
  }
  const double ttft = seconds_since(t0);
  std::vector<int32_t> cur = next;
  if (text_) generated_.assign(1, next[0]);  // sequence 0's text, kept for the row (one push per step)
  for (int i = 1; i < new_tokens_; ++i) {
    out.step = step_++;
    model_->decode(seqs_.data(), cur.data(), batch_, out);
    cur = next;
    if (text_) generated_.push_back(next[0]);
  }
  const double total = seconds_since(t0);
  ttft_.push_back(ttft);
  tpot_.push_back((total - ttft) / (new_tokens_ - 1));
  tps_.push_back(static_cast<double>(batch_) * new_tokens_ / total);
}

Work DecodeVariant::work() const {
  const double kv_token = static_cast<double>(config_.kv_elems_per_token()) * (backend_ == Backend::Cuda ? 2.0 : 4.0);
  switch (what_) {
    case DecodeMeasure::Step: {
      const double wbytes = static_cast<double>(model_->streamed_weight_bytes(batch_));
      // Every weight read once, each sequence's cache read once (+ one token written).
      return {batch_ * config_.flops_per_token(prompt_), wbytes + batch_ * (prompt_ + 1.0) * kv_token};
    }
    case DecodeMeasure::Prefill: {
      const double wbytes = static_cast<double>(model_->streamed_weight_bytes(length_of(0)));
      double f = 0;
      const int n = length_of(0);
      for (int i = 0; i < n; ++i) f += config_.flops_per_token(i);
      return {f - (n - 1.0) * 2.0 * config_.vocab * config_.hidden, wbytes + n * kv_token};  // LM head on the last token only
    }
    case DecodeMeasure::Generate:
      break;
  }
  return {};
}

std::vector<Metric> DecodeVariant::metrics() const {
  std::vector<Metric> m;
  if (what_ == DecodeMeasure::Generate && !ttft_.empty()) {
    m.push_back({"TTFT", summarize(ttft_).median * 1e3, "ms"});
    m.push_back({"TPOT", summarize(tpot_).median * 1e3, "ms"});
    m.push_back({"TPS", summarize(tps_).median, "tok/s"});
  }
  if (what_ == DecodeMeasure::Step && !tps_.empty()) m.push_back({"TPS", summarize(tps_).median, "tok/s"});
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
