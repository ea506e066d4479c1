// The grammar path (grammar.h, schema_to_grammar) in the `constrain-compile` and `constrain-mask`
// kinds: variant `grammar` beside the whole-schema DFA's precomputed and lazy ones. Its masks are
// built on first use (per rule state, and per parse position), so a compile's row says the first
// mask's cost apart; the mask rows start cold every sample, as `lazy` does.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "constrain/constrain_kinds_internal.h"
#include "constrain/constraint.h"
#include "constrain/grammar_generate.h"
#include "constrain/grammar_mask.h"
#include "constrain/kind_setup.h"
#include "core/memory.h"
#include "core/registry.h"
#include "core/stats.h"
#include "numerics/random.h"

namespace ib::constrain {
namespace {

using detail::host;
using detail::key_names;
using detail::mask_kind_keys;

std::string schema_only(const Point& p) {
  const std::string c = p.text("constraint");
  if (c.rfind("regex:", 0) == 0 || c.rfind("choice:", 0) == 0)
    return "the grammar path is for JSON Schema constraints (" + c + " is one DFA)";
  return {};
}

// Random documents of the grammar, tokenised greedily (every one a token sequence the masks allow).
std::vector<std::vector<int32_t>> grammar_documents(const Grammar& g, const Setup& setup, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const GrammarDistances d = grammar_distances(g);
  std::vector<std::vector<int32_t>> docs;
  for (int64_t i = 0; i < n; ++i)
    docs.push_back(grammar_tokenize_greedy(g, *setup.vocab, *setup.trie, random_grammar_document(g, d, rng)));
  return docs;
}

// Masks at the positions along a few random documents, each checked against stepping every token.
size_t grammar_mask_mismatches(GrammarTokenMasker& m, const Setup& setup, uint64_t seed) {
  const Grammar& g = m.grammar();
  const Vocabulary& v = *setup.vocab;
  size_t bad = 0;
  for (const auto& doc : grammar_documents(g, setup, 2, seed)) {
    GrammarStacks at = grammar_start(g);
    for (size_t i = 0; i <= doc.size(); i += 3) {
      const uint32_t* mask = m.mask(at);
      for (int32_t t = 0; t < v.size(); ++t) {
        const bool want = t == v.eos ? grammar_accepts(g, at) : !grammar_advance(g, v, at, t).empty();
        bad += mask_allows(mask, t) != want;
      }
      for (size_t k = i; k < std::min(i + 3, doc.size()); ++k) at = grammar_advance(g, v, at, doc[k]);
      if (at.empty()) return bad + 1;
    }
  }
  return bad;
}

class CompileGrammar : public Variant {
 public:
  std::string unsupported(const Point& p) const override { return schema_only(p); }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
    seed_ = seed;
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    const size_t bad = grammar_mask_mismatches(*masker_, setup_, seed_);
    runs_ = 0;
    rules_ms_ = first_ms_ = 0;
    return {bad == 0, "mask_mismatches", static_cast<double>(bad), 0,
            "every third position of 2 random documents × every token vs stepping it through the grammar"};
  }
  // The rules' DFAs, then the start position's mask (every later mask is built on first use).
  void run(BackendRuntime&) override {
    const CompiledConstraint c = setup_.compile(SchemaPath::Grammar);
    auto t0 = std::chrono::steady_clock::now();
    masker_ = std::make_unique<GrammarTokenMasker>(c.grammar, setup_.vocab);
    masker_->mask(grammar_start(*c.grammar));
    first_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rules_ms_ += (c.regex_seconds + c.dfa_seconds) * 1e3;
    ++runs_;
    rules_ = c.grammar->compiled_rules;
    states_ = c.grammar->states();
    inlined_ = c.inlined_rules;
    notes_ = describe(c.notes);
  }
  std::vector<Metric> metrics() const override {
    const double n = runs_ > 0 ? static_cast<double>(runs_) : 1;
    return {{"grammar", rules_ms_ / n, "ms"},
            {"first_mask", first_ms_ / n, "ms"},
            {"rules", static_cast<double>(rules_), ""},
            {"inlined_rules", static_cast<double>(inlined_), ""},
            {"dfa_states", static_cast<double>(states_), ""}};
  }
  std::string note() const override { return notes_; }

 private:
  Setup setup_;
  uint64_t seed_ = 0;
  std::unique_ptr<GrammarTokenMasker> masker_;
  int64_t runs_ = 0;
  double rules_ms_ = 0, first_ms_ = 0;
  size_t rules_ = 0, states_ = 0;
  int inlined_ = 0;
  std::string notes_;
};

class MaskGrammar : public Variant {
 public:
  std::string unsupported(const Point& p) const override { return schema_only(p); }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
    const CompiledConstraint c = setup_.compile(SchemaPath::Grammar);
    grammar_ = c.grammar;
    masker_ = std::make_unique<GrammarTokenMasker>(grammar_, setup_.vocab);
    docs_ = grammar_documents(*grammar_, setup_, p.integer("documents"), seed);
    words_ = masker_->words();
    staging_.allocate(words_, "step bitmask");
  }
  // Every token of a document is allowed by its step's mask, and EOS at its end.
  Validation validate(BackendRuntime&) override {
    size_t bad = 0, steps = 0;
    for (const auto& doc : docs_) {
      GrammarStacks at = grammar_start(*grammar_);
      bad += doc.empty();
      for (int32_t tok : doc) {
        bad += !mask_allows(masker_->mask(at), tok);
        at = grammar_advance(*grammar_, *setup_.vocab, at, tok);
        ++steps;
        if (at.empty()) break;
      }
      bad += at.empty() || !mask_allows(masker_->mask(at), setup_.vocab->eos);
    }
    step_us_.clear();
    return {bad == 0, "disallowed_steps", static_cast<double>(bad), 0, fmt::format("{} steps of valid documents", steps)};
  }
  // One step: the position's mask into the staging bitmask, then the parse advanced by the token.
  // Cold every run: the frames' and positions' masks are built again.
  void run(BackendRuntime&) override {
    masker_->clear();
    for (const auto& doc : docs_) {
      GrammarStacks at = grammar_start(*grammar_);
      for (size_t i = 0; i <= doc.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(staging_.data(), masker_->mask(at), words_ * sizeof(uint32_t));
        if (i < doc.size()) at = grammar_advance(*grammar_, *setup_.vocab, at, doc[i]);
        step_us_.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    frames_ = masker_->frames_computed();
  }
  std::vector<Metric> metrics() const override {
    size_t steps = 0;
    for (const auto& d : docs_) steps += d.size() + 1;
    std::vector<Metric> m = detail::mask_step_metrics(step_us_, steps, words_);
    m.push_back({"masks_built", static_cast<double>(frames_), ""});
    return m;
  }

 private:
  Setup setup_;
  std::shared_ptr<const Grammar> grammar_;
  std::unique_ptr<GrammarTokenMasker> masker_;
  std::vector<std::vector<int32_t>> docs_;
  size_t words_ = 0, frames_ = 0;
  HostBuffer<uint32_t> staging_;
  std::vector<double> step_us_;
};

const VariantRegistration reg_constrain_compile_grammar(
    "constrain-compile",
    host("grammar",
         "the grammar path: a schema's nesting as rules on a stack (each a minimal DFA), masks per rule state on first use; "
         "the start position's mask timed apart (first_mask)",
         key_names(constraint_keys())),
    make_variant<CompileGrammar>());
const VariantRegistration reg_constrain_mask_grammar(
    "constrain-mask",
    host("grammar", "the grammar path's masks (per rule state and per parse position), cold at the start of every sample",
         key_names(mask_kind_keys())),
    make_variant<MaskGrammar>());

}  // namespace
}  // namespace ib::constrain
