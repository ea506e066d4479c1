// One document being written under a constraint's budget-aware token mask, whatever automaton
// holds the constraint (a DFA state: engine_generate.h's DfaCursor; a grammar's parse stacks:
// grammar_budget.h's GrammarCursor). The engine writer and the server's response_format draw
// every token through it.
#pragma once

#include <cstdint>
#include <memory>

namespace ib::constrain {

class DocumentCursor {
 public:
  virtual ~DocumentCursor() = default;
  // Back to the start of a new document.
  virtual void restart() = 0;
  // Whether the document is complete before any token (the empty document is the only one).
  virtual bool complete_at_start() const = 0;
  // The tokens allowed with `left` tokens left, EOS included (valid until the next call).
  virtual const uint32_t* mask(int left) = 0;
  // The token drawn (not EOS): true when the document is now complete (nothing may follow).
  // Throws std::logic_error when the token leaves the constraint's language.
  virtual bool accept(int32_t token) = 0;
  // An independent cursor at this one's position, sharing the masker's caches: speculative
  // decoding steps it along a draft while this one waits for the verified tokens.
  virtual std::unique_ptr<DocumentCursor> clone() const = 0;
};

}  // namespace ib::constrain
