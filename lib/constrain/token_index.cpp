// What both strategies share (MaskSource: the classes, the text profile, the string pieces) and
// the precomputed index (TokenMaskIndex), which builds every class's mask up front.
#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "constrain/token_index_internal.h"
#include "numerics/parallel.h"

namespace ib::constrain {

using detail::bit_setter;
using detail::refine_strings;
using detail::token_classes_impl;
using detail::walk_subtree;

MaskSource::MaskSource(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab, Classes classes)
    : dfa_(std::move(dfa)),
      vocab_(std::move(vocab)),
      trie_(vocab_trie(vocab_)),
      words_((static_cast<size_t>(vocab_->size()) + 31) / 32),
      utf8_(utf8_pieces(trie_)) {
  if (classes == Classes::kToken) {
    classes_ = token_classes_impl(*dfa_, *trie_, text_, &text_, &strings_);
  } else {  // three independent tasks for the CPU threads
    std::atomic<int> next_task{0};
    parallel_for(2, [&](size_t, size_t) {
      for (int task; (task = next_task.fetch_add(1)) < 3;) {
        if (task == 0)
          strings_ = std::make_shared<const StringRefinement>(refine_strings(*dfa_, trie_->max_depth));
        else if (task == 1)
          classes_ = mask_classes(*dfa_, vocab_->max_token_bytes);
        else
          text_ = text_profile(*dfa_);
      }
    });
  }
}

void MaskSource::compute_class_mask(int32_t cls, uint32_t* words) const {
  compute_mask(*dfa_, *vocab_, *trie_, classes_.representative[static_cast<size_t>(cls)], words, &text_);
}

const TokenSet* MaskSource::string_piece(int32_t j, int32_t t, int32_t* block) const {
  const VocabTrie::Node& x = trie_->node[static_cast<size_t>(j)];
  *block = -1;
  if (!strings_ || x.subtree_end - j < kPieceNodes) return nullptr;
  *block = strings_->key(x, t);
  if (*block < 0 || x.text_below) return nullptr;  // (a text subtree's walk takes it whole or by length)
  const int u = strings_->utf8_state(x, *block);
  return u < 0 ? nullptr : &utf8_->piece(j, u, words_);
}

// Each part shared by classes walked once (its tokens as a list, or as a bitmask when that is the
// cheaper to OR), then each class's mask as the union of its parts, a part of that class alone
// walked straight into the mask: a part shared by many classes (a string's CJK subtrees) is
// walked once, not once per class.
TokenMaskIndex::TokenMaskIndex(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : MaskSource(std::move(dfa), std::move(vocab), Classes::kToken) {
  const Dfa& d = *dfa_;
  const VocabTrie& trie = *trie_;
  std::vector<std::vector<int32_t>> roots_in(static_cast<size_t>(d.num_classes));
  for (int32_t j = 1; j < static_cast<int32_t>(trie.nodes()); j = trie.subtree_end[static_cast<size_t>(j)])
    roots_in[d.byte_class[trie.byte[static_cast<size_t>(j)]]].push_back(j);
  const size_t np = classes_.part_target.size();
  std::vector<int32_t> uses(np, 0), shared;  // a part of one class only is walked into its mask
  for (int32_t p : classes_.parts) ++uses[static_cast<size_t>(p)];
  for (size_t p = 0; p < np; ++p)
    if (uses[p] > 1) shared.push_back(static_cast<int32_t>(p));
  std::vector<TokenSet> shared_parts(np);
  // A subtree of string content (a root child's, or one its walk reaches) comes from the
  // vocabulary's pieces (string_piece); the rest is walked.
  parallel_for(shared.size(), [&](size_t b, size_t e) {
    std::vector<int32_t> at(trie.max_depth + 1);
    int32_t block;
    for (size_t x = b; x < e; ++x) {
      const size_t p = static_cast<size_t>(shared[x]);
      for (int32_t j : roots_in[static_cast<size_t>(classes_.part_byte_class[p])]) {
        if (const TokenSet* vp = string_piece(j, classes_.part_target[p], &block)) {
          shared_parts[p].add_set(*vp, words_);
          continue;
        }
        walk_subtree(
            d, trie, &text_, j, classes_.part_target[p], at.data(),
            [&](const int32_t* first, const int32_t* last, int32_t whole) {
              shared_parts[p].add(trie, words_, first, last, whole);
            },
            [&](int32_t i, int32_t t) {
              const TokenSet* below = string_piece(i, t, &block);
              if (below) shared_parts[p].add_set(*below, words_);
              return below != nullptr;
            });
      }
    }
  });
  masks_.assign(num_classes() * words_, 0u);
  parallel_for(num_classes(), [&](size_t b, size_t e) {
    std::vector<int32_t> at(trie.max_depth + 1);
    int32_t block;
    for (size_t c = b; c < e; ++c) {
      uint32_t* words = masks_.data() + c * words_;
      for (int32_t x = classes_.part_begin[c]; x < classes_.part_begin[c + 1]; ++x) {
        const size_t p = static_cast<size_t>(classes_.parts[static_cast<size_t>(x)]);
        if (uses[p] == 1) {
          for (int32_t j : roots_in[static_cast<size_t>(classes_.part_byte_class[p])]) {
            if (const TokenSet* vp = string_piece(j, classes_.part_target[p], &block)) {
              vp->set_in(words, words_);
              continue;
            }
            walk_subtree(d, trie, &text_, j, classes_.part_target[p], at.data(), bit_setter(trie, words),
                         [&](int32_t i, int32_t t) {
                           const TokenSet* below = string_piece(i, t, &block);
                           if (below) below->set_in(words, words_);
                           return below != nullptr;
                         });
          }
        } else {
          shared_parts[p].set_in(words, words_);
        }
      }
      if (vocab_->eos >= 0 && d.accepting[static_cast<size_t>(classes_.representative[c])]) {
        const uint32_t eos = static_cast<uint32_t>(vocab_->eos);
        words[eos >> 5] |= 1u << (eos & 31);
      }
    }
  });
}

}  // namespace ib::constrain
