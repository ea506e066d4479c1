// Token masks: for a DFA state, the bitmask of vocabulary tokens whose bytes keep the DFA on a
// path to acceptance (EOS where the state accepts). Two strategies share one machinery:
//
// - TokenMaskIndex (outlines-style, precomputed): every state's mask built ahead of generation;
// - LazyTokenMasker (XGrammar-style adaptive): a state's mask built on first use, then cached.
//
// Both walk a byte trie of the vocabulary through the DFA, pruning a subtree as soon as the DFA
// dies. Both compute one mask per class of states known to allow the same tokens: the index per
// *token class* (token_classes: exactly the states with one mask), which collapses counting
// states (maxLength, maxItems) and the copies of a recursive schema's states from thousands to
// a few hundred; the lazy masker per Moore class (no string of at most the longest token's
// length tells them apart), found in a few milliseconds.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/vocab.h"

namespace ib::constrain {

// The vocabulary's token bytes as a trie in depth-first pre-order (built once per vocabulary).
struct VocabTrie {
  std::vector<uint8_t> byte;         // the byte leading into node i (node 0 is the root)
  std::vector<uint16_t> depth;       // bytes from the root
  std::vector<int32_t> subtree_end;  // one past the last node of i's subtree
  std::vector<int32_t> token_begin;  // tokens ending exactly at node i: tokens[token_begin[i]..token_begin[i+1])
  std::vector<int32_t> tokens;
  // For the text fast path: the longest path below node i (bytes, 255: at least 255), and whether every byte below
  // node i (its own excluded) is a text byte (printable ASCII but '"' and '\\').
  std::vector<uint8_t> height;
  std::vector<uint8_t> text_below;
  // Whether every byte below node i (its own excluded) is a string byte (is_string_byte).
  std::vector<uint8_t> string_below;
  // For text_below nodes: the tokens of the subtree (node i's own included) by byte length,
  // by_length[by_length_begin[i]..by_length_begin[i+1]), with their lengths in length_of.
  std::vector<int32_t> by_length_begin;
  std::vector<int32_t> by_length;
  std::vector<uint16_t> length_of;
  size_t max_depth = 0;
  // The fields a walk reads at every node, packed (one cache line instead of one per array), with
  // a sentinel at nodes() that holds the end of `tokens`.
  struct Node {
    int32_t subtree_end, token_begin;
    uint16_t depth;
    uint8_t byte, height, text_below, string_below;
  };
  std::vector<Node> node;
  // Bitmaps ((vocabulary size + 31) / 32 words each) of the tokens of the subtrees holding at least
  // kSubtreeBitmapTokens tokens: a mask that takes such a subtree whole ORs its bitmap in instead
  // of setting thousands of scattered bits one by one.
  static constexpr int32_t kSubtreeBitmapTokens = 1024;
  size_t bitmap_words = 0;
  std::vector<int32_t> bitmap_of;  // per node: its bitmap's index, or -1
  std::vector<uint32_t> bitmaps;
  const uint32_t* bitmap(int32_t i) const {
    const int32_t b = bitmap_of[static_cast<size_t>(i)];
    return b < 0 ? nullptr : bitmaps.data() + static_cast<size_t>(b) * bitmap_words;
  }
  size_t nodes() const { return byte.size(); }
};
std::shared_ptr<const VocabTrie> vocab_trie(const std::shared_ptr<const Vocabulary>& vocab);

// States grouped so that states in one group allow exactly the same tokens.
struct MaskClasses {
  std::vector<int32_t> class_of;        // per DFA state
  std::vector<int32_t> representative;  // one state per class
  int rounds = 0;                       // refinement rounds until stable (at most the longest token)
  // token_classes only: a class's mask is the union of its parts (and EOS where it accepts), class x's
  // parts[part_begin[x]..part_begin[x + 1]); part p: the tokens under the root's children of byte
  // class part_byte_class[p] alive from part_target[p] (a state reached on that class).
  std::vector<int32_t> part_begin, parts, part_byte_class, part_target;
};
// mask_classes: states no string of at most `max_token_bytes` bytes tells apart (a Moore
// refinement over all byte strings; finer than token_classes, cheaper to find: the lazy masker's).
MaskClasses mask_classes(const Dfa& dfa, size_t max_token_bytes);

// Text bytes: what JSON strings hold unescaped, in ASCII.
bool is_text_byte(uint8_t b);
// String bytes: the bytes a JSON string may hold unescaped (text, DEL and every byte >= 0x80: UTF-8
// sequences, valid or not). A node with only string bytes below is keyed by its state's Moore
// block over string-byte strings alone, coarser than over all strings, and named without a walk
// when that block holds a state of a UTF-8 content automaton (with a character budget or none).
bool is_string_byte(uint8_t b);
// How each state takes text bytes.
struct TextProfile {
  // Every string of text bytes at most this long keeps the state alive (255: 255 or more).
  std::vector<uint8_t> run;
  // r when any r text bytes lead to one same state and any r + 1 text bytes kill it (a string
  // with r characters left); 255 when not so.
  std::vector<uint8_t> dies_after;
};
TextProfile text_profile(const Dfa& dfa);

// States grouped by the vocabulary's tokens: one class per distinct (mask, accepting), computed
// over the trie (memoized per trie node and Moore block of the node's height), so states that
// only strings no token spells could tell apart share a class. Exact: states of one class allow
// the same tokens (classes may be split finer than that, never merged wrongly).
MaskClasses token_classes(const Dfa& dfa, const VocabTrie& trie, const TextProfile& text);
// The same, computing the DFA's text profile into *text alongside the Moore refinements (on
// another CPU thread where there is one).
MaskClasses token_classes(const Dfa& dfa, const VocabTrie& trie, TextProfile* text);

// The mask of one state, written into `words` ((vocab size + 31) / 32 uint32 words). With the
// DFA's text profile, a trie subtree of text bytes is taken without stepping the DFA through it:
// whole when it is no deeper than the state's run, up to a token length when the state dies after
// a fixed number of text bytes.
void compute_mask(const Dfa& dfa, const Vocabulary& vocab, const VocabTrie& trie, int32_t state, uint32_t* words,
                  const TextProfile* text = nullptr);

struct StringRefinement;  // token_index_internal.h: the DFA refined over strings of string bytes
struct Utf8Pieces;        // token_index_internal.h: a vocabulary's subtrees of valid string content

// Tokens gathered by trie walks for reuse: a list while short, a bitmap (`words` words) once it
// holds more tokens than the bitmap has words or takes a subtree with a bitmap whole.
struct TokenSet {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> bits;
  // A walk's run trie.tokens / by_length [first, last); `whole`: the node whose subtree it is, or -1.
  void add(const VocabTrie& trie, size_t words, const int32_t* first, const int32_t* last, int32_t whole);
  void add_set(const TokenSet& other, size_t words);
  void set_in(uint32_t* out, size_t words) const;  // ORs the set into a mask
};

// What both strategies hold: the DFA, the vocabulary and its trie, and the mask classes: the
// token classes for the precomputed index (fewest masks to build up front), the Moore classes
// (mask_classes, cheaper to find, finer) for the lazy masker, which defers the mask work.
class MaskSource {
 public:
  enum class Classes { kToken, kMoore };
  MaskSource(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab, Classes classes);
  size_t words() const { return words_; }
  size_t num_classes() const { return classes_.representative.size(); }
  const Dfa& dfa() const { return *dfa_; }
  const Vocabulary& vocab() const { return *vocab_; }

 protected:
  int32_t class_of(int32_t state) const { return classes_.class_of[static_cast<size_t>(state)]; }
  void compute_class_mask(int32_t cls, uint32_t* words) const;
  // Trie node j's subtree (kPieceNodes nodes or more) from state t after j's bytes, when it holds
  // only string bytes, not all of them text (a text subtree's walk takes it whole or by length
  // without stepping), and t's block of the string refinement (*block, else -1) holds a UTF-8
  // content state: the vocabulary's piece of those tokens; otherwise nullptr.
  static constexpr int32_t kPieceNodes = 64;  // smaller subtrees are walked each time
  const TokenSet* string_piece(int32_t j, int32_t t, int32_t* block) const;

  std::shared_ptr<const Dfa> dfa_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::shared_ptr<const VocabTrie> trie_;
  TextProfile text_;
  MaskClasses classes_;
  size_t words_;
  std::shared_ptr<const StringRefinement> strings_;  // the refinement over string bytes
  std::shared_ptr<Utf8Pieces> utf8_;                 // the vocabulary's string-content pieces
};

class TokenMaskIndex : public MaskSource {
 public:
  // Builds every class's mask, split over the CPU threads (parallel_for).
  TokenMaskIndex(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab);
  const uint32_t* mask(int32_t state) const { return masks_.data() + static_cast<size_t>(class_of(state)) * words_; }
  size_t bytes() const { return masks_.size() * sizeof(uint32_t) + classes_.class_of.size() * sizeof(int32_t); }

 private:
  std::vector<uint32_t> masks_;
};

class LazyTokenMasker : public MaskSource {
 public:
  LazyTokenMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab);
  // Computes the state's class mask on first use.
  const uint32_t* mask(int32_t state);
  // Forget computed masks and pieces (a cold start). The vocabulary's string-content pieces stay:
  // they belong to the vocabulary (like its trie), shared by every masker of it.
  void clear() {
    cache_.clear();
    pieces_.clear();
  }
  size_t cached() const { return cache_.size(); }

 private:
  void fill(int32_t state, uint32_t* words);

  std::unordered_map<int32_t, std::vector<uint32_t>> cache_;
  // The tokens of a trie subtree of string bytes (a root child's, or one below a root child with
  // other bytes) alive from a state: the same for every state in one block of the DFA's
  // refinement over string bytes (StringRefinement), so a mask walks such a subtree once per
  // (node, block) — every field of unconstrained string content shares one — and later masks
  // reuse it. (node << 32 | block) -> its tokens.
  // (A piece whose block holds a UTF-8 content state is the vocabulary's: string_piece.)
  std::unordered_map<uint64_t, TokenSet> pieces_;
  std::vector<int32_t> at_, piece_at_;
};

// After emitting `token` from `state`: the next state (-1 if the token was not allowed).
inline int32_t advance(const Dfa& dfa, const Vocabulary& vocab, int32_t state, int32_t token) {
  return dfa.walk(state, vocab.token_bytes[static_cast<size_t>(token)]);
}

inline bool mask_allows(const uint32_t* words, int32_t token) {
  return (words[static_cast<size_t>(token) >> 5] >> (static_cast<uint32_t>(token) & 31)) & 1u;
}

}  // namespace ib::constrain
