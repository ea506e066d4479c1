// The `constrain-generate` kind (§8.5): the transformer engine (lib/model) writing documents for a
// constraint, under the budget-aware token mask or free with parse-and-retry (EngineWriter,
// constrain/engine_generate.h), on the CPU engine and the CUDA one.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "constrain/engine_generate.h"
#include "constrain/generate.h"
#include "constrain/grammar_generate.h"
#include "constrain/validity_check.h"
#include "core/registry.h"
#include "core/stats.h"
#include "core/stopwatch.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"
#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"
#include "model/checkpoint.h"
#include "model/model_choice.h"
#include "model/text_prompt.h"
#include "numerics/random.h"

namespace ib::constrain {
namespace {

struct Tally {
  int documents = 0, valid = 0;
  int64_t attempts = 0, tokens = 0, wasted_tokens = 0;
  // Per document its last attempt's text (the valid one, or the last refused), and whether valid.
  std::vector<std::pair<std::string, bool>> texts;
};

class EngineGenerateVariant : public Variant {
 public:
  // `path`: how a schema constraint compiles (the grammar variants: JSON Schema constraints only).
  EngineGenerateVariant(Backend backend, bool constrained, SchemaPath path = SchemaPath::Dfa)
      : backend_(backend), constrained_(constrained), path_(path) {}

  // Constrained: the budget's guarantee must hold (an EOS, a token per byte, max_tokens at least
  // the shortest document's tokens). Problems found here are left to prepare to report.
  std::string unsupported(const Point& p) const override {
    if (!constrained_) return {};
    const GenerateKeys k = generate_keys().read(p);
    try {
      ConstraintSetup setup;
      setup.load(k.constraint, false);
      if (std::string why = budget_guarantee_problem(*setup.vocab); !why.empty())
        return "vocab " + k.constraint.vocab + ": " + why;
      const CompiledConstraint compiled = setup.compile(path_);
      if (path_ == SchemaPath::Grammar && !compiled.grammar)
        return "the grammar path is for JSON Schema constraints (" + setup.constraint + " is one DFA)";
      const BudgetedMasks masks(compiled, setup.vocab);
      if (std::string why = masks.guarantee_problem(); !why.empty()) return "vocab " + k.constraint.vocab + ": " + why;
      const int32_t min_tokens = masks.min_tokens();
      const int64_t max_tokens = k.max_tokens;
      if (max_tokens < min_tokens)
        return fmt::format("max_tokens {} is below the {} tokens the shortest document of {} needs ({} bytes, then EOS)",
                           max_tokens, min_tokens, setup.constraint, min_tokens - 1);
    } catch (const std::exception&) {
    }
    return {};
  }

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const GenerateKeys k = generate_keys().read(p);
    setup_.load(k.constraint);
    compiled_ = setup_.compile(constrained_ ? path_ : SchemaPath::Dfa);
    if (compiled_.grammar)
      grammar_dist_ = grammar_distances(*compiled_.grammar);
    else
      constraint_ = std::make_unique<BudgetedConstraint>(compiled_.dfa);
    if (constrained_) {
      masks_ = std::make_unique<BudgetedMasks>(compiled_, setup_.vocab);
      cursor_ = masks_->cursor();
    }
    valid_ = validity_check(compiled_);
    documents_ = static_cast<int>(k.documents);
    retries_ = constrained_ ? 1 : static_cast<int>(k.retries);  // the masked variants do not read it
    seed_ = seed;

    model::ModelChoice m = model::choose_model(k.model, k.weights, seed);
    if (backend_ == Backend::Cuda) {
      model::EngineOptions o;
      o.matmul = k.matmul;
      o.max_batch = 1;
      o.max_prefill = std::max<int>(static_cast<int>(k.prompt), 16);
      model_ = model::make_cuda_model(m.config, *m.weights, o, rt.stream());
    } else {
      model_ = model::make_cpu_model(m.config, *m.weights);
    }
    random_weights_ = m.weights->is_random();
    // The prompt: seeded ordinary tokens of the tokenizer, the same before every document.
    std::vector<int32_t> ordinary;
    for (int32_t t = 0; t < setup_.vocab->size(); ++t)
      if (!setup_.vocab->special[static_cast<size_t>(t)]) ordinary.push_back(t);
    std::vector<int32_t> prompt(static_cast<size_t>(k.prompt));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = ordinary[random_bits(seed + 29, i) % ordinary.size()];
    model::TextPromptSource source = k.prompts;
    source.tokenizer = k.constraint.vocab;  // the prompt is tokenized as the documents are
    text_ = model::text_prompts(source, k.weights, model_->config().vocab);
    if (text_) prompt = text_->for_sequence(0);
    writer_ = std::make_unique<EngineWriter>(*model_, setup_.vocab, std::move(prompt), static_cast<int>(k.max_tokens),
                                             static_cast<float>(k.temperature));
  }

  // Constrained: every document valid by the independent validator (the claim under test).
  // Both: the validator accepts random documents of the language, so a low unconstrained rate is
  // the model's, not the oracle's.
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    std::mt19937_64 rng(seed_ + 17);
    int oracle_rejects = 0;
    for (int i = 0; i < 4; ++i)
      oracle_rejects +=
          !valid_(compiled_.grammar ? random_grammar_document(*compiled_.grammar, grammar_dist_, rng)
                                    : random_document(*compiled_.dfa, constraint_->dist, compiled_.dfa->start, rng));
    const int invalid = constrained_ ? last_.documents - last_.valid : 0;
    run_seconds_.clear();
    mask_us_.clear();
    mask_share_.clear();
    const std::string oracle = fmt::format("{}; the validator accepts {}/4 random documents of the language",
                                           random_weights_ ? "random weights" : "checkpoint weights", 4 - oracle_rejects);
    // Unconstrained rows gate the validator only: their check names what it counts.
    return {invalid + oracle_rejects == 0, constrained_ ? "invalid_documents" : "validator_rejects",
            static_cast<double>(invalid + oracle_rejects), 0,
            constrained_ ? fmt::format("{} engine documents under the mask, each checked by an independent validator; {}",
                                       last_.documents, oracle)
                         : oracle + " (the unmasked rate is measured, not gated)"};
  }

  // All documents, from the same random numbers every run (stable metrics).
  void run(BackendRuntime&) override {
    Tally t;
    const double mask0 = writer_->mask_seconds();
    const int64_t steps0 = writer_->mask_steps();
    const auto t0 = std::chrono::steady_clock::now();
    for (int d = 0; d < documents_; ++d) {
      ++t.documents;
      t.texts.emplace_back(std::string(), false);
      for (int a = 0; a < (constrained_ ? 1 : retries_); ++a) {
        const uint64_t seed = random_bits(seed_ ^ 0x5EEDC0DEull, static_cast<uint64_t>(d) * 4096 + static_cast<uint64_t>(a));
        const EngineDocument doc = constrained_ ? writer_->constrained(*cursor_, seed) : writer_->unconstrained(seed);
        ++t.attempts;
        const int64_t n = static_cast<int64_t>(doc.tokens.size());
        t.tokens += n;
        t.texts.back().first = doc.text;
        // Unconstrained, a text cut at max_tokens counts when it validates: a client cannot tell.
        if ((doc.ended || !constrained_) && valid_(doc.text)) {
          ++t.valid;
          t.texts.back().second = true;
          break;
        }
        t.wasted_tokens += n;
      }
    }
    const double secs = seconds_since(t0);
    last_ = t;
    run_seconds_.push_back(secs);
    const double mask = writer_->mask_seconds() - mask0;
    const int64_t steps = writer_->mask_steps() - steps0;
    if (steps > 0) mask_us_.push_back(mask * 1e6 / static_cast<double>(steps));
    if (secs > 0) mask_share_.push_back(100.0 * mask / secs);
  }

  std::string note() const override {
    std::string out;
    if (compiled_.grammar)
      out = fmt::format("grammar: {} rules, {} positions filtered by the budget", compiled_.grammar->reachable_rules(),
                        masks_->grammar()->filtered_steps());
    if (!text_) return out;
    return (out.empty() ? "" : out + "; ") + fmt::format("prompt '{}' ({} tokens, {})", model::short_text(text_->texts[0]),
                                                         text_->tokens[0].size(), text_->tokenizer->name());
  }
  // The prompt (when a text) and the documents of the last measured run, each marked valid or not.
  std::vector<std::pair<std::string, std::string>> texts() const override {
    std::vector<std::pair<std::string, std::string>> out;
    if (text_) out.emplace_back("prompt", text_->texts[0]);
    for (size_t d = 0; d < last_.texts.size(); ++d)
      out.emplace_back(fmt::format("document {} ({})", d + 1, last_.texts[d].second ? "valid" : "invalid"), last_.texts[d].first);
    return out;
  }

  std::vector<Metric> metrics() const override {
    const double docs = std::max(1, last_.documents);
    const double secs = run_seconds_.empty() ? 0 : summarize(run_seconds_).median;
    std::vector<Metric> m = {{"valid", 100.0 * last_.valid / docs, "%"},
                             {"attempts_per_doc", static_cast<double>(last_.attempts) / docs, ""},
                             {"tokens_per_doc", static_cast<double>(last_.tokens) / docs, ""},
                             {"wasted_tokens_per_doc", static_cast<double>(last_.wasted_tokens) / docs, ""},
                             {"ms_per_doc", secs * 1e3 / docs, "ms"},
                             {"ms_per_token", secs * 1e3 / static_cast<double>(std::max<int64_t>(1, last_.tokens)), "ms"}};
    if (constrained_ && !mask_us_.empty()) {
      m.push_back({"mask_per_step", summarize(mask_us_).median, "us"});
      m.push_back({"mask_share", summarize(mask_share_).median, "%"});
    }
    return m;
  }

 private:
  Backend backend_;
  bool constrained_;
  SchemaPath path_;
  ConstraintSetup setup_;
  CompiledConstraint compiled_;
  std::unique_ptr<BudgetedConstraint> constraint_;  // distances, for the oracle's sanity documents
  GrammarDistances grammar_dist_;                   // the same on the grammar path
  std::unique_ptr<BudgetedMasks> masks_;            // constrained: the masks its documents share
  std::unique_ptr<DocumentCursor> cursor_;
  std::function<bool(const std::string&)> valid_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<EngineWriter> writer_;
  int documents_ = 1, retries_ = 1;
  uint64_t seed_ = 0;
  bool random_weights_ = true;
  std::optional<model::TextPrompts> text_;  // a text prompt in place of the random one
  Tally last_;
  std::vector<double> run_seconds_, mask_us_, mask_share_;
};

// Spec-time check: the engine's vocabulary must cover the tokenizer's. A smaller one could not
// write some tokens (the single-byte ones the budget relies on among them), and its ids would
// not be the tokenizer's; a larger one (padded vocabularies) is fine: the extra ids are never chosen.
std::optional<KeyProblem> check_vocab_sizes(const KeyValues<std::string>& models, const KeyValues<std::string>& weights_values,
                                            const KeyValues<std::string>& vocabs) {
  for (const std::string& name : models.values)
    for (const std::string& weights : weights_values.values) {
      int model_vocab = 0;
      if (name == "checkpoint") {
        if (weights == "random")
          return KeyProblem{
              {weights_values.key, models.key},
              fmt::format("{} checkpoint needs {}: DIR (a Hugging Face checkpoint directory)", models.key, weights_values.key)};
        try {
          model_vocab = model::checkpoint_config(weights).vocab;
        } catch (const std::exception& e) {
          return KeyProblem{{weights_values.key}, e.what()};
        }
      } else {
        model_vocab = model::preset(name)->vocab;  // the key's choices are the presets
      }
      for (const std::string& vocab : vocabs.values) {
        std::shared_ptr<const Vocabulary> v;
        try {
          v = load_vocabulary(vocab);
        } catch (const std::exception& e) {
          return KeyProblem{{vocabs.key}, e.what()};
        }
        if (model_vocab < v->size()) {
          const std::string model = name == "checkpoint" ? weights : name;
          return KeyProblem{{name == "checkpoint" ? weights_values.key : models.key, vocabs.key},
                            fmt::format("model '{}' has {} token ids, fewer than the {} tokens of vocab '{}': it could not write "
                                        "every token the mask allows; use a model whose vocabulary covers it (deep-narrow and "
                                        "llama2-7b have llama2's 32000)",
                                        model, model_vocab, v->size(), vocab)};
        }
      }
    }
  return std::nullopt;
}

KindInfo generate_kind() {
  KindInfo k = constrain_kind(
      "constrain-generate",
      "The transformer engine (lib/model) writes `documents` documents for a constraint after a fixed prompt. Constrained: each "
      "step the engine's logits for the last token, masked by the DFA state's token mask (lazy, cached across documents; the "
      "*_grammar variants: the grammar's parse position's mask, a schema's rules on a stack) and "
      "a token budget (a token is allowed only if acceptance stays reachable in the tokens left, one token per byte, then "
      "EOS), then sampled on the host; EOS only where the state accepts; so every document ends valid within max_tokens. "
      "Unconstrained: the engine samples freely up to max_tokens (stopping at EOS), the text is parsed and validated, and "
      "retried up to `retries` times. Validity by an independent validator; a constrained row with any invalid document "
      "FAILS. With random weights (the default) the unmasked model essentially never writes a valid document. The model's "
      "vocabulary must cover the tokenizer's (ids past the tokenizer's are never chosen).",
      generate_keys().keys(), "constraint: person\ndocuments: 1\nmax_tokens: 80\n");
  k.check = [](const SpecKeyValues& values) {
    if (auto problem = check_constraint_keys(values)) return problem;
    const SpecValues<GenerateKeys> v(generate_keys(), values);
    const auto models = v.field(&GenerateKeys::model), weights = v.field(&GenerateKeys::weights),
               vocabs = v.field([](const GenerateKeys&g) -> const auto& { return g.constraint.vocab; });
    if (auto problem = model::check_model_weights(models, weights)) return problem;
    if (auto problem = model::check_text_prompts(values, vocabs, weights, models)) return problem;
    return check_vocab_sizes(models, weights, vocabs);
  };
  return k;
}

const KindRegistration registration(generate_kind());

// The masked variants do not retry; the CPU ones leave out `matmul` (the CPU engine has one
// matmul: a sweep over the key would repeat their rows).
std::vector<std::string> generate_reads(bool masked, Backend b) {
  std::vector<std::string> keys;
  for (const KeySpec& ks : generate_keys().keys())
    if (!(masked && ks.name == "retries") && !(b == Backend::Cpu && ks.name == "matmul")) keys.push_back(ks.name);
  return keys;
}

// The CUDA engine's where it is built (its logits returned to the host each step).
const VariantListRegistration generate_variants(
    "constrain-generate",
    {{{"cpu_constrained", Backend::Cpu,
       "the CPU engine's logits under the budget-aware token mask, sampled; every document must be valid",
       generate_reads(true, Backend::Cpu)},
      make_variant<EngineGenerateVariant>(Backend::Cpu, true)},
     {{"cpu_constrained_grammar", Backend::Cpu,
       "cpu_constrained with the schema on the grammar path (rules on a stack, the grammar's token budget)",
       generate_reads(true, Backend::Cpu)},
      make_variant<EngineGenerateVariant>(Backend::Cpu, true, SchemaPath::Grammar)},
     {{"cpu_unconstrained_retry", Backend::Cpu, "the CPU engine sampling freely; parse, validate, retry",
       generate_reads(false, Backend::Cpu)},
      make_variant<EngineGenerateVariant>(Backend::Cpu, false)},
     {{"constrained", Backend::Cuda,
       "the CUDA engine, each step's logits returned to the host (StepOutput.logits), masked and sampled there",
       generate_reads(true, Backend::Cuda)},
      IB_IF_CUDA(make_variant<EngineGenerateVariant>(Backend::Cuda, true))},
     {{"constrained_grammar", Backend::Cuda, "constrained with the schema on the grammar path (the host's part)",
       generate_reads(true, Backend::Cuda)},
      IB_IF_CUDA(make_variant<EngineGenerateVariant>(Backend::Cuda, true, SchemaPath::Grammar))},
     {{"unconstrained_retry", Backend::Cuda,
       "the CUDA engine, logits returned to the host and sampled there unmasked; parse, validate, retry",
       generate_reads(false, Backend::Cuda)},
      IB_IF_CUDA(make_variant<EngineGenerateVariant>(Backend::Cuda, false))}});

}  // namespace
}  // namespace ib::constrain
