// The lazy masker (LazyTokenMasker): a class's mask built on its first use and cached, with its
// own pieces of string content reused across masks.
#include <cstdint>
#include <utility>
#include <vector>

#include "constrain/token_index_internal.h"

namespace ib::constrain {

using detail::bit_setter;
using detail::walk_subtree;

LazyTokenMasker::LazyTokenMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : MaskSource(std::move(dfa), std::move(vocab), Classes::kMoore) {
  at_.resize(trie_->max_depth + 1);
  piece_at_.resize(trie_->max_depth + 1);
}

const uint32_t* LazyTokenMasker::mask(int32_t state) {
  const int32_t c = class_of(state);
  auto it = cache_.find(c);
  if (it == cache_.end()) {
    std::vector<uint32_t> m(words_, 0u);
    fill(classes_.representative[static_cast<size_t>(c)], m.data());
    it = cache_.emplace(c, std::move(m)).first;
  }
  return it->second.data();
}

// compute_mask, with the root's subtrees of string bytes (64 nodes or more) taken from pieces.
void LazyTokenMasker::fill(int32_t state, uint32_t* words) {
  const Dfa& d = *dfa_;
  const VocabTrie& trie = *trie_;
  const VocabTrie::Node* node = trie.node.data();
  const int32_t nodes = static_cast<int32_t>(trie.nodes());
  // The piece of node i from state t (a root child, or a node a root child's walk reaches), built
  // on first use; false when i does not qualify.
  auto take = [&](int32_t i, int32_t t) {
    int32_t block;
    if (const TokenSet* vp = string_piece(i, t, &block)) {
      vp->set_in(words, words_);
      return true;
    }
    if (block < 0) return false;
    auto [it, fresh] = pieces_.try_emplace((static_cast<uint64_t>(i) << 32) | static_cast<uint32_t>(block));
    TokenSet& piece = it->second;
    if (fresh)  // (its own scratch: take may be called from inside the walk below)
      walk_subtree(d, trie, &text_, i, t, piece_at_.data(), [&](const int32_t* first, const int32_t* last, int32_t whole) {
        piece.add(trie, words_, first, last, whole);
      });
    piece.set_in(words, words_);
    return true;
  };
  for (int32_t j = 1; j < nodes; j = node[j].subtree_end) {
    const int32_t t = d.step(state, node[j].byte);
    if (t < 0 || take(j, t)) continue;
    // A root subtree with other bytes below: its subtrees of string bytes are taken as pieces.
    walk_subtree(d, trie, &text_, j, t, at_.data(), bit_setter(trie, words), take);
  }
  if (vocab_->eos >= 0 && d.accepting[static_cast<size_t>(state)]) {
    const uint32_t e = static_cast<uint32_t>(vocab_->eos);
    words[e >> 5] |= 1u << (e & 31);
  }
}

}  // namespace ib::constrain
