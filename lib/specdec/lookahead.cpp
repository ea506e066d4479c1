// Lookahead decoding: the n-gram pool, the Jacobi window as a token tree, and the generation loop.
#include "specdec/lookahead.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "numerics/random.h"
#include "specdec/step_helpers.h"

namespace ib::specdec {

NgramPool::NgramPool(int n, int capacity) : n_(n), capacity_(capacity) {
  if (n < 2 || capacity < 1)
    throw std::invalid_argument(fmt::format("n-gram pool of {}-grams, {} per token: want n >= 2, capacity >= 1", n, capacity));
}

void NgramPool::add(int32_t first, const int32_t* cont) {
  std::vector<int32_t> c(cont, cont + n_ - 1);
  std::deque<std::vector<int32_t>>& q = map_[first];
  const auto it = std::find(q.begin(), q.end(), c);
  if (it != q.end()) {
    if (it != q.begin()) {
      q.erase(it);
      q.push_front(std::move(c));
    }
    return;
  }
  q.push_front(std::move(c));
  ++size_;
  if (static_cast<int>(q.size()) > capacity_) {
    q.pop_back();
    --size_;
  }
}

void NgramPool::add_history(const std::vector<int32_t>& h, int fresh) {
  const int64_t size = static_cast<int64_t>(h.size());
  for (int64_t i = std::max<int64_t>(0, size - fresh - (n_ - 1)); i + n_ <= size; ++i)
    add(h[static_cast<size_t>(i)], &h[static_cast<size_t>(i) + 1]);
}

const std::deque<std::vector<int32_t>>& NgramPool::candidates(int32_t first) const {
  const auto it = map_.find(first);
  return it == map_.end() ? none_ : it->second;
}

int verify_tree_longest(const DraftTree& tree, const std::vector<int32_t>& choice, std::vector<int32_t>& emitted,
                        std::vector<int>& path, int max_depth) {
  const int m = tree.size();
  if (choice.size() != static_cast<size_t>(m) + 1)
    throw std::invalid_argument("verify_tree_longest needs 1 + nodes target choices");
  std::vector<int> depth(static_cast<size_t>(m), 0);  // 0: the node's path leaves the target's choices
  int best = -1;
  for (int i = 0; i < m; ++i) {
    const int p = tree.parents[static_cast<size_t>(i)];
    if (p >= i) throw std::invalid_argument("verify_tree_longest: a parent after its child");
    if (p >= 0 && depth[static_cast<size_t>(p)] == 0) continue;
    if (tree.tokens[static_cast<size_t>(i)] != choice[static_cast<size_t>(p + 1)]) continue;
    const int d = (p < 0 ? 0 : depth[static_cast<size_t>(p)]) + 1;
    if (d > max_depth) continue;
    depth[static_cast<size_t>(i)] = d;
    if (best < 0 || d > depth[static_cast<size_t>(best)]) best = i;
  }
  const size_t first = path.size();
  for (int at = best; at >= 0; at = tree.parents[static_cast<size_t>(at)]) path.push_back(at);
  std::reverse(path.begin() + static_cast<std::ptrdiff_t>(first), path.end());
  for (size_t i = first; i < path.size(); ++i) emitted.push_back(tree.tokens[static_cast<size_t>(path[i])]);
  emitted.push_back(choice[static_cast<size_t>(best + 1)]);
  return static_cast<int>(path.size() - first);
}

int lookahead_max_nodes(const LookaheadConfig& cfg) {
  return cfg.candidates * (cfg.ngram - 1) + (cfg.window - 1) + (cfg.ngram - 2) * cfg.window;
}

namespace {

using detail::argmax_row;
using detail::fit;
using detail::since;

}  // namespace

std::vector<int32_t> lookahead_generate(model::Model& target, int target_seq, int32_t last, int n, const LookaheadConfig& cfg,
                                        const std::function<int32_t(int64_t)>& truth, bool force_truth,
                                        std::vector<int32_t>& history, SpecStats& stats) {
  const int W = cfg.window, N = cfg.ngram, G = cfg.candidates;
  if (W < 1 || N < 2 || G < 0)
    throw std::invalid_argument(
        fmt::format("lookahead: window {} ngram {} candidates {}: want window >= 1, ngram >= 2, candidates >= 0", W, N, G));
  const int tv = target.config().vocab, levels = N - 1;
  NgramPool pool(N, std::max(1, G));
  if (cfg.prompt_pool) pool.add_history(history, static_cast<int>(history.size()));
  // The window starts with tokens drawn from the prompt (column 0 of level 0 is always the root).
  std::vector<std::vector<int32_t>> level(static_cast<size_t>(levels), std::vector<int32_t>(static_cast<size_t>(W), 0));
  for (int j = 0; j < levels; ++j)
    for (int c = 0; c < W; ++c)
      if (!history.empty())
        level[static_cast<size_t>(j)][static_cast<size_t>(c)] =
            fit(history[random_bits(cfg.seed ^ 0x10AD5ull, static_cast<uint64_t>(j * W + c)) % history.size()], tv);
  std::vector<int32_t> out, tok, in, par, choice, guess(static_cast<size_t>(W));
  std::vector<int> depth;
  std::vector<std::vector<int>> node(static_cast<size_t>(levels), std::vector<int>(static_cast<size_t>(W), 0));
  std::vector<float> logits;
  while (static_cast<int>(out.size()) < n) {
    const int left = n - static_cast<int>(out.size());
    const auto t0 = std::chrono::steady_clock::now();
    // The step's tree: the root, the pool's n-grams after it, the window. `tok` holds the tokens
    // compared with the target's choices, `in` what the model reads.
    tok = {last};
    par = {-1};
    depth = {0};
    auto push = [&](int32_t t, int parent) {
      tok.push_back(t);
      par.push_back(parent);
      depth.push_back(depth[static_cast<size_t>(parent)] + 1);
      return static_cast<int>(tok.size()) - 1;
    };
    DraftTree vt;
    int taken = 0;
    for (const std::vector<int32_t>& cand : pool.candidates(last)) {
      if (taken++ == G) break;
      vt.add_path(cand);
    }
    for (int i = 0; i < vt.size(); ++i) push(vt.tokens[static_cast<size_t>(i)], vt.parents[static_cast<size_t>(i)] + 1);
    const int window_first = static_cast<int>(tok.size());
    for (int c = 0; c < W; ++c)
      node[0][static_cast<size_t>(c)] = c == 0 ? 0 : push(level[0][static_cast<size_t>(c)], node[0][static_cast<size_t>(c) - 1]);
    for (int j = 1; j < levels; ++j)
      for (int c = 0; c < W; ++c)
        node[static_cast<size_t>(j)][static_cast<size_t>(c)] =
            push(level[static_cast<size_t>(j)][static_cast<size_t>(c)], node[static_cast<size_t>(j) - 1][static_cast<size_t>(c)]);
    const int m = static_cast<int>(tok.size());
    in.resize(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) in[static_cast<size_t>(i)] = fit(tok[static_cast<size_t>(i)], tv);
    stats.draft_seconds += since(t0);
    // ---- one target pass ----
    logits.resize(static_cast<size_t>(m) * static_cast<size_t>(tv));
    model::StepOutput o;
    o.logits = logits.data();
    const auto t1 = std::chrono::steady_clock::now();
    target.prefill_tree(target_seq, in.data(), par.data(), m, o);
    stats.verify_seconds += since(t1);
    // ---- verify: the deepest path of the target's own choices ----
    const auto t2 = std::chrono::steady_clock::now();
    choice.resize(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i)
      choice[static_cast<size_t>(i)] = force_truth ? truth(static_cast<int64_t>(out.size()) + depth[static_cast<size_t>(i)])
                                                   : argmax_row(&logits[static_cast<size_t>(i) * static_cast<size_t>(tv)], tv);
    DraftTree all;
    all.tokens.assign(tok.begin() + 1, tok.end());
    for (int i = 1; i < m; ++i) all.parents.push_back(par[static_cast<size_t>(i)] - 1);
    std::vector<int32_t> emitted;
    std::vector<int> path;
    const int j = verify_tree_longest(all, choice, emitted, path, left - 1);
    ++stats.steps;
    ++stats.passes;
    stats.drafted += m - 1;
    stats.tree_nodes += m - 1;
    stats.accepted += j;
    stats.emitted += static_cast<int64_t>(emitted.size());
    stats.count_positions(std::min(left - 1, *std::max_element(depth.begin(), depth.end())), j);
    if (j > 0) (path[0] + 1 < window_first ? stats.pool_accepted : stats.window_accepted) += j;
    std::vector<int> keep = {0};
    for (int nd : path) keep.push_back(nd + 1);
    target.keep_tree_path(target_seq, keep);
    // ---- the window moves: each column's prediction ends an n-gram of the model's own ----
    for (int c = 0; c < W; ++c) {
      const int row = node[static_cast<size_t>(levels) - 1][static_cast<size_t>(c)];
      guess[static_cast<size_t>(c)] = argmax_row(&logits[static_cast<size_t>(row) * static_cast<size_t>(tv)], tv);
      std::vector<int32_t> gram;
      for (int lv = 0; lv < levels; ++lv)
        gram.push_back(in[static_cast<size_t>(node[static_cast<size_t>(lv)][static_cast<size_t>(c)])]);
      gram.push_back(guess[static_cast<size_t>(c)]);
      pool.add(gram[0], gram.data() + 1);
    }
    for (int lv = 0; lv + 1 < levels; ++lv) level[static_cast<size_t>(lv)] = level[static_cast<size_t>(lv) + 1];
    level[static_cast<size_t>(levels) - 1] = guess;
    out.insert(out.end(), emitted.begin(), emitted.end());
    history.insert(history.end(), emitted.begin(), emitted.end());
    if (cfg.prompt_pool) pool.add_history(history, static_cast<int>(emitted.size()));
    stats.draft_seconds += since(t2);
    last = emitted.back();
  }
  out.resize(static_cast<size_t>(n));
  stats.pool_ngrams = pool.size();
  return out;
}

}  // namespace ib::specdec
