// The sequence bookkeeping the CPU and CUDA engines do the same way, written once: the open-tree
// check, truncate, release (over a SequenceTable of either engine's Sequence) and the token-id check.
// S has what SequenceTable needs plus `int length` and `TokenTree tree`; the rest stays per engine.
#pragma once

#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

#include "model/sequence_table.h"

namespace ib::model {

template <class S>
class EngineSequences : public SequenceTable<S> {
 public:
  // Throws when `seq`'s token tree is open: `what` (an operation) needs it closed.
  void no_tree(int seq, const char* what) const {
    if (this->at(seq).tree.open())
      throw std::logic_error(fmt::format("{} on sequence {} while its token tree is open", what, seq));
  }
  void truncate(int seq, int length) {
    S& s = this->at(seq);
    if (length < 0 || length > s.length)
      throw std::invalid_argument(fmt::format("truncate to {} of a {}-token sequence", length, s.length));
    if (s.tree.open()) {
      if (length > s.tree.base())
        throw std::invalid_argument(
            fmt::format("truncate to {} inside an open token tree (committed {})", length, s.tree.base()));
      s.tree.close();
    }
    s.length = length;
  }
  void release(int seq) {
    S& s = this->at(seq);
    s.cache.reset();
    s.live = false;
    s.tree.close();
  }
};

// Throws unless `token` is an id of a `vocab`-token vocabulary.
inline void check_token(int32_t token, int vocab) {
  if (token < 0 || token >= vocab) throw std::invalid_argument(fmt::format("token {} outside the vocabulary", token));
}
inline void check_tokens(const int32_t* tokens, int n, int vocab) {
  for (int i = 0; i < n; ++i) check_token(tokens[i], vocab);
}

}  // namespace ib::model
