// What walks of the trie through a DFA yield: one state's mask (compute_mask), and TokenSet, the
// tokens a walk gathers for reuse (the walk itself, walk_subtree: token_index_internal.h).
#include <algorithm>
#include <vector>

#include "constrain/token_index_internal.h"

namespace ib::constrain {

using detail::bit_setter;
using detail::or_bits;
using detail::set_bits;
using detail::walk_subtree;

void TokenSet::add(const VocabTrie& trie, size_t words, const int32_t* first, const int32_t* last, int32_t whole) {
  const uint32_t* sub = whole >= 0 ? trie.bitmap(whole) : nullptr;
  if (bits.empty() && (sub || tokens.size() + static_cast<size_t>(last - first) > words)) {
    bits.assign(words, 0u);
    set_bits(bits.data(), tokens.data(), tokens.data() + tokens.size());
    tokens = {};
  }
  if (bits.empty())
    tokens.insert(tokens.end(), first, last);
  else if (sub)
    or_bits(bits.data(), sub, words);
  else
    set_bits(bits.data(), first, last);
}

void TokenSet::add_set(const TokenSet& other, size_t words) {
  if (other.bits.empty()) {
    if (bits.empty() && tokens.size() + other.tokens.size() <= words) {
      tokens.insert(tokens.end(), other.tokens.begin(), other.tokens.end());
      return;
    }
  }
  if (bits.empty()) {
    bits.assign(words, 0u);
    set_bits(bits.data(), tokens.data(), tokens.data() + tokens.size());
    tokens = {};
  }
  other.set_in(bits.data(), words);
}

void TokenSet::set_in(uint32_t* out, size_t words) const {
  if (!bits.empty())
    or_bits(out, bits.data(), words);
  else
    set_bits(out, tokens.data(), tokens.data() + tokens.size());
}

void compute_mask(const Dfa& dfa, const Vocabulary& vocab, const VocabTrie& trie, int32_t state, uint32_t* words,
                  const TextProfile* text) {
  std::fill(words, words + (static_cast<size_t>(vocab.size()) + 31) / 32, 0u);
  std::vector<int32_t> at(trie.max_depth + 1);
  at[0] = state;
  const int32_t n = static_cast<int32_t>(trie.nodes());
  for (int32_t j = 1; j < n; j = trie.subtree_end[static_cast<size_t>(j)])
    if (const int32_t t = dfa.step(state, trie.byte[static_cast<size_t>(j)]); t >= 0)
      walk_subtree(dfa, trie, text, j, t, at.data(), bit_setter(trie, words));
  if (vocab.eos >= 0 && dfa.accepting[static_cast<size_t>(state)]) {
    const uint32_t e = static_cast<uint32_t>(vocab.eos);
    words[e >> 5] |= 1u << (e & 31);
  }
}

}  // namespace ib::constrain
