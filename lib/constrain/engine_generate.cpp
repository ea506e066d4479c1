// Kind `constrain-generate`: the transformer engine writing documents for a constraint, under the
// budget-aware token mask or free with parse-and-retry. The engine loop, its CPU variants and the
// kind; the CUDA variants register in cuda_constrain.cpp.
#include "constrain/engine_generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "constrain/generate.h"
#include "constrain/grammar_budget.h"
#include "constrain/grammar_generate.h"
#include "constrain/kind_setup.h"
#include "constrain/masked_argmax.h"
#include "model/text_prompt.h"
#include "core/errors.h"
#include "numerics/random.h"
#include "core/stats.h"
#include "model/checkpoint.h"
#include "model/model_choice.h"
#include "model/engine_keys.h"

namespace ib::constrain {

int32_t sample_masked(const float* logits, int32_t n, const uint32_t* mask, float temperature, float u,
                      std::vector<double>& scratch) {
  if (temperature <= 0.0f) return masked_argmax(logits, mask, n);
  auto allowed = [&](int32_t t) { return !mask || mask_allows(mask, t); };
  float top = -INFINITY;
  for (int32_t t = 0; t < n; ++t)
    if (allowed(t) && logits[t] > top) top = logits[t];         // NaN compares false: skipped
  if (top == -INFINITY) return masked_argmax(logits, mask, n);  // nothing finite: -1 or an allowed -inf
  scratch.assign(static_cast<size_t>(n), 0.0);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double sum = 0;
  for (int32_t t = 0; t < n; ++t)
    if (allowed(t) && !std::isnan(logits[t]))
      sum += scratch[static_cast<size_t>(t)] = std::exp((static_cast<double>(logits[t]) - top) * inv_t);
  // The token where u·sum falls in the cumulative weights, in index order; the last weighted
  // token when rounding leaves the target past the end.
  const double target = static_cast<double>(u) * sum;
  double cum = 0;
  int32_t last = -1;
  for (int32_t t = 0; t < n; ++t) {
    const double w = scratch[static_cast<size_t>(t)];
    if (w <= 0) continue;
    last = t;
    cum += w;
    if (cum > target) return t;
  }
  return last;
}

BudgetedConstraint::BudgetedConstraint(std::shared_ptr<const Dfa> d, const Vocabulary* vocab) : dfa(std::move(d)) {
  if (vocab) {
    const auto usable = single_byte_tokens(*vocab);
    dist = distance_to_accept(*dfa, &usable);
  } else {
    dist = distance_to_accept(*dfa);
  }
  const size_t n = static_cast<size_t>(dfa->num_states), k = static_cast<size_t>(dfa->num_classes);
  done.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    max_dist = dist[s] < 0 ? std::numeric_limits<int32_t>::max() : std::max(max_dist, dist[s]);
    bool continues = false;
    for (size_t c = 0; c < k && !continues; ++c) continues = dfa->next[s * k + c] >= 0;
    done[s] = dfa->accepting[s] && !continues;
  }
}

void budget_mask(const BudgetedConstraint& c, const Vocabulary& vocab, int32_t state, const uint32_t* mask, int left,
                 uint32_t* out) {
  const size_t words = (static_cast<size_t>(vocab.size()) + 31) / 32;
  for (size_t w = 0; w < words; ++w) {
    uint32_t keep = 0;
    for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
      const int bit = __builtin_ctz(bits);
      const int32_t t = static_cast<int32_t>(w * 32 + static_cast<size_t>(bit));
      bool ok;
      if (t == vocab.eos) {
        ok = true;  // the state's mask holds EOS only where it accepts
      } else {
        const int32_t next = advance(*c.dfa, vocab, state, t);
        ok = next >= 0 && c.dist[static_cast<size_t>(next)] >= 0 && c.dist[static_cast<size_t>(next)] <= left - 2;
      }
      if (ok) keep |= 1u << bit;
    }
    out[w] = keep;
  }
}

BudgetMasker::BudgetMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : c_(dfa, vocab.get()), vocab_(vocab), masker_(dfa, vocab), step_(masker_.words()) {}

const uint32_t* BudgetMasker::mask(int32_t state, int left) {
  const uint32_t* m = masker_.mask(state);
  if (left - 2 >= c_.max_dist) return m;  // no state is that far: the budget cannot bind
  auto it = reach_.find(state);
  if (it == reach_.end()) {
    int32_t reach = 0;
    for (size_t w = 0; w < masker_.words(); ++w)
      for (uint32_t bits = m[w]; bits; bits &= bits - 1) {
        const int32_t t = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        if (t == vocab_->eos) continue;
        const int32_t next = advance(*c_.dfa, *vocab_, state, t);
        if (next >= 0)
          reach = c_.dist[static_cast<size_t>(next)] < 0 ? std::numeric_limits<int32_t>::max()
                                                         : std::max(reach, c_.dist[static_cast<size_t>(next)]);
      }
    it = reach_.emplace(state, reach).first;
  }
  if (left - 2 >= it->second) return m;
  budget_mask(c_, *vocab_, state, m, left, step_.data());
  return step_.data();
}

BudgetedMasks::BudgetedMasks(const CompiledConstraint& c, std::shared_ptr<const Vocabulary> vocab) : vocab_(std::move(vocab)) {
  if (c.grammar)
    grammar_ = std::make_unique<GrammarBudgetMasker>(c.grammar, vocab_);
  else
    dfa_ = std::make_unique<BudgetMasker>(c.dfa, vocab_);
}

int32_t BudgetedMasks::min_tokens() const { return grammar_ ? grammar_->min_tokens() : dfa_->constraint().min_tokens(); }

std::string BudgetedMasks::guarantee_problem() const {
  return grammar_ ? grammar_->guarantee_problem() : budget_guarantee_problem(dfa_->constraint());
}

std::unique_ptr<DocumentCursor> BudgetedMasks::cursor() {
  if (grammar_) return std::make_unique<GrammarCursor>(*grammar_, vocab_);
  return std::make_unique<DfaCursor>(*dfa_, vocab_);
}

bool DfaCursor::complete_at_start() const {
  return masker_.constraint().done[static_cast<size_t>(masker_.constraint().dfa->start)] != 0;
}

bool DfaCursor::accept(int32_t token) {
  state_ = advance(*masker_.constraint().dfa, *vocab_, state_, token);
  if (state_ < 0) throw std::logic_error(fmt::format("constrained generation: token {} left the language", token));
  return masker_.constraint().done[static_cast<size_t>(state_)] != 0;
}

std::string budget_guarantee_problem(const Vocabulary& vocab) {
  if (vocab.eos < 0) return "the vocabulary has no EOS token";
  return {};
}

std::string budget_guarantee_problem(const BudgetedConstraint& c) {
  if (c.dist[static_cast<size_t>(c.dfa->start)] >= 0) return {};
  return distance_to_accept(*c.dfa)[static_cast<size_t>(c.dfa->start)] < 0
             ? "no document satisfies the constraint (its language is empty)"
             : "the vocabulary lacks single-byte tokens for every document's bytes (the token budget counts a token per byte)";
}

// ---- the engine loop ----

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

EngineWriter::EngineWriter(model::Model& model, std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> prompt,
                           int max_tokens, float temperature)
    : model_(model), vocab_(std::move(vocab)), prompt_(std::move(prompt)), max_tokens_(max_tokens), temperature_(temperature) {
  if (model_.config().vocab < vocab_->size())
    throw InputError(fmt::format("model {} has {} token ids, fewer than the {} tokens of vocab {}", model_.config().name,
                                 model_.config().vocab, vocab_->size(), vocab_->name));
  seq_ = model_.new_sequence(static_cast<int>(prompt_.size()) + max_tokens_);
  logits_.resize(static_cast<size_t>(model_.config().vocab));
}

EngineWriter::~EngineWriter() {
  if (seq_ >= 0) model_.release(seq_);
}

void EngineWriter::start() {
  model_.truncate(seq_, 0);
  model::StepOutput out;
  out.logits = logits_.data();
  model_.prefill(seq_, prompt_.data(), static_cast<int>(prompt_.size()), 1, out);
}

void EngineWriter::next_logits(int32_t token) {
  model::StepOutput out;
  out.logits = logits_.data();
  model_.decode(&seq_, &token, 1, out);
}

EngineDocument EngineWriter::constrained(DocumentCursor& cursor, uint64_t seed) {
  const Vocabulary& v = *vocab_;
  EngineDocument doc;
  cursor.restart();
  if (cursor.complete_at_start()) {  // the empty document is the only one
    doc.ended = true;
    return doc;
  }
  start();
  for (int left = max_tokens_; left > 0; --left) {
    auto t0 = std::chrono::steady_clock::now();
    const uint32_t* mask = cursor.mask(left);
    mask_seconds_ += seconds_since(t0);
    ++mask_steps_;
    const int32_t tok =
        sample_masked(logits_.data(), v.size(), mask, temperature_, model::sample_uniform(seed, doc.tokens.size(), 0), scratch_);
    if (tok < 0)
      throw std::logic_error(
          fmt::format("constrained generation: no token allowed after {} tokens with {} left", doc.tokens.size(), left));
    doc.tokens.push_back(tok);
    if (tok == v.eos) {
      doc.ended = true;
      break;
    }
    t0 = std::chrono::steady_clock::now();
    const bool complete = cursor.accept(tok);
    mask_seconds_ += seconds_since(t0);
    doc.text += v.token_bytes[static_cast<size_t>(tok)];
    if (complete) {  // nothing may follow: complete without EOS
      doc.ended = true;
      break;
    }
    if (left > 1) next_logits(tok);
  }
  return doc;
}

EngineDocument EngineWriter::unconstrained(uint64_t seed) {
  const Vocabulary& v = *vocab_;
  EngineDocument doc;
  start();
  for (int left = max_tokens_; left > 0; --left) {
    const int32_t tok = sample_masked(logits_.data(), v.size(), nullptr, temperature_,
                                      model::sample_uniform(seed, doc.tokens.size(), 0), scratch_);
    if (tok < 0) throw std::runtime_error("unconstrained generation: every logit is NaN");
    doc.tokens.push_back(tok);
    if (tok == v.eos) {
      doc.ended = true;
      break;
    }
    doc.text += v.token_bytes[static_cast<size_t>(tok)];
    if (left > 1) next_logits(tok);
  }
  return doc;
}

// ---- the variants ----

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
    try {
      Setup setup;
      setup.load(p, false);
      if (std::string why = budget_guarantee_problem(*setup.vocab); !why.empty()) return "vocab " + p.text("vocab") + ": " + why;
      const CompiledConstraint compiled = setup.compile(path_);
      if (path_ == SchemaPath::Grammar && !compiled.grammar)
        return "the grammar path is for JSON Schema constraints (" + setup.constraint + " is one DFA)";
      const BudgetedMasks masks(compiled, setup.vocab);
      if (std::string why = masks.guarantee_problem(); !why.empty()) return "vocab " + p.text("vocab") + ": " + why;
      const int32_t min_tokens = masks.min_tokens();
      const int64_t max_tokens = p.integer("max_tokens");
      if (max_tokens < min_tokens)
        return fmt::format("max_tokens {} is below the {} tokens the shortest document of {} needs ({} bytes, then EOS)",
                           max_tokens, min_tokens, setup.constraint, min_tokens - 1);
    } catch (const std::exception&) {
    }
    return {};
  }

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    setup_.load(p);
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
    documents_ = static_cast<int>(p.integer("documents"));
    retries_ = p.find("retries") ? static_cast<int>(p.integer("retries")) : 1;
    seed_ = seed;

    model::ModelChoice m = model::choose_model(p.text("model"), p.text("weights"), seed);
    if (backend_ == Backend::Cuda) {
      model::EngineOptions o;
      o.matmul = model::matmul_of(p);
      o.max_batch = 1;
      o.max_prefill = std::max<int>(static_cast<int>(p.integer("prompt")), 16);
      model_ = model::make_cuda_model(m.config, *m.weights, o, rt.stream());
    } else {
      model_ = model::make_cpu_model(m.config, *m.weights);
    }
    random_weights_ = m.weights->is_random();
    // The prompt: seeded ordinary tokens of the tokenizer, the same before every document.
    std::vector<int32_t> ordinary;
    for (int32_t t = 0; t < setup_.vocab->size(); ++t)
      if (!setup_.vocab->special[static_cast<size_t>(t)]) ordinary.push_back(t);
    std::vector<int32_t> prompt(static_cast<size_t>(p.integer("prompt")));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = ordinary[random_bits(seed + 29, i) % ordinary.size()];
    text_ = model::text_prompts(p, p.text("weights"), model_->config().vocab, "vocab");
    if (text_) prompt = text_->for_sequence(0);
    writer_ = std::make_unique<EngineWriter>(*model_, setup_.vocab, std::move(prompt), static_cast<int>(p.integer("max_tokens")),
                                             static_cast<float>(p.number("temperature")));
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
      out = fmt::format("grammar: {} rules, {} positions filtered by the budget", compiled_.grammar->compiled_rules,
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
  Setup setup_;
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
std::optional<KeyProblem> check_vocab_sizes(const std::map<std::string, std::vector<Value>>& values) {
  for (const Value& mv : values.at("model"))
    for (const Value& wv : values.at("weights")) {
      const std::string& name = std::get<std::string>(mv);
      const std::string& weights = std::get<std::string>(wv);
      int model_vocab = 0;
      if (name == "checkpoint") {
        if (weights == "random")
          return KeyProblem{{"weights", "model"}, "model checkpoint needs weights: DIR (a Hugging Face checkpoint directory)"};
        try {
          model_vocab = model::checkpoint_config(weights).vocab;
        } catch (const std::exception& e) {
          return KeyProblem{{"weights"}, e.what()};
        }
      } else {
        model_vocab = model::preset(name)->vocab;  // the key's choices are the presets
      }
      for (const Value& vv : values.at("vocab")) {
        const std::string& vocab = std::get<std::string>(vv);
        std::shared_ptr<const Vocabulary> v;
        try {
          v = load_vocabulary(vocab);
        } catch (const std::exception& e) {
          return KeyProblem{{"vocab"}, e.what()};
        }
        if (model_vocab < v->size()) {
          const std::string model = name == "checkpoint" ? weights : name;
          return KeyProblem{{name == "checkpoint" ? "weights" : "model", "vocab"},
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
  KindInfo k;
  k.name = "constrain-generate";
  k.smallest = "constraint: person\ndocuments: 1\nmax_tokens: 80\n";
  k.group = "constrain";
  k.doc =
      "The transformer engine (lib/model) writes `documents` documents for a constraint after a fixed prompt. Constrained: each "
      "step the engine's logits for the last token, masked by the DFA state's token mask (lazy, cached across documents; the "
      "*_grammar variants: the grammar's parse position's mask, a schema's rules on a stack) and "
      "a token budget (a token is allowed only if acceptance stays reachable in the tokens left, one token per byte, then "
      "EOS), then sampled on the host; EOS only where the state accepts; so every document ends valid within max_tokens. "
      "Unconstrained: the engine samples freely up to max_tokens (stopping at EOS), the text is parsed and validated, and "
      "retried up to `retries` times. Validity by an independent validator; a constrained row with any invalid document "
      "FAILS. With random weights (the default) the unmasked model essentially never writes a valid document. The model's "
      "vocabulary must cover the tokenizer's (ids past the tokenizer's are never chosen).";
  k.keys = constraint_keys("llama2");
  for (KeySpec ks : {model::model_key("deep-narrow"), model::weights_key(), model::matmul_key()}) k.keys.push_back(ks);
  k.keys.push_back(key_spec(
      "prompt", ParamType::Int,
      "prompt tokens before every document: seeded random ordinary tokens of the vocabulary, the same for every document",
      Value(int64_t{8}), 1.0, 1024.0));
  // A text prompt instead of the random one, tokenized with `vocab` (the constraint's tokenizer).
  for (KeySpec ks : model::text_prompt_keys())
    if (ks.name != "tokenizer") k.keys.push_back(ks);
  k.keys.push_back(key_spec("max_tokens", ParamType::Int,
                            "tokens per attempt, EOS included (constrained: at least the shortest document's bytes + 1)",
                            Value(int64_t{256}), 1.0, 4096.0));
  k.keys.push_back(key_spec("temperature", ParamType::Float,
                            "0 = greedy (argmax of the allowed logits; retries repeat the same text); else sampling on the host, "
                            "seeded per document and attempt",
                            Value(1.0), 0.0));
  k.keys.push_back(key_spec("retries", ParamType::Int, "attempts per document without the mask", Value(int64_t{3}), 1.0, 100.0));
  k.keys.push_back(key_spec("documents", ParamType::Int, "documents per sample", Value(int64_t{8}), 1.0));
  k.check = [](const std::map<std::string, std::vector<Value>>& values) {
    if (auto problem = check_constraint_keys(values)) return problem;
    if (auto problem = model::check_model_weights(values)) return problem;
    if (auto problem = model::check_text_prompts(values, "weights", "vocab")) return problem;
    return check_vocab_sizes(values);
  };
  return k;
}

const KindRegistration registration(generate_kind());

// The masked variants do not retry; the CPU ones leave out `matmul` (the CPU engine has one
// matmul: a sweep over the key would repeat their rows).
std::vector<std::string> generate_reads(bool masked, Backend b) {
  static const std::vector<KeySpec> kind_keys = generate_kind().keys;
  std::vector<std::string> keys;
  for (const KeySpec& ks : kind_keys)
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
