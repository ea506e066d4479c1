#include "kinds/specdec/specdec_keys.h"

#include <utility>

#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"
#include "model/model_choice.h"
#include "specdec/texts.h"

namespace ib::specdec {
namespace {

std::vector<std::string> tree_shapes() {
  return {"1x1x1",     "3x2x1",     "1x1x1x1x1", "2x1x1x1x1", "3x1x1x1x1",       "2x2x1x1x1",
          "3x2x1x1x1", "4x2x1x1x1", "3x3x1x1x1", "4x3x2x1x1", "1x1x1x1x1x1x1x1", "3x2x1x1x1x1x1x1"};
}

ParamSet<SpecdecKeys> make_specdec_keys() {
  using K = SpecdecKeys;
  std::vector<std::string> texts = text_names();
  texts.insert(texts.begin(), "none");
  std::vector<std::string> models = model::preset_names();
  models.push_back("checkpoint");
  std::vector<std::string> drafts = models;
  drafts.push_back("self");
  const std::string checkpoint_doc = "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)";
  ParamSet<K> s;
  s.add(&K::target,
        enum_key("target", "target model preset (random weights unless target_weights), or checkpoint (target_weights: DIR)",
                 "qwen2-7b", models))
      .add(&K::draft, enum_key("draft",
                               "draft model preset (random weights unless draft_weights), checkpoint (draft_weights: DIR), or "
                               "self (the target's first draft_layers layers and its LM head: self-speculative early exit, "
                               "Draft & Verify / LayerSkip)",
                               "qwen2-0.5b", drafts))
      .add(&K::draft_layers, key_spec("draft_layers", ParamType::Int,
                                      "draft: self — how many of the target's layers the draft runs", Value(int64_t{0}), 0.0))
      .add(&K::target_weights, key_spec("target_weights", ParamType::String, checkpoint_doc, Value(std::string("random"))))
      .add(&K::draft_weights, key_spec("draft_weights", ParamType::String, checkpoint_doc, Value(std::string("random"))))
      // A verify pass of k + 1 <= 8 rows and the draft's steps are the GEMV's shapes (bigger passes,
      // most trees and batches, stay on cuBLAS).
      .add(&K::matmul, model::matmul_key("CUDA target and draft engines'"), model::parse_matmul)
      .add(&K::cpu_matmul, model::cpu_matmul_key(), model::parse_cpu_matmul)
      .add(&K::k, key_spec("k", ParamType::Int, "tokens drafted per step", Value(int64_t{5}), 1.0, 16.0))
      .add(&K::acceptance,
           enum_key("acceptance", "draft_model: controlled (alpha) or model (the draft's own agreement)", "controlled",
                    {"controlled", "model"}),
           [](const std::string& a) { return a == "model" ? Acceptance::Model : Acceptance::Controlled; })
      .add(&K::alpha, key_spec("alpha", ParamType::Float, "controlled acceptance: probability a drafted token is the target's",
                               Value(0.8), 0.0, 1.0))
      .add(&K::prompt,
           key_spec("prompt", ParamType::Int, "prompt tokens (random; a text brings its own)", Value(int64_t{128}), 2.0))
      .add(&K::new_tokens, key_spec("new_tokens", ParamType::Int, "tokens generated per run", Value(int64_t{64}), 2.0))
      .add(&K::text, enum_key("text", "none, or a bundled text whose continuation is the target trajectory (n-gram drafting)",
                              "none", texts))
      .add(&K::ngram_min, key_spec("ngram_min", ParamType::Int, "shortest n-gram looked up", Value(int64_t{1}), 1.0))
      .add(&K::ngram_max, key_spec("ngram_max", ParamType::Int, "longest n-gram looked up", Value(int64_t{3}), 1.0))
      .add(&K::tree,
           enum_key("tree", "draft_tree: children per node at each depth (the draft's top choices); 1x1x1x1x1 is a chain of 5",
                    "3x2x1x1x1", tree_shapes()))
      .add(
          &K::dynamic_nodes,
          key_spec("dynamic_nodes", ParamType::Int,
                   "draft_tree: 0 = the static shape; N > 0 = an EAGLE-2 dynamic tree of the N nodes the draft is most confident "
                   "of (path probability), the shape's depth, each depth expanding its first width's most confident nodes",
                   Value(int64_t{0}), 0.0, 256.0))
      .add(&K::branches,
           key_spec("branches", ParamType::Int, "ngram_tree: earlier occurrences whose continuations are verified together",
                    Value(int64_t{4}), 1.0, 16.0))
      .add(&K::batch, key_spec("batch", ParamType::Int,
                               "autoregressive and draft_model: sequences decoded together (greedy, or sampled with acceptance: "
                               "model); a batched step verifies every sequence's drafts in one target pass",
                               Value(int64_t{1}), 1.0, 256.0))
      .add(&K::temperature,
           key_spec("temperature", ParamType::Float,
                    "0: greedy verification; > 0: sampling, verified by rejection sampling (acceptance: model or n-gram)",
                    Value(0.0), 0.0))
      .add(&K::top_k,
           key_spec("top_k", ParamType::Int, "sampling: keep the k most likely tokens (0: all)", Value(int64_t{0}), 0.0))
      .add(&K::top_p, key_spec("top_p", ParamType::Float, "sampling: keep the smallest set whose mass reaches p (1: all)",
                               Value(1.0), 0.0, 1.0))
      .add(&K::lookahead_window, key_spec("lookahead_window", ParamType::Int, "lookahead: W, columns of the Jacobi window",
                                          Value(int64_t{5}), 1.0, 64.0))
      .add(&K::lookahead_ngram,
           key_spec("lookahead_ngram", ParamType::Int, "lookahead: N, the n-gram size (the window has N − 1 levels)",
                    Value(int64_t{4}), 2.0, 16.0))
      .add(&K::lookahead_candidates,
           key_spec("lookahead_candidates", ParamType::Int,
                    "lookahead: G, pool n-grams starting with the last token verified per step", Value(int64_t{5}), 0.0, 64.0))
      .add(&K::lookahead_prompt,
           key_spec("lookahead_prompt", ParamType::Bool,
                    "lookahead: also pool the n-grams of the prompt and of the output so far (prompt lookup inside lookahead)",
                    Value(false)))
      .add_group(&K::prompts, kinds::text_prompt_params());
  return s;
}

}  // namespace

const ParamSet<SpecdecKeys>& specdec_keys() {
  static const ParamSet<SpecdecKeys> set = make_specdec_keys();
  return set;
}

std::optional<KeyProblem> check_specdec_keys(const SpecKeyValues& values) {
  const SpecValues<SpecdecKeys> v(specdec_keys(), values);
  const auto target = v.field(&SpecdecKeys::target), target_weights = v.field(&SpecdecKeys::target_weights);
  if (auto problem = model::check_model_weights(target, target_weights)) return problem;
  if (auto problem = model::check_model_weights(v.field(&SpecdecKeys::draft), v.field(&SpecdecKeys::draft_weights)))
    return problem;
  // tokenizer auto: the target's tokenizer.json
  return model::check_text_prompts(values, v.field([](const SpecdecKeys& x) -> const auto& { return x.prompts.tokenizer; }),
                                   target_weights, target);
}

std::vector<std::string> specdec_reads(std::vector<std::string> own, Backend backend) {
  for (const char* key : {"target", "target_weights", "prompt", "new_tokens", "text", "temperature", "top_k", "top_p"})
    own.push_back(key);
  for (const auto& key : kinds::text_prompt_params().names()) own.push_back(key);
  return backend == Backend::Cuda ? model::with_matmul(std::move(own)) : model::with_cpu_matmul(std::move(own));
}

}  // namespace ib::specdec
