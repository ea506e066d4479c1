// Internals shared by the files of the token masks (token_index.h): the Moore refinement's
// rounds, the string refinement and the vocabulary's UTF-8 pieces, and the trie walk through a
// DFA. Not a public header.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/token_index.h"

namespace ib::constrain {

namespace detail {

// String-refinement rounds stored whole: most trie nodes are that shallow (the rest look up what
// changed after it).
constexpr size_t kDenseStringRounds = 16;

// The states of the UTF-8 content automaton with a budget of characters (string_content.cpp:
// utf8_step): state u + 8 * level, u a state of utf8_char_step, level 0 no limit.
constexpr int kUtf8Budgets = 24;
constexpr int kUtf8States = 8 * (1 + kUtf8Budgets);

}  // namespace detail

// The block of every state after each refinement round. Rounds up to `dense` are stored whole;
// a later round as the states that changed block since round `dense`, sorted, with their blocks:
// a refinement that runs for hundreds of rounds (the string refinement of a counting DFA, one
// counter position per round) then writes what changed instead of a table per round.
class RoundBlocks {
 public:
  explicit RoundBlocks(size_t dense) : dense_(dense) {}
  size_t size() const { return full_.size() + moved_.size(); }
  int32_t at(size_t round, size_t q) const {
    if (round < full_.size()) return full_[round][q];
    const auto& m = moved_[round - full_.size()];
    const auto it = std::lower_bound(m.begin(), m.end(), static_cast<int32_t>(q),
                                     [](const std::pair<int32_t, int32_t>& e, int32_t s) { return e.first < s; });
    return it != m.end() && it->first == static_cast<int32_t>(q) ? it->second : full_.back()[q];
  }
  void start(const std::vector<int32_t>& id) {
    full_.assign(1, id);
    moved_.clear();
    since_.clear();
    flag_.assign(id.size(), 0);
  }
  // The blocks after the next round; `changed`: the states whose block that round changed.
  void push(const std::vector<int32_t>& id, const std::vector<int32_t>& changed) {
    if (full_.size() <= dense_) {
      full_.push_back(id);
      return;
    }
    fresh_.clear();
    for (int32_t s : changed)
      if (!flag_[static_cast<size_t>(s)]) {
        flag_[static_cast<size_t>(s)] = 1;
        fresh_.push_back(s);
      }
    std::sort(fresh_.begin(), fresh_.end());
    merged_.clear();
    std::merge(since_.begin(), since_.end(), fresh_.begin(), fresh_.end(), std::back_inserter(merged_));
    since_.swap(merged_);
    auto& m = moved_.emplace_back();
    m.reserve(since_.size());
    for (int32_t s : since_) m.emplace_back(s, id[static_cast<size_t>(s)]);
  }

 private:
  size_t dense_;
  std::vector<std::vector<int32_t>> full_;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> moved_;
  std::vector<int32_t> since_, fresh_, merged_;
  std::vector<uint8_t> flag_;
};

namespace detail {

// Moore refinement limited to `max_rounds` rounds, done incrementally: after a round only the
// predecessors of states that changed block need a new signature, and within a block only those
// states can leave it (the others keep the block's old signature). Returns the block of each state
// after the last round (states in one block: alive after the same strings of up to that many
// bytes), the rounds run, and with `snapshots` the blocks after rounds 0, 1, ... (round 0: one block).
// Stops early when a round changes nothing (the partition is then final). With `only`, strings
// over the byte classes c with only[c] set (the refinement of the DFA restricted to them).
std::vector<int32_t> moore_refine(const Dfa& dfa, size_t max_rounds, int* rounds, bool* stable, RoundBlocks* snapshots,
                                  const std::vector<uint8_t>* only = nullptr);

}  // namespace detail

// The DFA's refinement over strings of string bytes only, run beside the UTF-8 content automaton
// (states n..n + kUtf8States - 1) over byte classes that split the DFA's by the automaton's columns
// (non-string bytes: class 0, left out): a state in one block with a UTF-8 state u after h rounds
// keeps alive exactly the strings of at most h string bytes that are valid content from u.
struct StringRefinement {
  RoundBlocks blocks{detail::kDenseStringRounds};
  int rounds = 0;
  bool stable = false;
  std::vector<std::vector<std::pair<int32_t, int>>> utf8_of;  // per round: (block, UTF-8 state), sorted
  // State q's block over the strings below node x (string bytes only, at most its height), or -1
  // when x has other bytes below or the refinement stopped short of its height.
  int32_t key(const VocabTrie::Node& x, int32_t q) const {
    const int h = x.height;
    if (!x.string_below || h >= 255 || !(stable || h <= rounds)) return -1;
    return blocks.at(static_cast<size_t>(std::min(h, rounds)), static_cast<size_t>(q));
  }
  // The least UTF-8 state in `block` (a key() of node x), or -1: below x, a state of that block
  // keeps alive exactly the tokens that are valid string content from it.
  int utf8_state(const VocabTrie::Node& x, int32_t block) const {
    const auto& pairs = utf8_of[static_cast<size_t>(std::min<int>(x.height, rounds))];
    const auto it = std::lower_bound(pairs.begin(), pairs.end(), std::make_pair(block, 0));
    return it != pairs.end() && it->first == block ? it->second : -1;
  }
};

namespace detail {

// The refinement over string bytes of `dfa` (string_content.cpp).
StringRefinement refine_strings(const Dfa& dfa, size_t max_depth);

// The root's byte classes are shared out over the CPU threads, largest subtrees first, each thread
// naming whole classes with its own walker; a state's class is then (accepting, c1, g1, c2, g2, ...)
// over the byte classes c it survives, g its class-c name (from the one walker that named c).
// With `strings_out`, the refinement over string bytes it ran is handed out (the index's walks use
// it to find the vocabulary's string-content pieces).
MaskClasses token_classes_impl(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text, TextProfile* text_out,
                               std::shared_ptr<const StringRefinement>* strings_out = nullptr);

}  // namespace detail

// The tokens below trie node i (its own included) alive from UTF-8 state u after i's bytes: valid
// string content within u's character budget. They depend on the vocabulary alone, so every lazy
// masker of one vocabulary shares them, each built on first use. A string field's states (a
// budget counted down, or none) meet the same few dozen; a masker finds them through its string
// refinement (a block holding a UTF-8 state).
struct Utf8Pieces {
  explicit Utf8Pieces(std::shared_ptr<const VocabTrie> t) : trie(std::move(t)), at(trie->max_depth + 1) {}
  const TokenSet& piece(int32_t i, int u, size_t words);  // string_content.cpp
  std::shared_ptr<const VocabTrie> trie;
  std::mutex mu;
  std::unordered_map<uint64_t, TokenSet> sets;  // (node << 8 | u) -> its tokens
  std::vector<int32_t> at;
};

// The vocabulary's pieces for `trie`, shared by every masker of it.
std::shared_ptr<Utf8Pieces> utf8_pieces(const std::shared_ptr<const VocabTrie>& trie);

namespace detail {

// The walk every mask is built by, and its emit into a bitmask (inline: they run per trie run).

// The tokens of trie node j's subtree alive when the DFA is in state tj (alive) after j's bytes:
// emit(first, last, whole) for each run trie.tokens[first, last) or trie.by_length[first, last),
// whole = the node whose subtree the run is when it is one taken whole (else -1). With the
// DFA's text profile, a subtree of text bytes is taken without stepping the DFA through it: whole
// when it is no deeper than the state's run, up to a token length when the state dies after a
// fixed number of text bytes. `at` holds a state per depth (max_depth + 1). A node below j that
// the walk would descend into is first offered to skip(i, t) (t: the state after its bytes); when
// that returns true (it took the node's tokens itself), the walk passes over its subtree.
template <class Emit, class Skip>
void walk_subtree(const Dfa& dfa, const VocabTrie& trie, const TextProfile* text, int32_t j, int32_t tj, int32_t* at, Emit&& emit,
                  Skip&& skip) {
  const VocabTrie::Node* node = trie.node.data();
  const int32_t end = node[j].subtree_end;
  for (int32_t i = j; i < end;) {
    const VocabTrie::Node& x = node[i];
    const uint16_t d = x.depth;
    const int32_t t = i == j ? tj : dfa.step(at[d - 1u], x.byte);
    if (t < 0) {  // no token below this node can be completed
      i = x.subtree_end;
      continue;
    }
    at[d] = t;
    int32_t last = i + 1, whole = -1;
    if (text && x.text_below) {
      const int h = x.height;
      if (h < 255 && h <= text->run[static_cast<size_t>(t)]) {
        // Every path below is text no longer than t survives: the subtree's tokens are allowed.
        last = x.subtree_end;
        whole = i;
      } else if (const int r = text->dies_after[static_cast<size_t>(t)]; r != 255) {
        // Below, t takes exactly r more bytes: the subtree's tokens up to that length.
        const size_t limit = static_cast<size_t>(d) + static_cast<size_t>(r);
        const int32_t first = trie.by_length_begin[static_cast<size_t>(i)];
        int32_t stop = first;
        while (stop < trie.by_length_begin[static_cast<size_t>(i) + 1] && trie.length_of[static_cast<size_t>(stop)] <= limit)
          ++stop;
        emit(trie.by_length.data() + first, trie.by_length.data() + stop, -1);
        i = x.subtree_end;
        continue;
      }
    }
    if (whole < 0 && i != j && skip(i, t)) {
      i = x.subtree_end;
      continue;
    }
    emit(trie.tokens.data() + x.token_begin, trie.tokens.data() + node[last].token_begin, whole);
    i = last;
  }
}

template <class Emit>
void walk_subtree(const Dfa& dfa, const VocabTrie& trie, const TextProfile* text, int32_t j, int32_t tj, int32_t* at,
                  Emit&& emit) {
  walk_subtree(dfa, trie, text, j, tj, at, std::forward<Emit>(emit), [](int32_t, int32_t) { return false; });
}

inline void set_bits(uint32_t* words, const int32_t* first, const int32_t* last) {
  for (; first != last; ++first) {
    const uint32_t tok = static_cast<uint32_t>(*first);
    words[tok >> 5] |= 1u << (tok & 31);
  }
}

inline void or_bits(uint32_t* words, const uint32_t* bits, size_t n) {
  for (size_t w = 0; w < n; ++w) words[w] |= bits[w];
}

// An emit for walk_subtree that sets the run's bits in `words`: a whole subtree with a bitmap by
// OR-ing that in.
inline auto bit_setter(const VocabTrie& trie, uint32_t* words) {
  return [&trie, words](const int32_t* first, const int32_t* last, int32_t whole) {
    if (const uint32_t* bits = whole >= 0 ? trie.bitmap(whole) : nullptr)
      or_bits(words, bits, trie.bitmap_words);
    else
      set_bits(words, first, last);
  };
}

}  // namespace detail

}  // namespace ib::constrain
