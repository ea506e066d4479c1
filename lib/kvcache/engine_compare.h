// Comparing a modified KV cache with the full-precision one on the transformer engine: the
// reference decode (a random prompt, then the float32 cache's greedy continuation, one token at a
// time; or the tokens of a real text, `text: FILE`), a teacher-forced decode of the same tokens on
// a sequence with the modification, and what the modification costs: KL(reference ‖ modified) of
// the next-token distribution, top-1 agreement, the relative L2 error of every layer's attention
// output and, on a text, the perplexity of its measured tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/engine_studies.h"
#include "model/model.h"

namespace ib::kvcache {

// The decode a comparison runs: the model (a preset, or checkpoint) and its weights (random, or a
// checkpoint directory), prompt + new_tokens tokens, and the text ("random": a random prompt and
// the reference's greedy continuation; else a text file whose tokens, through `tokenizer`, are
// decoded and scored).
struct EngineDecodeOptions {
  std::string model = "tiny", weights = "random";
  int64_t prompt = 0, new_tokens = 0;
  std::string text = "random", tokenizer = "auto";
  int64_t context() const { return prompt + new_tokens; }
};
// Why the decode does not fit the preset's positions ("" when it does).
std::string engine_decode_unsupported(const EngineDecodeOptions& o);

struct ReferenceDecode {
  model::ModelConfig config;
  std::unique_ptr<model::Model> model;  // the CPU engine, reused by the modified decodes
  int prompt = 0, new_tokens = 0;
  std::vector<int32_t> tokens;  // prompt + new_tokens: the prompt, then the reference's greedy tokens (or the text's)
  bool scored = false;          // tokens are a real text's: the measured steps are scored (perplexity)
  std::string text_source;      // the text file, when scored
  std::vector<float> logits;    // [new_tokens][vocab] of the measured steps
  std::vector<float> attn;      // [new_tokens][layers·q_dim]
  // Per layer, over the measured steps: the attention mass (mean over query heads) on the first
  // token and on the first 4 (StreamingLLM's attention sinks, when the model has learned them).
  std::vector<double> first_token_mass, first4_mass;
  int context() const { return prompt + new_tokens; }
  size_t vocab() const { return static_cast<size_t>(config.vocab); }
  size_t attn_size() const { return static_cast<size_t>(config.layers) * static_cast<size_t>(config.q_dim()); }
};
ReferenceDecode reference_decode(const EngineDecodeOptions& o, uint64_t seed);

// One teacher-forced decode of ref.tokens on a new sequence of ref.model: `before(seq, t)` runs
// before token t is decoded, `after(seq, t, record)` after it (the attention record of that
// step). The measured steps' logits and attention outputs go to `logits` / `attn` (resized).
void teacher_forced_decode(ReferenceDecode& ref, std::vector<float>& logits, std::vector<float>& attn,
                           const std::function<void(int seq, int t)>& before,
                           const std::function<void(int seq, int t, const model::AttentionRecord&)>& after);

// KL(p ‖ q) of the softmax distributions of two logit rows.
double kl_divergence(const float* p_logits, const float* q_logits, int n);

struct DecodeComparison {
  double kl_mean = 0, kl_worst = 0, top1_agree = 0, attn_err = 0;
  bool scored = false;
  double ppl = 0, ref_ppl = 0;  // when scored: perplexity of the text's measured tokens, modified and reference
};
// Perplexity of the text's measured tokens under a decode's logits (ref.scored).
double text_perplexity(const ReferenceDecode& ref, const std::vector<float>& logits);
// "attention on the first token by layer: 3% 41% …; first 4: …" (ref.first_token_mass).
std::string first_token_note(const ReferenceDecode& ref);
DecodeComparison compare_decode(const ReferenceDecode& ref, const std::vector<float>& logits, const std::vector<float>& attn);

}  // namespace ib::kvcache
