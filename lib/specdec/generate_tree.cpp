// The tree generation loop (speculative_generate_tree: a draft tree verified in one target pass)
// and EAGLE-2's dynamic draft tree, which only this loop drafts.
#include "specdec/specdec.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "numerics/random.h"
#include "specdec/specdec_internal.h"
#include "specdec/step_helpers.h"

namespace ib::specdec {

namespace {

using detail::append_emitted;
using detail::argmax_row;
using detail::check_sampled;
using detail::count_step;
using detail::draft_distribution;
using detail::fit;
using detail::since;
using detail::verify_logits_sampled;

}  // namespace

namespace {

// EAGLE-2's dynamic draft tree (Li et al. 2024): a node's confidence is the product of the draft's
// probabilities along its path. From the root (the draft's logits row `root`), each depth adds the
// `width` most likely children of every expanded node and expands the `width` most confident of
// them (one draft tree pass); at the end the `nodes` most confident of all become the tree (a
// child is never more confident than its parent, so they form a tree). draft_slot: per node its
// index in the draft's open tree, -1 for nodes never expanded.
DraftTree draft_dynamic_tree(model::Model& draft, int draft_seq, std::vector<float>& rows, int tv, int depth, int width,
                             int nodes, SpecStats& stats, std::vector<int>& draft_slot, bool& draft_open) {
  struct Cand {
    int32_t token;
    int parent;  // pool index, -1: the root
    double logp;
    int depth;
    int slot = -1;  // index in the draft's tree once expanded
  };
  const int dv = draft.config().vocab, nv = std::min(dv, tv);
  std::vector<Cand> pool;
  std::vector<int> frontier = {-1};  // pool indices; row f of `rows` holds frontier[f]'s next-token logits
  int sent = 0;                      // nodes in the draft's open tree
  auto more_confident = [&](int a, int b) {
    const Cand &x = pool[static_cast<size_t>(a)], &y = pool[static_cast<size_t>(b)];
    return x.logp > y.logp || (x.logp == y.logp && (x.depth < y.depth || (x.depth == y.depth && a < b)));
  };
  std::vector<int32_t> idx(static_cast<size_t>(nv));
  for (int t = 0; t < depth; ++t) {
    std::vector<int> added;
    for (size_t f = 0; f < frontier.size(); ++f) {
      const float* row = &rows[f * static_cast<size_t>(dv)];
      // log-softmax over the tokens the target can take
      const float mx = *std::max_element(row, row + nv);
      double z = 0;
      for (int i = 0; i < nv; ++i) z += std::exp(static_cast<double>(row[i] - mx));
      const double log_z = static_cast<double>(mx) + std::log(z);
      std::iota(idx.begin(), idx.end(), 0);
      const int take = std::min(width, nv);
      std::partial_sort(idx.begin(), idx.begin() + take, idx.end(),
                        [&](int32_t a, int32_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
      const double base = frontier[f] < 0 ? 0.0 : pool[static_cast<size_t>(frontier[f])].logp;
      for (int r = 0; r < take; ++r) {
        const int32_t tok = idx[static_cast<size_t>(r)];
        pool.push_back({tok, frontier[f], base + static_cast<double>(row[tok]) - log_z, t + 1});
        added.push_back(static_cast<int>(pool.size()) - 1);
      }
    }
    if (t + 1 == depth) break;
    // Expand the most confident of the new nodes: their logits in one draft tree pass.
    const size_t expand = std::min(added.size(), static_cast<size_t>(width));
    std::partial_sort(added.begin(), added.begin() + static_cast<std::ptrdiff_t>(expand), added.end(), more_confident);
    frontier.assign(added.begin(), added.begin() + static_cast<std::ptrdiff_t>(expand));
    std::vector<int32_t> tok, par;
    for (int c : frontier) {
      Cand& x = pool[static_cast<size_t>(c)];
      tok.push_back(x.token);
      par.push_back(x.parent < 0 ? -1 : pool[static_cast<size_t>(x.parent)].slot);
      x.slot = sent++;
    }
    rows.resize(frontier.size() * static_cast<size_t>(dv));
    model::StepOutput o;
    o.logits = rows.data();
    draft.prefill_tree(draft_seq, tok.data(), par.data(), static_cast<int>(tok.size()), o);
    ++stats.draft_forward;
    draft_open = true;
  }
  // The most confident nodes, parents before children.
  std::vector<int> pick(pool.size());
  std::iota(pick.begin(), pick.end(), 0);
  const size_t keep = std::min(pick.size(), static_cast<size_t>(nodes));
  std::partial_sort(pick.begin(), pick.begin() + static_cast<std::ptrdiff_t>(keep), pick.end(), more_confident);
  pick.resize(keep);
  std::sort(pick.begin(), pick.end(), [&](int a, int b) {
    return pool[static_cast<size_t>(a)].depth < pool[static_cast<size_t>(b)].depth ||
           (pool[static_cast<size_t>(a)].depth == pool[static_cast<size_t>(b)].depth && a < b);
  });
  std::vector<int> at(pool.size(), -1);  // pool index -> tree node
  DraftTree tree;
  for (int c : pick) {
    const Cand& x = pool[static_cast<size_t>(c)];
    const int parent = x.parent < 0 ? -1 : at[static_cast<size_t>(x.parent)];
    if (x.parent >= 0 && parent < 0) throw std::logic_error("dynamic tree: a node kept without its parent");
    at[static_cast<size_t>(c)] = tree.size();
    tree.tokens.push_back(x.token);
    tree.parents.push_back(parent);
    draft_slot.push_back(x.slot);
  }
  return tree;
}

}  // namespace

std::vector<int32_t> speculative_generate_tree(model::Model& target, int target_seq, model::Model* draft, int draft_seq,
                                               int32_t last, int n, const SpecConfig& cfg,
                                               const std::function<int32_t(int64_t)>& truth, bool force_truth,
                                               std::vector<int32_t>& history, SpecStats& stats) {
  check_sampled(cfg, force_truth);
  const bool sampled = !cfg.sampling.greedy();
  const bool ngram = cfg.source == DraftSource::Ngram;
  if (!ngram && (cfg.tree.empty() || !draft)) throw std::invalid_argument("tree drafting needs a draft model and a tree shape");
  const int tv = target.config().vocab;
  std::vector<int32_t> out;
  std::vector<int32_t> pending = {last};  // accepted tokens the draft model has not seen yet
  std::vector<float> logits, dl;
  std::vector<std::vector<float>> q;  // sampled, draft model: per row, the distribution its children were drawn from
  uint64_t step = 0;
  while (static_cast<int>(out.size()) < n) {
    const int depth_cap = n - static_cast<int>(out.size()) - 1;
    DraftTree tree;
    q.clear();
    int draws = 0;
    const UniformSource uniform = [&] { return model::sample_uniform(cfg.seed ^ 0xD1ull, step, draws++); };
    std::vector<int> draft_slot;  // per node: its index in the draft model's open tree (-1: not there)
    bool draft_open = false;      // the draft model has an open tree (prefill_tree was called)
    bool drafted = false;
    // ---- draft ----
    const auto t0 = std::chrono::steady_clock::now();
    if (ngram) {
      tree = ngram_propose_tree(history, std::min(cfg.k, depth_cap), std::max(1, cfg.branches), cfg.ngram_min, cfg.ngram_max);
    } else if (depth_cap > 0) {
      drafted = true;
      const int dv = draft->config().vocab;
      int depth = std::min(static_cast<int>(cfg.tree.size()), depth_cap);
      std::vector<int32_t> in(pending.size());
      for (size_t i = 0; i < pending.size(); ++i) in[i] = fit(pending[i], dv);
      dl.resize(static_cast<size_t>(dv));
      model::StepOutput o;
      o.logits = dl.data();
      draft->prefill(draft_seq, in.data(), static_cast<int>(in.size()), 1, o);
      ++stats.draft_forward;
      if (cfg.dynamic_nodes > 0) {
        tree =
            draft_dynamic_tree(*draft, draft_seq, dl, tv, depth, cfg.tree[0], cfg.dynamic_nodes, stats, draft_slot, draft_open);
        depth = 0;  // skips the static shape below
      }
      std::vector<int> frontier = {-1};  // nodes whose children come next; row f of dl is frontier[f]'s
      std::vector<uint8_t> on_truth;     // Controlled: the node's path is the target's trajectory
      for (int t = 0; t < depth; ++t) {
        const int b = cfg.tree[static_cast<size_t>(t)];
        const int64_t pos = static_cast<int64_t>(out.size()) + t;
        std::vector<int> next;
        for (size_t f = 0; f < frontier.size(); ++f) {
          const int parent = frontier[f];
          std::vector<int32_t> cand;
          int hit = b;  // Controlled: the rank holding the target's token (b: none)
          if (cfg.source == DraftSource::Controlled) {
            const int32_t want = truth(pos);
            const uint64_t ctr = (static_cast<uint64_t>(pos) * 131u + step * 7u) * 4099u + static_cast<uint64_t>(parent + 1);
            if (parent < 0 || on_truth[static_cast<size_t>(parent)])
              for (int r = 0; r < b && hit == b; ++r)
                if (static_cast<double>(random_bits(cfg.seed ^ 0x7EEull, ctr * 17u + static_cast<uint64_t>(r)) >> 11) *
                        (1.0 / 9007199254740992.0) <
                    cfg.alpha)
                  hit = r;
            // Distinct other tokens: want + 1 + off + r (mod vocab) never equals want for r < b.
            const uint64_t off = (random_bits(cfg.seed ^ 0x0FFull, ctr) >> 3) % static_cast<uint64_t>(std::max(1, tv - 1 - b));
            for (int r = 0; r < b; ++r)
              cand.push_back(r == hit ? want : static_cast<int32_t>((want + 1 + static_cast<int64_t>(off) + r) % tv));
          } else if (sampled) {
            // The draft's own distribution, its candidates drawn without replacement.
            q.resize(static_cast<size_t>(tree.size()) + 1);
            std::vector<float>& qf = q[static_cast<size_t>(parent + 1)];
            draft_distribution(&dl[f * static_cast<size_t>(dv)], dv, tv, cfg.sampling, qf);
            cand = draw_distinct(qf.data(), tv, b, uniform);
          } else {
            const float* row = &dl[f * static_cast<size_t>(dv)];
            std::vector<int32_t> idx(static_cast<size_t>(dv));
            for (int i = 0; i < dv; ++i) idx[static_cast<size_t>(i)] = i;
            const int take = std::min(b, dv);
            std::partial_sort(idx.begin(), idx.begin() + take, idx.end(),
                              [&](int32_t a, int32_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
            cand.assign(idx.begin(), idx.begin() + take);
          }
          for (size_t r = 0; r < cand.size(); ++r) {
            tree.tokens.push_back(cand[r]);
            tree.parents.push_back(parent);
            on_truth.push_back(static_cast<int>(r) == hit ? 1 : 0);
            next.push_back(tree.size() - 1);
          }
        }
        frontier = std::move(next);
        if (t + 1 == depth) break;
        // The new depth through the draft model in one tree pass: the next depth's logits. The
        // draft's tree holds the nodes of depths 1..depth-1 in our order, so indices agree.
        std::vector<int32_t> tok, par;
        for (int node : frontier) {
          tok.push_back(fit(tree.tokens[static_cast<size_t>(node)], dv));
          par.push_back(tree.parents[static_cast<size_t>(node)]);
        }
        dl.resize(frontier.size() * static_cast<size_t>(dv));
        o.logits = dl.data();
        draft->prefill_tree(draft_seq, tok.data(), par.data(), static_cast<int>(tok.size()), o);
        ++stats.draft_forward;
        draft_open = true;
      }
      if (cfg.dynamic_nodes <= 0) {
        // The draft's tree holds every node but the deepest level's, at the same indices.
        for (int i = 0; i < tree.size(); ++i) draft_slot.push_back(draft_open && tree.depth(i) < depth ? i : -1);
      }
    }
    stats.draft_seconds += since(t0);
    // ---- verify: the root (last) and every node in one target pass ----
    const int nodes = tree.size();
    std::vector<int32_t> in = {fit(last, tv)}, par = {-1};
    for (int i = 0; i < nodes; ++i) {
      in.push_back(fit(tree.tokens[static_cast<size_t>(i)], tv));
      par.push_back(tree.parents[static_cast<size_t>(i)] + 1);
    }
    logits.resize(static_cast<size_t>(nodes + 1) * static_cast<size_t>(tv));
    const auto t1 = std::chrono::steady_clock::now();
    model::StepOutput o;
    o.logits = logits.data();
    target.prefill_tree(target_seq, in.data(), par.data(), nodes + 1, o);
    stats.verify_seconds += since(t1);
    std::vector<int32_t> emitted;
    std::vector<int> path;
    int j;
    if (sampled) {
      q.resize(static_cast<size_t>(nodes) + 1);
      j = verify_logits_sampled(tree, logits.data(), tv, cfg, ngram ? nullptr : &q, step, emitted, path);
    } else {
      std::vector<int32_t> choice(static_cast<size_t>(nodes + 1));
      for (int i = 0; i <= nodes; ++i)
        choice[static_cast<size_t>(i)] = force_truth ? truth(static_cast<int64_t>(out.size()) + (i == 0 ? 0 : tree.depth(i - 1)))
                                                     : argmax_row(&logits[static_cast<size_t>(i) * tv], tv);
      j = verify_tree_greedy(tree, choice, emitted, path);
    }
    const int stop = path.empty() ? -1 : path.back();
    const bool rejected = std::find(tree.parents.begin(), tree.parents.end(), stop) != tree.parents.end();
    count_step(stats, nodes, j, rejected, emitted);
    stats.count_positions(tree.max_depth(), j);
    stats.tree_nodes += nodes;
    ++step;
    // The target keeps the root and the accepted path; the new last token is not cached yet.
    std::vector<int> keep = {0};
    for (int node : path) keep.push_back(node + 1);
    target.keep_tree_path(target_seq, keep);
    if (draft && !ngram) {
      if (drafted) {
        // The draft keeps the accepted nodes it holds (a prefix of the path); the rest (at most
        // the last: nodes outside the draft's tree have no children) it has not seen.
        std::vector<int> kept;
        for (int node : path) {
          if (draft_slot[static_cast<size_t>(node)] < 0) break;
          kept.push_back(draft_slot[static_cast<size_t>(node)]);
        }
        if (draft_open) draft->keep_tree_path(draft_seq, kept);
        pending.clear();
        for (size_t i = kept.size(); i < path.size(); ++i) pending.push_back(tree.tokens[static_cast<size_t>(path[i])]);
      }
      pending.push_back(emitted.back());
    }
    append_emitted(emitted, out, history);
    last = emitted.back();
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

}  // namespace ib::specdec
