#include "kvcache/engine_compare.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "model/decode_variants.h"

namespace ib::kvcache {

std::vector<KeySpec> engine_decode_keys(int default_prompt, int default_new_tokens) {
  std::vector<std::string> models = model::preset_names();
  models.push_back("checkpoint");
  return {enum_key("model", "engine preset (random weights unless `weights`), or checkpoint (weights: DIR)", "tiny", models),
          key_spec("weights", ParamType::String, "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
                   Value(std::string("random"))),
          key_spec("prompt", ParamType::Int, "random prompt tokens decoded before the measured steps", Value(int64_t{default_prompt}), 1.0),
          key_spec("new_tokens", ParamType::Int, "measured steps: tokens the reference generates greedily (fed to both)",
                   Value(int64_t{default_new_tokens}), 1.0)};
}

std::string engine_decode_unsupported(const Point& p) {
  const int64_t context = p.integer("prompt") + p.integer("new_tokens");
  if (const auto c = model::preset(p.text("model")); c && context > c->max_positions)
    return fmt::format("a {}-token decode exceeds {}'s {} positions", context, c->name, c->max_positions);
  return {};
}

ReferenceDecode reference_decode(const Point& p, uint64_t seed) {
  ReferenceDecode r;
  model::ModelChoice m = model::choose_model(p, seed);
  r.config = m.config;
  r.prompt = static_cast<int>(p.integer("prompt"));
  r.new_tokens = static_cast<int>(p.integer("new_tokens"));
  if (r.context() > r.config.max_positions)
    throw InputError(fmt::format("a {}-token decode exceeds {}'s {} positions", r.context(), r.config.name, r.config.max_positions));
  r.model = model::make_cpu_model(r.config, *m.weights);
  r.tokens = model::random_prompt(r.config.vocab, r.prompt, seed + 17);
  r.tokens.resize(static_cast<size_t>(r.context()));
  r.logits.assign(static_cast<size_t>(r.new_tokens) * r.vocab(), 0.0f);
  r.attn.assign(static_cast<size_t>(r.new_tokens) * r.attn_size(), 0.0f);
  const int seq = r.model->new_sequence(r.context());
  r.model->record_attention(seq, true);
  const size_t V = r.vocab(), A = r.attn_size();
  for (int t = 0; t + 1 < r.context(); ++t) {
    const int i = t - (r.prompt - 1);
    model::StepOutput out;
    if (i >= 0) out.logits = &r.logits[static_cast<size_t>(i) * V];
    r.model->decode(&seq, &r.tokens[static_cast<size_t>(t)], 1, out);
    if (i < 0) continue;
    const auto& rec = r.model->attention_record(seq).output;
    std::copy(rec.begin(), rec.end(), r.attn.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * A));
    const float* l = out.logits;
    r.tokens[static_cast<size_t>(t) + 1] = static_cast<int32_t>(std::max_element(l, l + V) - l);
  }
  r.model->release(seq);
  return r;
}

void teacher_forced_decode(ReferenceDecode& ref, std::vector<float>& logits, std::vector<float>& attn,
                           const std::function<void(int seq, int t)>& before,
                           const std::function<void(int seq, int t, const model::AttentionRecord&)>& after) {
  const size_t V = ref.vocab(), A = ref.attn_size();
  logits.resize(ref.logits.size());
  attn.resize(ref.attn.size());
  const int seq = ref.model->new_sequence(ref.context());
  ref.model->record_attention(seq, true);
  for (int t = 0; t + 1 < ref.context(); ++t) {
    if (before) before(seq, t);
    const int i = t - (ref.prompt - 1);
    model::StepOutput out;
    if (i >= 0) out.logits = &logits[static_cast<size_t>(i) * V];
    ref.model->decode(&seq, &ref.tokens[static_cast<size_t>(t)], 1, out);
    const model::AttentionRecord& rec = ref.model->attention_record(seq);
    if (after) after(seq, t, rec);
    if (i >= 0) std::copy(rec.output.begin(), rec.output.end(), attn.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * A));
  }
  ref.model->release(seq);
}

double kl_divergence(const float* p_logits, const float* q_logits, int n) {
  const float mp = *std::max_element(p_logits, p_logits + n), mq = *std::max_element(q_logits, q_logits + n);
  double zp = 0, zq = 0;
  for (int i = 0; i < n; ++i) {
    zp += std::exp(static_cast<double>(p_logits[i]) - mp);
    zq += std::exp(static_cast<double>(q_logits[i]) - mq);
  }
  const double lp = std::log(zp) + mp, lq = std::log(zq) + mq;
  double kl = 0;
  for (int i = 0; i < n; ++i) {
    const double a = p_logits[i] - lp, b = q_logits[i] - lq;
    kl += std::exp(a) * (a - b);
  }
  return std::max(kl, 0.0);
}

DecodeComparison compare_decode(const ReferenceDecode& ref, const std::vector<float>& logits, const std::vector<float>& attn) {
  const size_t V = ref.vocab(), A = ref.attn_size();
  DecodeComparison c;
  int agree = 0;
  for (int i = 0; i < ref.new_tokens; ++i) {
    const float* f = &ref.logits[static_cast<size_t>(i) * V];
    const float* g = &logits[static_cast<size_t>(i) * V];
    const double kl = kl_divergence(f, g, ref.config.vocab);
    c.kl_mean += kl;
    c.kl_worst = std::max(c.kl_worst, kl);
    agree += std::max_element(f, f + V) - f == std::max_element(g, g + V) - g;
    double num = 0, den = 0;
    for (size_t e = 0; e < A; ++e) {
      const double w = ref.attn[static_cast<size_t>(i) * A + e], x = attn[static_cast<size_t>(i) * A + e] - w;
      num += x * x;
      den += w * w;
    }
    c.attn_err += den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }
  c.kl_mean /= ref.new_tokens;
  c.attn_err /= ref.new_tokens;
  c.top1_agree = 100.0 * agree / ref.new_tokens;
  return c;
}

void append_comparison_metrics(const DecodeComparison& c, std::vector<Metric>& m) {
  m.push_back({"KL mean", c.kl_mean, "nats"});
  m.push_back({"KL worst", c.kl_worst, "nats"});
  m.push_back({"top-1 agree", c.top1_agree, "%"});
  m.push_back({"attn err", c.attn_err, "rel L2"});
}

}  // namespace ib::kvcache
