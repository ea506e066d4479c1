// Lookahead decoding (Fu, Bailis, Stoica, Zhang, ICML 2024): speculative decoding with no draft
// model. One target pass per step holds three things under a tree attention mask:
//  - the root, the last accepted token;
//  - the verification branch: the n-grams of a pool that start with the root, as a token tree;
//  - the lookahead branch, a 2-D Jacobi window of N − 1 levels × W columns: level 0 is a chain
//    after the root (column 0 is the root itself), and the token of level j in column c hangs
//    under level j − 1 of the same column, so column c is a chain of N − 1 tokens at consecutive
//    positions. The pass's prediction after the last level of every column is a new token; the
//    column plus it is an n-gram the model itself produced (a Jacobi trajectory), added to the
//    pool under its first token, and the window moves up one level (the oldest level dropped).
// Every node is a candidate: greedy verification keeps the deepest path whose tokens are all the
// target's own choices, so the output is exactly the target's greedy decoding.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "specdec/specdec.h"

namespace ib::specdec {

// The n-gram pool: for each first token, up to `capacity` distinct continuations of n − 1 tokens,
// most recently added first (adding one already there moves it to the front; the oldest is
// dropped past capacity).
class NgramPool {
 public:
  NgramPool(int n, int capacity);
  int n() const { return n_; }
  // cont holds n − 1 tokens.
  void add(int32_t first, const int32_t* cont);
  // The n-grams of `history` that end in its last `fresh` tokens (all of them when fresh covers it).
  void add_history(const std::vector<int32_t>& history, int fresh);
  const std::deque<std::vector<int32_t>>& candidates(int32_t first) const;
  int64_t size() const { return size_; }

 private:
  int n_, capacity_;
  int64_t size_ = 0;
  std::unordered_map<int32_t, std::deque<std::vector<int32_t>>> map_;
  std::deque<std::vector<int32_t>> none_;
};

struct LookaheadConfig {
  int window = 5;            // W: columns of the Jacobi window
  int ngram = 4;             // N: n-gram size (levels = N − 1)
  int candidates = 5;        // G: pool n-grams verified per step
  bool prompt_pool = false;  // also pool the n-grams of the prompt and of the output (prompt lookup)
  uint64_t seed = 1;         // the window's initial tokens (drawn from the prompt)
};

// Greedy verification of a tree in which several nodes may hold the same token under one parent
// (pool candidates and window columns overlap): the deepest node whose path from the root is the
// target's choices all along (choice[0] after the root, choice[1 + i] after node i) and at most
// max_depth deep; ties go to the lowest node index. `path` gets that path, `emitted` its tokens
// and then the target's choice after it. Returns the accepted count.
int verify_tree_longest(const DraftTree& tree, const std::vector<int32_t>& choice, std::vector<int32_t>& emitted,
                        std::vector<int>& path, int max_depth);

// Nodes a lookahead step puts in the target's open tree beyond the root, at most.
int lookahead_max_nodes(const LookaheadConfig& cfg);

// Generates n tokens after `target_seq` (prompt prefilled, its last token `last` not cached) by
// lookahead decoding; `truth`/`force_truth` and `history` as for speculative_generate. The target
// must implement prefill_tree. stats: drafted/tree_nodes count every candidate node verified,
// accepted the tokens accepted, pool_ngrams the pool's size at the end.
std::vector<int32_t> lookahead_generate(model::Model& target, int target_seq, int32_t last, int n, const LookaheadConfig& cfg,
                                        const std::function<int32_t(int64_t)>& truth, bool force_truth,
                                        std::vector<int32_t>& history, SpecStats& stats);

}  // namespace ib::specdec
