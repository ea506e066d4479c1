// The `specdec` kind's keys, declared once as a typed parameter set (core/params.h): every variant
// reads a point into SpecdecKeys; the keys a variant lists (its VariantDecl) are the ones it uses.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/params.h"
#include "core/registry.h"
#include "model/model.h"
#include "model/text_prompt.h"

namespace ib::specdec {

enum class Acceptance { Controlled, Model };

struct SpecdecKeys {
  std::string target, draft;                  // presets, or checkpoint (draft: also self)
  std::string target_weights, draft_weights;  // random, or a checkpoint
  int64_t draft_layers = 0;                   // draft: self
  model::Matmul matmul = model::Matmul::Cublas;
  model::CpuMatmul cpu_matmul = model::CpuMatmul::Blas;
  int64_t k = 0;
  Acceptance acceptance = Acceptance::Controlled;
  double alpha = 0;
  int64_t prompt = 0, new_tokens = 0;
  std::string text;  // none, or a bundled text
  int64_t ngram_min = 0, ngram_max = 0;
  std::string tree;
  int64_t dynamic_nodes = 0, branches = 0, batch = 1;
  double temperature = 0;
  int64_t top_k = 0;
  double top_p = 1;
  int64_t lookahead_window = 0, lookahead_ngram = 0, lookahead_candidates = 0;
  bool lookahead_prompt = false;
  model::TextPromptSource prompts;

  bool bundled_text() const { return text != "none"; }
  bool sampled() const { return temperature > 0; }
};

const ParamSet<SpecdecKeys>& specdec_keys();

// Every value of the model, weights and prompt keys checked before a row runs (KindInfo::check).
std::optional<KeyProblem> check_specdec_keys(const SpecKeyValues& values);

// A variant's keys (its declaration): `own`, the keys every variant reads, and its backend's
// engine choice (matmul for CUDA, cpu_matmul for the CPU).
std::vector<std::string> specdec_reads(std::vector<std::string> own, Backend backend);

}  // namespace ib::specdec
