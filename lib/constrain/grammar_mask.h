// Token masks for a grammar (grammar.h): which vocabulary tokens keep some stack of a parse
// position alive. A token's bytes either stay within the top frame's rule and the calls it makes
// from there, or return from that rule part-way and go on in the caller's. The first part depends
// on the top frame alone (rule, state): it is walked over the vocabulary trie once per frame and
// cached, with the trie nodes where the rule can return mid-token. The second part is walked at
// use from those nodes in the caller's stacks: few tokens (a container's closing bracket and what
// follows it in one token). A whole position's mask is cached too (keyed by its stacks), so a
// position met again costs a copy.
//
// With distances (grammar_distances), the masker also bounds how far from a finished document an
// allowed token can lead (a position's reach: each frame's own bound, cached with its mask, plus
// the frames below it), so a token budget (grammar_budget.h) filters only where it can bind, and
// filters a position exactly (mask_within) by the same walks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/grammar.h"
#include "constrain/grammar_generate.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"

namespace ib::constrain {

class GrammarTokenMasker {
 public:
  GrammarTokenMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab,
                     std::shared_ptr<const GrammarDistances> dist = nullptr);
  // The mask of the tokens allowed at `stacks` ((vocab size + 31) / 32 words; EOS where a stack has
  // finished the document). Valid until the next call. With distances and `reach`: at least the
  // largest distance (GrammarDistances::finish) of the position after any allowed token but EOS
  // (kNone where one leads to a position no usable bytes finish).
  const uint32_t* mask(const GrammarStacks& stacks, int32_t* reach = nullptr);
  // With distances: into `out` (words() words), the tokens allowed at `stacks` after which the
  // position is at most `limit` bytes from finishing, and EOS where a stack has finished. Not cached.
  void mask_within(const GrammarStacks& stacks, int32_t limit, uint32_t* out);
  size_t words() const { return words_; }
  size_t frames_computed() const { return frames_.size(); }
  size_t positions_cached() const { return positions_.size(); }
  size_t distinct_masks() const { return pool_.size(); }
  const Grammar& grammar() const { return *grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  void clear() {
    frames_.clear();
    positions_.clear();
    pool_.clear();
    pool_by_hash_.clear();
  }

 private:
  struct FrameMask {
    std::vector<uint32_t> inside;  // tokens that stay within the frame's rule (and its calls)
    std::vector<int32_t> returns;  // trie nodes after whose bytes the frame's rule may return
    int64_t reach = 0;             // the largest distance of the frame's own stacks after an inside token
  };
  struct PositionMask {
    int32_t mask = 0;  // in pool_
    int32_t reach = 0;
  };
  const FrameMask& frame_mask(const GrammarFrame& f);
  // Sets the tokens below trie node `node` (not its own) alive from `at`; with `returns`, `at`'s
  // stacks are a frame's own (their bottom is the frame's rule) and the nodes where a bottom frame
  // may return are listed there instead of returning.
  // With distances, a token is set only when its position's distance is at most limit_, and the
  // largest such distance is kept in reach_seen_.
  void walk(int32_t node, const GrammarStacks& at, uint32_t* out, std::vector<int32_t>* returns);
  // The same for one stack `base` whose top frame is at `state`: the top rule's DFA stepped alone
  // while the states it reaches are plain (most of the trie: keys, strings, numbers), as a DFA mask
  // walks, and the stacks built only where a call, a return or an accepting state is met.
  // `below` is the distance of base's frames under its top.
  void walk_top(int32_t node, const GrammarStack& base, int64_t below, int32_t state, uint32_t* out,
                std::vector<int32_t>* returns);
  void set_tokens_at(int32_t node, uint32_t* out) const;
  // Sets node's tokens when their position (`finish` bytes from the end) is within the limit.
  void take(int32_t node, int64_t finish, uint32_t* out);
  // The same for every token of node's subtree (its own included).
  void take_subtree(int32_t node, int64_t finish, uint32_t* out);
  // The state every text byte (printable ASCII but '"' and '\\') leads to from the rule's state
  // when they all lead to one (-1: none continues), else -2: string content, counted
  // (maxLength) or not (a loop), where a token of text bytes only ends where its length says.
  int32_t text_next(int32_t rule, int32_t state);
  // The tokens of trie node c's subtree, all text bytes, whose node is reached at `state` (plain)
  // of base's top rule: each ends `length` steps down the text successors. False (nothing set)
  // when a state on the way is not plain: the caller walks the subtree.
  bool take_text_subtree(int32_t c, const GrammarStack& base, int64_t below, int32_t state, uint32_t* out);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::shared_ptr<const VocabTrie> trie_;
  std::shared_ptr<const GrammarDistances> dist_;
  size_t words_ = 0;
  int64_t limit_ = GrammarDistances::kNone;
  int64_t reach_seen_ = 0;
  std::unordered_map<uint64_t, FrameMask> frames_;
  std::vector<std::vector<int32_t>> text_next_;  // [rule][state]: -3 not yet known
  std::vector<int32_t> chain_;                   // scratch: the states down a text chain
  // The masks positions are cached with, each distinct one stored once: most positions share one
  // (a string's content at any depth, a key at any object of a rule), so the masks a document's
  // steps copy from stay few and in cache instead of one 6 KB copy per position.
  int32_t pooled(const std::vector<uint32_t>& mask);
  std::unordered_map<std::string, PositionMask> positions_;
  std::vector<std::vector<uint32_t>> pool_;
  std::unordered_multimap<uint64_t, int32_t> pool_by_hash_;
  std::string key_;
  std::vector<uint32_t> scratch_;
};

// Greedy longest-match tokenisation of a document of the grammar: at each position the longest
// token that is a prefix of the rest and keeps a stack alive (every single byte is a token in the
// bundled vocabularies). Empty when the text leaves the grammar.
std::vector<int32_t> grammar_tokenize_greedy(const Grammar& g, const Vocabulary& vocab, const VocabTrie& trie,
                                             const std::string& text);

// After emitting `token` at `stacks`: the position after its bytes (empty when not allowed).
GrammarStacks grammar_advance(const Grammar& g, const Vocabulary& vocab, const GrammarStacks& stacks, int32_t token);

}  // namespace ib::constrain
