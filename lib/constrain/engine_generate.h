// Documents written by the transformer engine (lib/model) for a constraint: each step the engine's
// logits for the last token, masked by the token mask of the current DFA state (constrained) or
// not (unconstrained: the text is parsed and validated at the end, and retried), then sampled.
//
// Termination is guaranteed under the mask by a token budget: with `left` tokens left (the EOS
// included), a token other than EOS is allowed only when its next state is at most left − 2
// bytes from acceptance (every byte is a token in the bundled vocabularies, so each byte needs at
// most one token, then EOS). EOS is allowed in accepting states. So a document that starts with
// max_tokens >= distance(start) + 1 always ends valid within max_tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/constraint.h"
#include "constrain/document_cursor.h"
#include "constrain/grammar_budget.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"
#include "model/model.h"

namespace ib::constrain {

// The token among the allowed ones (mask == nullptr: all of [0, n)): the largest logit at
// temperature <= 0 (smallest index on ties), else a draw from softmax(logits / temperature)
// restricted to them, with u uniform in [0, 1). -1 when nothing is allowed; NaN logits are never
// chosen. `scratch` holds the weights between the passes.
int32_t sample_masked(const float* logits, int32_t n, const uint32_t* mask, float temperature, float u,
                      std::vector<double>& scratch);

// A constraint prepared for budget-aware masking.
struct BudgetedConstraint {
  // With `vocab`, distances count only bytes the vocabulary has a single-byte token for, so a
  // distance is a number of tokens that surely finishes the document (a vocabulary may lack some
  // byte tokens: SmolLM2's has none for most control bytes); a state no such path finishes from
  // (dist -1, though the automaton could finish it) is never entered.
  explicit BudgetedConstraint(std::shared_ptr<const Dfa> dfa, const Vocabulary* vocab = nullptr);
  std::shared_ptr<const Dfa> dfa;
  std::vector<int32_t> dist;  // bytes (tokens, with a vocabulary) to acceptance (distance_to_accept); -1: none
  std::vector<uint8_t> done;  // accepting, and no byte continues: the document is complete
  int32_t max_dist = 0;       // the largest distance: with left − 2 >= it the budget cannot bind (a
                              // state of dist -1 makes it INT32_MAX: every step is filtered)
  // The fewest tokens a document takes: distance(start) bytes, one token each, then EOS.
  int32_t min_tokens() const { return dist[static_cast<size_t>(dfa->start)] + 1; }
};

// Of `mask` (the state's), the tokens a budget of `left` tokens leaves (see above), into `out`
// (the same number of words).
void budget_mask(const BudgetedConstraint& c, const Vocabulary& vocab, int32_t state, const uint32_t* mask, int left,
                 uint32_t* out);

// A constraint's token masks under a budget: the state's mask (LazyTokenMasker, cached across
// documents), filtered by budget_mask only where the budget can bind: when left − 2 is below the
// largest distance an allowed token of the state leads to (found on the state's first such visit,
// then cached), so most steps take the state's mask as it is.
class BudgetMasker {
 public:
  BudgetMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab);
  const BudgetedConstraint& constraint() const { return c_; }
  // The tokens allowed in `state` with `left` tokens left, EOS included (valid until the next call).
  const uint32_t* mask(int32_t state, int left);
  // The state's mask without the budget.
  const uint32_t* state_mask(int32_t state) { return masker_.mask(state); }

 private:
  BudgetedConstraint c_;
  std::shared_ptr<const Vocabulary> vocab_;
  LazyTokenMasker masker_;
  std::unordered_map<int32_t, int32_t> reach_;  // per state: the largest distance an allowed token leads to
  std::vector<uint32_t> step_;
};

// A document under a DFA's budget-aware masks (the masker's caches shared by its documents).
class DfaCursor : public DocumentCursor {
 public:
  DfaCursor(BudgetMasker& masker, std::shared_ptr<const Vocabulary> vocab) : masker_(masker), vocab_(std::move(vocab)) {
    restart();
  }
  void restart() override { state_ = masker_.constraint().dfa->start; }
  bool complete_at_start() const override;
  const uint32_t* mask(int left) override { return masker_.mask(state_, left); }
  bool accept(int32_t token) override;
  std::unique_ptr<DocumentCursor> clone() const override { return std::make_unique<DfaCursor>(*this); }
  int32_t state() const { return state_; }

 private:
  BudgetMasker& masker_;
  std::shared_ptr<const Vocabulary> vocab_;
  int32_t state_ = 0;
};

// "" when the vocabulary can end a document (it has an EOS); else why not.
std::string budget_guarantee_problem(const Vocabulary& vocab);
// "" when the budget's guarantee holds for a constraint built with a vocabulary: from the start, a
// path of single-byte tokens finishes a document; else why not (an empty language, or missing
// byte tokens).
std::string budget_guarantee_problem(const BudgetedConstraint& c);

// A compiled constraint's budget-aware masks, whichever automaton holds it (its DFA's
// BudgetMasker or its grammar's GrammarBudgetMasker): what the documents written from it share.
class BudgetedMasks {
 public:
  BudgetedMasks(const CompiledConstraint& c, std::shared_ptr<const Vocabulary> vocab);
  // The fewest tokens a document takes, EOS included.
  int32_t min_tokens() const;
  // "" when the budget's guarantee holds; else why not (an empty language, missing byte tokens).
  std::string guarantee_problem() const;
  // A new document's cursor (it refers to these masks: they must outlive it).
  std::unique_ptr<DocumentCursor> cursor();
  // The grammar's masker (null on the DFA path).
  GrammarBudgetMasker* grammar() { return grammar_.get(); }
  const GrammarBudgetMasker* grammar() const { return grammar_.get(); }

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  std::unique_ptr<BudgetMasker> dfa_;
  std::unique_ptr<GrammarBudgetMasker> grammar_;
};

struct EngineDocument {
  std::string text;
  std::vector<int32_t> tokens;  // every token the engine emitted, EOS included
  bool ended = false;           // by EOS, or (constrained) in an accepting state nothing continues
};

// One engine sequence writing documents after a fixed prompt. The engine's vocabulary may be
// larger than the tokenizer's: ids past the tokenizer are never chosen (they are not tokens).
class EngineWriter {
 public:
  EngineWriter(model::Model& model, std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> prompt, int max_tokens,
               float temperature);
  ~EngineWriter();
  EngineWriter(const EngineWriter&) = delete;
  EngineWriter& operator=(const EngineWriter&) = delete;

  // Under the budget-aware mask of `cursor` (restarted first); `seed` picks the draws. Throws
  // std::logic_error if the mask ever leaves nothing, or a token leaves the language (neither can
  // happen when max_tokens >= the constraint's min_tokens()).
  EngineDocument constrained(DocumentCursor& cursor, uint64_t seed);
  // No mask: up to max_tokens tokens, stopping at EOS.
  EngineDocument unconstrained(uint64_t seed);

  // Host time spent on masks (the position's mask, the budget) and automaton advances, and the
  // number of constrained steps, since construction.
  double mask_seconds() const { return mask_seconds_; }
  int64_t mask_steps() const { return mask_steps_; }

 private:
  void start();                     // the prompt: prefill, logits of the first token
  void next_logits(int32_t token);  // one decode step

  model::Model& model_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::vector<int32_t> prompt_;
  int max_tokens_;
  float temperature_;
  int seq_ = -1;
  std::vector<float> logits_;
  std::vector<double> scratch_;
  double mask_seconds_ = 0;
  int64_t mask_steps_ = 0;
};

}  // namespace ib::constrain
