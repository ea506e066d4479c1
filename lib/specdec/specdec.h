// Speculative decoding (§8.2): a drafter proposes K tokens, the target scores them all in one
// verify pass, the longest agreeing prefix is kept plus one token of the target's own, so every
// step yields at least one token and the output is exactly the target's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

namespace ib::specdec {

// Expected tokens per step with K drafted tokens each accepted with probability α independently
// (Leviathan et al.): E = (1 − α^(K+1)) / (1 − α); K + 1 when α = 1.
double expected_tokens(double alpha, int k);
// Predicted speedup over autoregressive decoding: E / (K·c + v), with c = draft step / target
// step and v = verify pass / target step, all measured.
double predicted_speedup(double alpha, int k, double c, double v);

// The same for a static draft tree under controlled acceptance (speculative_generate_tree):
// depth t is reached when one of its b_t candidates is the target's token, each in rank order with
// probability α: E = 1 + Σ_t Π_{s<=t} (1 − (1 − α)^{b_s}). A chain (all b = 1) gives expected_tokens.
double expected_tokens_tree(double alpha, const std::vector<int>& shape);

// Prompt lookup (n-gram) drafting: the continuation of the most recent earlier occurrence of the
// last n tokens of `history`, n from ngram_max down to ngram_min; at most k tokens, maybe none.
std::vector<int32_t> ngram_propose(const std::vector<int32_t>& history, int k, int ngram_min, int ngram_max);

// Drafted candidates as a token tree: node i holds tokens[i] and hangs under node parents[i]
// (-1: under the step's root, the last accepted token). Parents come before their children.
struct DraftTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;
  static DraftTree chain(const std::vector<int32_t>& tokens);  // each token under the one before
  int size() const { return static_cast<int>(tokens.size()); }
  int depth(int node) const;
  int max_depth() const;
  // Adds `path` under the root, sharing the nodes of an equal prefix already in the tree.
  void add_path(const std::vector<int32_t>& path);
};

// Prompt lookup with several candidates: the continuations (up to k tokens) of up to `branches`
// earlier occurrences of the last n tokens, most recent first, n from ngram_max down to
// ngram_min, distinct ones only, merged into a tree. branches = 1 gives ngram_propose's chain.
DraftTree ngram_propose_tree(const std::vector<int32_t>& history, int k, int branches, int ngram_min, int ngram_max);

// Greedy tree verification: choice[0] is the target's choice after the root, choice[1 + i] after
// node i's path. Walks down from the root while a child holds the target's choice; `path` gets
// the accepted nodes, `emitted` their tokens and then the target's choice where the walk stopped.
// Returns the accepted count.
int verify_tree_greedy(const DraftTree& tree, const std::vector<int32_t>& choice, std::vector<int32_t>& emitted,
                       std::vector<int>& path);

// Greedy verification: target[i] is the target's choice after the i-th prefix (i = 0..K, so
// target.size() = drafts.size() + 1). Returns the accepted count j; `emitted` gets the drafts'
// first j tokens and then target[j] (the correction, or the bonus token when all were accepted).
int verify_greedy(const std::vector<int32_t>& drafts, const std::vector<int32_t>& target, std::vector<int32_t>& emitted);

// Uniforms in [0, 1), one per call: where the verification's random decisions come from.
using UniformSource = std::function<float()>;

// Rejection sampling (Leviathan et al. 2023; Chen et al. 2023): draft i is accepted with
// probability min(1, p_i(d_i)/q_i(d_i)); at the first rejection the token is drawn from
// norm(max(0, p_i − q_i)); when all are accepted, the bonus token is drawn from p_K. p holds K+1
// rows, q holds K rows (row i: the distribution d_i was drawn from), each `vocab` wide; q empty:
// the drafts are deterministic (n-gram lookup), q_i a point mass on d_i. The emitted tokens are
// distributed exactly as sampling the target alone. A chain of verify_tree_sampled.
int verify_sampled(const std::vector<int32_t>& drafts, const std::vector<float>& p, const std::vector<float>& q, int vocab,
                   const UniformSource& uniform, std::vector<int32_t>& emitted);

// A row of a distribution, `vocab` wide: row 0 after the step's root, row 1 + i after node i.
using DistributionRow = std::function<const float*(int row)>;

// Tree rejection sampling (recursive rejection sampling: SpecInfer, Miao et al. 2024; without
// replacement as in Jeon et al. 2024 and EAGLE). At a node whose target distribution is p_1 its
// children are tried in index order; the j-th was drawn from q_j, where q_1 = draft(row) and q_{j+1}
// is q_j without the j-th child, renormalised (children drawn without replacement:
// draw_distinct), or, with no `draft` (deterministic candidates, n-gram lookup), q_j is a point
// mass on the j-th child. Child j is accepted with probability min(1, p_j(c_j)/q_j(c_j)) and the
// walk moves down to it; a rejection leaves p_{j+1} = norm(max(0, p_j − q_j)); when every child is
// rejected (or there are none) the token is drawn from what is left of p. The emitted tokens are
// distributed exactly as sampling the target alone. `target(row)` is called only for the rows the
// walk reaches, `draft(row)` only for those with children. `path` gets the accepted nodes,
// `emitted` their tokens and then the drawn one. Returns the accepted count.
int verify_tree_sampled(const DraftTree& tree, int vocab, const DistributionRow& target, const DistributionRow& draft,
                        const UniformSource& uniform, std::vector<int32_t>& emitted, std::vector<int>& path);

// Up to b distinct tokens drawn from q without replacement (each from q with the earlier ones
// removed, renormalised): the order verify_tree_sampled expects. Fewer when q has fewer tokens
// of non-zero probability.
std::vector<int32_t> draw_distinct(const float* q, int vocab, int b, const UniformSource& uniform);

// Draws a token from a probability row with uniform u (cumulative in index order).
int32_t draw(const float* probs, int vocab, float u);

// Where a step's drafted tokens come from.
enum class DraftSource {
  Model,       // the draft model's own choices (greedy or sampled)
  Controlled,  // the draft model runs, but each drafted token is the target's next token with probability α
  Ngram,       // prompt lookup over the history, no draft model
};

struct SpecConfig {
  int k = 5;
  // Tree drafting (tree verification in one pass): children per node at each depth (the draft
  // model's top choices; `k` is then ignored), or for n-gram drafting the candidates looked up.
  // Empty / 0: a chain of k tokens.
  std::vector<int> tree;
  // Dynamic trees (EAGLE-2; greedy, draft model): > 0 verifies this many nodes chosen by the
  // draft's confidence (path probability); the tree's depth is tree.size(), each depth expands
  // the tree[0] most confident new nodes with tree[0] children each. 0: the static shape.
  int dynamic_nodes = 0;
  int branches = 0;
  DraftSource source = DraftSource::Model;
  double alpha = 0.8;  // Controlled
  int ngram_min = 1, ngram_max = 3;
  model::SamplingParams sampling;  // temperature 0: greedy verification; else rejection sampling
  // Sampled verification, when set: receives, for every emitted token, the target distribution
  // (vocab wide) it was accepted or drawn against — what a row's gate compares with the target's
  // own distribution from a fresh prefill.
  std::vector<std::vector<float>>* record_target = nullptr;
  // The same for batched sampled verification (speculative_generate_batch): per sequence.
  std::vector<std::vector<std::vector<float>>>* record_batch = nullptr;
  uint64_t seed = 1;
};

struct SpecStats {
  int64_t steps = 0;   // sequence-steps (a batched pass counts once per sequence in it)
  int64_t passes = 0;  // verify passes
  int64_t drafted = 0, accepted = 0;
  int64_t tested = 0;  // drafted tokens the verification reached (up to the first rejection)
  int64_t emitted = 0;
  double draft_seconds = 0, verify_seconds = 0;
  int64_t draft_forward = 0;  // draft model forward calls
  int64_t tree_nodes = 0;     // tree drafting: candidate tokens verified (all branches)
  // Lookahead decoding: tokens accepted along pool n-grams and along the Jacobi window's own
  // columns, and the pool's n-grams at the end.
  int64_t pool_accepted = 0, window_accepted = 0, pool_ngrams = 0;
  // Per draft position i (0-based; depth i + 1 of a tree): the steps that drafted it, and those
  // whose first i + 1 tokens were all accepted. vLLM's acceptance per position is their ratio.
  std::vector<int64_t> drafted_at, accepted_at;
  void count_positions(int drafted_depth, int accepted_depth);
  double acceptance_at(size_t i) const {
    return i < drafted_at.size() && drafted_at[i] ? static_cast<double>(accepted_at[i]) / static_cast<double>(drafted_at[i]) : 0;
  }
  // Per-token acceptance α̂: accepted among the drafted tokens verification reached (the tokens
  // after a rejection are never tested). The α of the analytic model.
  double acceptance() const { return tested ? static_cast<double>(accepted) / static_cast<double>(tested) : 0; }
  double drafts_kept() const { return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0; }
  double tokens_per_step() const { return steps ? static_cast<double>(emitted) / static_cast<double>(steps) : 0; }
};

// Generates `n` tokens after the target sequence `target_seq` (its prompt prefilled, its last
// prompt token `last` not yet in the cache). `draft`/`draft_seq` as for the target (nullptr for
// n-gram drafting). `truth(i)` is the target's i-th next token for Controlled drafting (its
// autoregressive trajectory) and the forced trajectory for n-gram on a text (where the target's
// own choice is replaced by the text: `force_truth`). `history` holds the prompt and receives the
// generated tokens.
std::vector<int32_t> speculative_generate(model::Model& target, int target_seq, model::Model* draft, int draft_seq, int32_t last,
                                          int n, const SpecConfig& cfg, const std::function<int32_t(int64_t)>& truth,
                                          bool force_truth, std::vector<int32_t>& history, SpecStats& stats);

// As speculative_generate with a draft tree verified in one target pass (the models must
// implement prefill_tree). Greedy: the walk follows the target's choices. Sampled (draft model's
// own distribution, or n-gram candidates): tree rejection sampling (verify_tree_sampled), the
// draft model's candidates at each node drawn without replacement from its distribution.
// Controlled drafting (greedy only): at each depth on the target's trajectory the candidates, in
// rank order, are the target's token with probability α each until one is (a chain's α for one
// child); the others, and all children off the trajectory, are distinct other tokens.
std::vector<int32_t> speculative_generate_tree(model::Model& target, int target_seq, model::Model* draft, int draft_seq,
                                               int32_t last, int n, const SpecConfig& cfg,
                                               const std::function<int32_t(int64_t)>& truth, bool force_truth,
                                               std::vector<int32_t>& history, SpecStats& stats);

// Batched speculative decoding (draft model; greedy with controlled or model acceptance, or
// sampled with model acceptance: each sequence's chain by rejection sampling, its draws from a
// stream of its own): the sequences step together — each step drafts min(K, tokens left − 1) tokens for every unfinished
// sequence (the draft's pending tokens in one prefill_batch, then batched decode steps of the
// sequences still drafting), verifies them all
// in one target prefill_batch, and keeps each sequence's agreeing prefix plus the target's token.
// truths[b] is sequence b's target trajectory (Controlled). Returns each sequence's n tokens.
std::vector<std::vector<int32_t>> speculative_generate_batch(model::Model& target, const std::vector<int>& target_seqs,
                                                             model::Model& draft, const std::vector<int>& draft_seqs,
                                                             const std::vector<int32_t>& lasts, int n, const SpecConfig& cfg,
                                                             const std::vector<std::function<int32_t(int64_t)>>& truths,
                                                             SpecStats& stats);
// The target alone on a batch: n decode steps of every sequence together (greedy, or sampled:
// the engine draws row b of step i with the uniform of (seed, i, b)).
std::vector<std::vector<int32_t>> autoregressive_generate_batch(model::Model& target, const std::vector<int>& target_seqs,
                                                                const std::vector<int32_t>& lasts, int n,
                                                                const model::SamplingParams& sampling = {});

// Parses a tree shape "3x2x1" (children per node at each depth, 1..16 each); empty when malformed.
std::vector<int> parse_tree_shape(const std::string& shape);

// The target alone: n tokens by decode steps (greedy or sampled with the same uniforms).
std::vector<int32_t> autoregressive_generate(model::Model& target, int target_seq, int32_t last, int n,
                                             const model::SamplingParams& sampling, const std::function<int32_t(int64_t)>& truth,
                                             bool force_truth);

}  // namespace ib::specdec
