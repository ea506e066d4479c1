// A grammar's token masks under a token budget: what BudgetMasker (engine_generate.h) is for a
// DFA. With `left` tokens left (EOS included), a token other than EOS is allowed only when the
// position after it is at most left − 2 bytes from a finished document, counting only bytes the
// vocabulary has single-byte tokens for (grammar_distances): each byte needs at most one token,
// then EOS. EOS is allowed where a stack has finished. So a document started with max_tokens >=
// min_tokens() always ends valid within max_tokens.
//
// The nearest stack of a position always has a byte that brings it one closer (positions are
// closed: the calls its shortest way enters and the returns it takes are stacks of the position
// already), so the budget never leaves nothing allowed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "constrain/document_cursor.h"
#include "constrain/grammar.h"
#include "constrain/grammar_generate.h"
#include "constrain/grammar_mask.h"
#include "constrain/vocab.h"

namespace ib::constrain {

class GrammarBudgetMasker {
 public:
  GrammarBudgetMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab);
  // The tokens allowed at `stacks` with `left` tokens left, EOS included (valid until the next call).
  // The position's mask as it is where its reach (GrammarTokenMasker::mask) is within the budget,
  // else filtered exactly by a walk of the position.
  const uint32_t* mask(const GrammarStacks& stacks, int left);
  // The fewest tokens a document takes: the start's distance in bytes, one token each, then EOS.
  int32_t min_tokens() const;
  // "" when the budget's guarantee holds: from the start, single-byte tokens finish a document;
  // else why not (an empty language, or missing byte tokens).
  std::string guarantee_problem() const;
  const Grammar& grammar() const { return *grammar_; }
  const GrammarDistances& distances() const { return *dist_; }
  GrammarTokenMasker& masker() { return masker_; }
  // Steps whose mask the budget filtered (a walk of the position each).
  int64_t filtered_steps() const { return filtered_steps_; }

 private:
  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const GrammarDistances> dist_;
  GrammarTokenMasker masker_;
  std::vector<uint32_t> step_;
  int64_t filtered_steps_ = 0;
};

// A document under a grammar's budget-aware masks (the masker's caches shared by its documents).
class GrammarCursor : public DocumentCursor {
 public:
  GrammarCursor(GrammarBudgetMasker& masker, std::shared_ptr<const Vocabulary> vocab)
      : masker_(masker), vocab_(std::move(vocab)) {
    restart();
  }
  void restart() override { stacks_ = grammar_start(masker_.grammar()); }
  bool complete_at_start() const override;
  const uint32_t* mask(int left) override { return masker_.mask(stacks_, left); }
  bool accept(int32_t token) override;
  std::unique_ptr<DocumentCursor> clone() const override { return std::make_unique<GrammarCursor>(*this); }
  const GrammarStacks& stacks() const { return stacks_; }

 private:
  GrammarBudgetMasker& masker_;
  std::shared_ptr<const Vocabulary> vocab_;
  GrammarStacks stacks_;
};

// Whether the document is complete at `stacks`: a stack has finished and none can take another byte.
bool grammar_complete(const Grammar& g, const GrammarStacks& stacks);

}  // namespace ib::constrain
