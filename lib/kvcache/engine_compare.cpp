#include "kvcache/engine_compare.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "model/engine_studies.h"
#include "model/model_choice.h"
#include "model/text_prompt.h"

namespace ib::kvcache {
namespace {

// The text's tokens (the tokenizer's special tokens, BOS, included), checked against the model.
std::vector<int32_t> text_tokens(const std::string& path, const std::string& tokenizer, const std::string& weights, int vocab,
                                 size_t needed) {
  const std::string text = model::read_prompt_file("text", path);
  const auto tok = model::prompt_tokenizer(tokenizer, weights);
  std::vector<int32_t> ids = tok->encode(text, true);
  if (ids.size() < needed)
    throw InputError(fmt::format("text: {} is {} tokens with {}, the decode needs prompt + new_tokens = {}", path, ids.size(),
                                 tok->name(), needed));
  ids.resize(needed);
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw InputError(
          fmt::format("text: {} gives token id {} with {}, past the model's vocabulary of {}", path, id, tok->name(), vocab));
  return ids;
}

}  // namespace

std::string engine_decode_unsupported(const EngineDecodeOptions& o) {
  const int64_t context = o.context();
  if (const auto c = model::preset(o.model); c && context > c->max_positions)
    return fmt::format("a {}-token decode exceeds {}'s {} positions", context, c->name, c->max_positions);
  return {};
}

ReferenceDecode reference_decode(const EngineDecodeOptions& o, uint64_t seed) {
  ReferenceDecode r;
  model::ModelChoice m = model::choose_model(o.model, o.weights, seed);
  r.config = m.config;
  r.prompt = static_cast<int>(o.prompt);
  r.new_tokens = static_cast<int>(o.new_tokens);
  if (r.context() > r.config.max_positions)
    throw InputError(
        fmt::format("a {}-token decode exceeds {}'s {} positions", r.context(), r.config.name, r.config.max_positions));
  r.model = model::make_cpu_model(r.config, *m.weights);
  r.scored = o.text != "random";
  if (r.scored) {
    r.text_source = o.text;
    r.tokens = text_tokens(o.text, o.tokenizer, o.weights, r.config.vocab, static_cast<size_t>(r.context()));
  } else {
    r.tokens = model::random_prompt(r.config.vocab, r.prompt, seed + 17);
    r.tokens.resize(static_cast<size_t>(r.context()));
  }
  r.first_token_mass.assign(static_cast<size_t>(r.config.layers), 0.0);
  r.first4_mass.assign(static_cast<size_t>(r.config.layers), 0.0);
  r.logits.assign(static_cast<size_t>(r.new_tokens) * r.vocab(), 0.0f);
  r.attn.assign(static_cast<size_t>(r.new_tokens) * r.attn_size(), 0.0f);
  const int seq = r.model->new_sequence(r.context());
  model::KvEvictionStudy& study = model::kv_eviction(*r.model);
  study.record_attention(seq, true);
  const size_t V = r.vocab(), A = r.attn_size();
  for (int t = 0; t + 1 < r.context(); ++t) {
    const int i = t - (r.prompt - 1);
    model::StepOutput out;
    if (i >= 0) out.logits = &r.logits[static_cast<size_t>(i) * V];
    r.model->decode(&seq, &r.tokens[static_cast<size_t>(t)], 1, out);
    if (i < 0) continue;
    const model::AttentionRecord& record = study.attention_record(seq);
    std::copy(record.output.begin(), record.output.end(),
              r.attn.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * A));
    // kv_head_weights is [layers][kv_heads][t + 1], each row summed over its group's query heads.
    const size_t n = static_cast<size_t>(t) + 1, H = static_cast<size_t>(r.config.kv_heads);
    for (size_t l = 0; l < static_cast<size_t>(r.config.layers); ++l)
      for (size_t h = 0; h < H; ++h) {
        const float* w = record.kv_head_weights.data() + (l * H + h) * n;
        r.first_token_mass[l] += w[0] / r.config.heads / r.new_tokens;
        for (size_t q = 0; q < std::min<size_t>(4, n); ++q) r.first4_mass[l] += w[q] / r.config.heads / r.new_tokens;
      }
    if (r.scored) continue;  // the text's next token, not the reference's own choice
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
  model::KvEvictionStudy& study = model::kv_eviction(*ref.model);
  study.record_attention(seq, true);
  for (int t = 0; t + 1 < ref.context(); ++t) {
    if (before) before(seq, t);
    const int i = t - (ref.prompt - 1);
    model::StepOutput out;
    if (i >= 0) out.logits = &logits[static_cast<size_t>(i) * V];
    ref.model->decode(&seq, &ref.tokens[static_cast<size_t>(t)], 1, out);
    const model::AttentionRecord& rec = study.attention_record(seq);
    if (after) after(seq, t, rec);
    if (i >= 0)
      std::copy(rec.output.begin(), rec.output.end(), attn.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * A));
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
  if (ref.scored) {
    c.scored = true;
    c.ppl = text_perplexity(ref, logits);
    c.ref_ppl = text_perplexity(ref, ref.logits);
  }
  return c;
}

double text_perplexity(const ReferenceDecode& ref, const std::vector<float>& logits) {
  const size_t V = ref.vocab();
  double nll = 0;
  for (int i = 0; i < ref.new_tokens; ++i) {
    // Step i decodes token prompt - 1 + i; its logits predict token prompt + i.
    const float* l = &logits[static_cast<size_t>(i) * V];
    const double top = *std::max_element(l, l + V);
    double z = 0;
    for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(l[v]) - top);
    nll += std::log(z) + top - l[static_cast<size_t>(ref.tokens[static_cast<size_t>(ref.prompt + i)])];
  }
  return std::exp(nll / ref.new_tokens);
}

std::string first_token_note(const ReferenceDecode& ref) {
  std::string one, four;
  for (size_t l = 0; l < ref.first_token_mass.size(); ++l) {
    one += fmt::format(" {:.1f}%", 100 * ref.first_token_mass[l]);
    four += fmt::format(" {:.1f}%", 100 * ref.first4_mass[l]);
  }
  return fmt::format(
      "full attention's mass on the first token, by layer:{}; on the first 4:{} (uniform over the context: {:.1f}%)", one, four,
      100.0 * 4 / (ref.prompt + ref.new_tokens / 2.0));
}

}  // namespace ib::kvcache
