// The grammar path (grammar.h, schema_to_grammar) in `constrain-compile`: variant `grammar` beside
// the whole-schema DFA's precomputed and lazy ones. Its masks are built on first use (per rule
// state, and per parse position), so a compile's row says the first mask's cost apart.
#include <algorithm>
#include <chrono>
#include <memory>

#include "constrain/constraint.h"
#include "constrain/grammar_mask.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"
#include "kinds/constrain/grammar_documents.h"

namespace ib::constrain {
namespace {

// Masks at the positions along a few random documents, each checked against stepping every token.
size_t grammar_mask_mismatches(GrammarTokenMasker& m, const ConstraintSetup& setup, uint64_t seed) {
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

class GrammarCompile : public Variant {
 public:
  std::string unsupported(const Point& p) const override { return grammar_path_unsupported(compile_keys().read(p).constraint); }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(compile_keys().read(p).constraint);
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
    rules_ = c.grammar->reachable_rules();
    compiled_rules_ = c.grammar->compiled_rules();
    states_ = c.grammar->states();
    inlined_ = c.inlined_rules;
    notes_ = describe(c.notes);
  }
  std::vector<Metric> metrics() const override {
    const double n = runs_ > 0 ? static_cast<double>(runs_) : 1;
    return {{"grammar", rules_ms_ / n, "ms"},
            {"first_mask", first_ms_ / n, "ms"},
            {"rules", static_cast<double>(rules_), ""},
            {"rules_compiled", static_cast<double>(compiled_rules_), ""},
            {"inlined_rules", static_cast<double>(inlined_), ""},
            {"dfa_states", static_cast<double>(states_), ""}};
  }
  std::string note() const override { return notes_; }

 private:
  ConstraintSetup setup_;
  uint64_t seed_ = 0;
  std::unique_ptr<GrammarTokenMasker> masker_;
  int64_t runs_ = 0;
  double rules_ms_ = 0, first_ms_ = 0;
  size_t rules_ = 0, compiled_rules_ = 0, states_ = 0;
  int inlined_ = 0;
  std::string notes_;
};

const VariantRegistration reg_constrain_compile_grammar(
    "constrain-compile",
    host("grammar",
         "the grammar path: a schema's nesting as rules on a stack (each a minimal DFA compiled when a parse first enters it), "
         "masks per rule state on first use; the start position's mask (with the rules it enters) timed apart (first_mask; "
         "rules_compiled: the rules compiled by then)",
         compile_reads()),
    make_variant<GrammarCompile>());

}  // namespace
}  // namespace ib::constrain
