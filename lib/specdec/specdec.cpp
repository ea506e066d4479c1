#include "specdec/specdec.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "core/random.h"
#include "specdec/step_helpers.h"

namespace ib::specdec {

void SpecStats::count_positions(int drafted_depth, int accepted_depth) {
  if (static_cast<int>(drafted_at.size()) < drafted_depth) {
    drafted_at.resize(static_cast<size_t>(drafted_depth), 0);
    accepted_at.resize(static_cast<size_t>(drafted_depth), 0);
  }
  for (int i = 0; i < drafted_depth; ++i) ++drafted_at[static_cast<size_t>(i)];
  for (int i = 0; i < accepted_depth && i < drafted_depth; ++i) ++accepted_at[static_cast<size_t>(i)];
}

double expected_tokens(double alpha, int k) {
  if (alpha >= 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double predicted_speedup(double alpha, int k, double c, double v) { return expected_tokens(alpha, k) / (k * c + v); }

double expected_tokens_tree(double alpha, const std::vector<int>& shape) {
  double e = 1, reach = 1;
  for (int b : shape) e += reach *= 1.0 - std::pow(1.0 - alpha, b);
  return e;
}

std::vector<int32_t> ngram_propose(const std::vector<int32_t>& h, int k, int ngram_min, int ngram_max) {
  const int len = static_cast<int>(h.size());
  for (int n = std::min(ngram_max, len - 1); n >= std::max(ngram_min, 1); --n) {
    // The most recent earlier occurrence of the last n tokens (ending before the last position).
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
      const int from = start + n;
      const int take = std::min(k, len - from);
      if (take <= 0) continue;
      return std::vector<int32_t>(h.begin() + from, h.begin() + from + take);
    }
  }
  return {};
}

DraftTree DraftTree::chain(const std::vector<int32_t>& tokens) {
  DraftTree t;
  t.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) t.parents.push_back(static_cast<int32_t>(i) - 1);
  return t;
}

int DraftTree::depth(int node) const {
  int d = 0;
  for (int x = node; x >= 0; x = parents[static_cast<size_t>(x)]) ++d;
  return d;
}

int DraftTree::max_depth() const {
  int m = 0;
  for (int i = 0; i < size(); ++i) m = std::max(m, depth(i));
  return m;
}

void DraftTree::add_path(const std::vector<int32_t>& path) {
  int at = -1;
  for (int32_t t : path) {
    int child = -1;
    for (int i = 0; i < size() && child < 0; ++i)
      if (parents[static_cast<size_t>(i)] == at && tokens[static_cast<size_t>(i)] == t) child = i;
    if (child < 0) {
      tokens.push_back(t);
      parents.push_back(at);
      child = size() - 1;
    }
    at = child;
  }
}

DraftTree ngram_propose_tree(const std::vector<int32_t>& h, int k, int branches, int ngram_min, int ngram_max) {
  DraftTree tree;
  const int len = static_cast<int>(h.size());
  int found = 0;
  for (int n = std::min(ngram_max, len - 1); n >= std::max(ngram_min, 1) && found < branches; --n)
    for (int start = len - n - 1; start >= 0 && found < branches; --start) {
      if (!std::equal(h.begin() + start, h.begin() + start + n, h.end() - n)) continue;
      const int from = start + n;
      const int take = std::min(k, len - from);
      if (take <= 0) continue;
      const int before = tree.size();
      tree.add_path(std::vector<int32_t>(h.begin() + from, h.begin() + from + take));
      if (tree.size() > before) ++found;  // a continuation already in the tree adds nothing
    }
  return tree;
}

int verify_tree_greedy(const DraftTree& tree, const std::vector<int32_t>& choice, std::vector<int32_t>& emitted, std::vector<int>& path) {
  if (choice.size() != static_cast<size_t>(tree.size()) + 1) throw std::invalid_argument("verify_tree_greedy needs 1 + nodes target choices");
  int at = -1;
  for (;;) {
    const int32_t want = choice[static_cast<size_t>(at + 1)];
    int next = -1;
    for (int i = 0; i < tree.size() && next < 0; ++i)
      if (tree.parents[static_cast<size_t>(i)] == at && tree.tokens[static_cast<size_t>(i)] == want) next = i;
    emitted.push_back(want);
    if (next < 0) break;
    path.push_back(next);
    at = next;
  }
  return static_cast<int>(path.size());
}

std::vector<int> parse_tree_shape(const std::string& shape) {
  std::vector<int> out;
  size_t i = 0;
  while (i < shape.size()) {
    size_t j = i;
    while (j < shape.size() && shape[j] >= '0' && shape[j] <= '9') ++j;
    if (j == i || j - i > 2) return {};
    const int b = std::stoi(shape.substr(i, j - i));
    if (b < 1 || b > 16) return {};
    out.push_back(b);
    if (j == shape.size()) break;
    if (shape[j] != 'x' || j + 1 == shape.size()) return {};
    i = j + 1;
  }
  return out;
}

int verify_greedy(const std::vector<int32_t>& drafts, const std::vector<int32_t>& target, std::vector<int32_t>& emitted) {
  if (target.size() != drafts.size() + 1) throw std::invalid_argument("verify_greedy needs K + 1 target choices");
  size_t j = 0;
  while (j < drafts.size() && drafts[j] == target[j]) emitted.push_back(drafts[j++]);
  emitted.push_back(target[j]);
  return static_cast<int>(j);
}

namespace {

// Cumulative draw in index order over a row that need not sum to 1.
template <typename T>
int32_t draw_row(const T* probs, int vocab, float u) {
  double total = 0;
  for (int t = 0; t < vocab; ++t) total += static_cast<double>(probs[t]);
  double cum = 0;
  int32_t last = 0;
  for (int t = 0; t < vocab; ++t) {
    if (probs[t] <= 0) continue;
    last = t;
    cum += static_cast<double>(probs[t]);
    if (static_cast<double>(u) * total < cum) return t;
  }
  return last;
}

// Divides row by its sum; false (row unchanged) when the sum is not positive.
bool normalize(std::vector<double>& row) {
  double sum = 0;
  for (double x : row) sum += x;
  if (!(sum > 0)) return false;
  for (double& x : row) x /= sum;
  return true;
}

}  // namespace

int32_t draw(const float* probs, int vocab, float u) { return draw_row(probs, vocab, u); }

std::vector<int32_t> draw_distinct(const float* q, int vocab, int b, const UniformSource& uniform) {
  std::vector<double> left(q, q + vocab);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < b && normalize(left)) {
    const int32_t t = draw_row(left.data(), vocab, uniform());
    out.push_back(t);
    left[static_cast<size_t>(t)] = 0;
  }
  return out;
}

int verify_tree_sampled(const DraftTree& tree, int vocab, const DistributionRow& target, const DistributionRow& draft,
                        const UniformSource& uniform, std::vector<int32_t>& emitted, std::vector<int>& path) {
  const size_t V = static_cast<size_t>(vocab);
  std::vector<std::vector<int>> children(static_cast<size_t>(tree.size()) + 1);
  for (int i = 0; i < tree.size(); ++i) children[static_cast<size_t>(tree.parents[static_cast<size_t>(i)] + 1)].push_back(i);
  std::vector<double> p(V), q(V), residual(V);
  int at = -1;
  for (;;) {
    const int row = at + 1;
    const float* pt = target(row);
    p.assign(pt, pt + V);
    const std::vector<int>& kids = children[static_cast<size_t>(row)];
    if (draft && !kids.empty()) {
      const float* qt = draft(row);
      q.assign(qt, qt + V);
      normalize(q);
    }
    int next = -1;
    for (int c : kids) {
      const size_t tok = static_cast<size_t>(tree.tokens[static_cast<size_t>(c)]);
      if (!draft) {
        std::fill(q.begin(), q.end(), 0.0);
        q[tok] = 1;
      }
      // Accept with probability min(1, p/q): u·q < p.
      if (q[tok] > 0 && static_cast<double>(uniform()) * q[tok] < p[tok]) {
        next = c;
        break;
      }
      // Rejected: what is left of the target, and the draft without this child.
      for (size_t t = 0; t < V; ++t) residual[t] = std::max(0.0, p[t] - q[t]);
      if (normalize(residual)) p.swap(residual);  // else p == q up to rounding: keep p
      q[tok] = 0;
      if (draft && !normalize(q)) break;  // nothing left the draft could have drawn
    }
    if (next < 0) {
      emitted.push_back(draw_row(p.data(), vocab, uniform()));
      break;
    }
    emitted.push_back(tree.tokens[static_cast<size_t>(next)]);
    path.push_back(next);
    at = next;
  }
  return static_cast<int>(path.size());
}

int verify_sampled(const std::vector<int32_t>& drafts, const std::vector<float>& p, const std::vector<float>& q, int vocab,
                   const UniformSource& uniform, std::vector<int32_t>& emitted) {
  const size_t V = static_cast<size_t>(vocab);
  const DraftTree chain = DraftTree::chain(drafts);
  const DistributionRow target = [&](int row) { return &p[static_cast<size_t>(row) * V]; };
  DistributionRow draft;
  if (!q.empty()) draft = [&](int row) { return &q[static_cast<size_t>(row) * V]; };
  std::vector<int> path;
  return verify_tree_sampled(chain, vocab, target, draft, uniform, emitted, path);
}

namespace {

using detail::argmax_row;
using detail::fit;
using detail::since;

// One verify step in the statistics: `drafted` tokens verified, `accepted` of them kept, and
// whether verification rejected one (the tokens after a rejection are never tested).
void count_step(SpecStats& st, int drafted, int accepted, bool rejected, const std::vector<int32_t>& emitted) {
  ++st.steps;
  ++st.passes;
  st.drafted += drafted;
  st.accepted += accepted;
  st.tested += accepted + (rejected ? 1 : 0);
  st.emitted += static_cast<int64_t>(emitted.size());
}

void append_emitted(const std::vector<int32_t>& emitted, std::vector<int32_t>& out, std::vector<int32_t>& history) {
  out.insert(out.end(), emitted.begin(), emitted.end());
  history.insert(history.end(), emitted.begin(), emitted.end());
}

// Sampled verification needs the draft model's own distribution or deterministic candidates;
// a forced text or controlled acceptance decides tokens without one.
void check_sampled(const SpecConfig& cfg, bool force_truth) {
  if (cfg.sampling.greedy()) return;
  if (cfg.source == DraftSource::Controlled)
    throw std::invalid_argument("sampled verification needs the draft model's own distribution (acceptance: model), not controlled acceptance");
  if (force_truth) throw std::invalid_argument("sampled verification cannot follow a forced text");
}

// The draft's sampling distribution over the target's vocabulary (tv wide): tokens the target
// cannot take are dropped and the rest renormalised; a draft with no mass left proposes its most
// likely token the target can take.
void draft_distribution(const float* logits, int dv, int tv, const model::SamplingParams& sp, std::vector<float>& q) {
  std::vector<float> full(static_cast<size_t>(dv));
  model::sampling_distribution(logits, dv, sp, full.data());
  const int n = std::min(dv, tv);
  q.assign(static_cast<size_t>(tv), 0.0f);
  double sum = 0;
  for (int t = 0; t < n; ++t) sum += q[static_cast<size_t>(t)] = full[static_cast<size_t>(t)];
  if (sum > 0)
    for (float& x : q) x = static_cast<float>(x / sum);
  else
    q[static_cast<size_t>(argmax_row(logits, n))] = 1.0f;
}

// Sampled verification of a verify pass's logits (row 0 after the root, 1 + i after node i, tv
// wide) through verify_tree_sampled; the target's distributions are computed for the rows the
// walk reaches. q: the draft distribution each row's children were drawn from, or nullptr for
// deterministic candidates. Records the target rows of the emitted tokens when asked.
int verify_logits_sampled(const DraftTree& tree, const float* logits, int tv, const SpecConfig& cfg,
                          const std::vector<std::vector<float>>* q, uint64_t step, std::vector<int32_t>& emitted, std::vector<int>& path) {
  std::vector<std::vector<float>> p(static_cast<size_t>(tree.size()) + 1);
  const DistributionRow target = [&](int row) {
    std::vector<float>& r = p[static_cast<size_t>(row)];
    if (r.empty()) {
      r.resize(static_cast<size_t>(tv));
      model::sampling_distribution(logits + static_cast<size_t>(row) * static_cast<size_t>(tv), tv, cfg.sampling, r.data());
    }
    return r.data();
  };
  DistributionRow draft;
  if (q) draft = [q](int row) { return (*q)[static_cast<size_t>(row)].data(); };
  int draws = 0;
  const UniformSource uniform = [&] { return model::sample_uniform(cfg.seed ^ 0xA1ull, step, draws++); };
  const int j = verify_tree_sampled(tree, tv, target, draft, uniform, emitted, path);
  if (cfg.record_target) {
    cfg.record_target->push_back(p[0]);
    for (int node : path) cfg.record_target->push_back(p[static_cast<size_t>(node) + 1]);
  }
  return j;
}

}  // namespace

std::vector<int32_t> speculative_generate(model::Model& target, int target_seq, model::Model* draft, int draft_seq, int32_t last,
                                          int n, const SpecConfig& cfg, const std::function<int32_t(int64_t)>& truth,
                                          bool force_truth, std::vector<int32_t>& history, SpecStats& stats) {
  const int tv = target.config().vocab;
  const bool sampled = !cfg.sampling.greedy();
  check_sampled(cfg, force_truth);
  std::vector<int32_t> out;
  std::vector<int32_t> pending = {last};  // accepted tokens the draft model has not seen yet
  std::vector<float> logits;
  std::vector<std::vector<float>> q;  // sampled, draft model: the distribution each draft was drawn from
  uint64_t step = 0;
  while (static_cast<int>(out.size()) < n) {
    const int remaining = n - static_cast<int>(out.size());
    const int k = std::min(cfg.k, remaining - 1);
    std::vector<int32_t> drafts;
    // ---- draft ----
    const auto t0 = std::chrono::steady_clock::now();
    if (cfg.source == DraftSource::Ngram) {
      drafts = ngram_propose(history, k, cfg.ngram_min, cfg.ngram_max);
    } else if (k > 0) {
      const int dv = draft->config().vocab;
      std::vector<float> dl(static_cast<size_t>(dv));
      q.assign(sampled ? static_cast<size_t>(k) + 1 : 0, {});
      std::vector<int32_t> in(pending.size());
      for (size_t i = 0; i < pending.size(); ++i) in[i] = fit(pending[i], dv);
      for (int i = 0; i < k; ++i) {
        model::StepOutput o;
        o.logits = dl.data();
        if (i == 0) draft->prefill(draft_seq, in.data(), static_cast<int>(in.size()), 1, o);
        else {
          const int32_t prev = fit(drafts.back(), dv);
          draft->decode(&draft_seq, &prev, 1, o);
        }
        ++stats.draft_forward;
        int32_t d;
        if (cfg.source == DraftSource::Controlled) {
          // The draft model really ran; its token is the target's next one with probability α.
          const int64_t pos = static_cast<int64_t>(out.size()) + i;
          const int32_t want = truth(pos);
          const uint64_t r = random_bits(cfg.seed ^ 0xC0DEull, static_cast<uint64_t>(pos) * 131u + step * 7u + static_cast<uint64_t>(i));
          const bool hit = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) < cfg.alpha;
          d = hit ? want : static_cast<int32_t>((want + 1 + static_cast<int64_t>((r >> 3) % static_cast<uint64_t>(tv - 1))) % tv);
        } else if (sampled) {
          std::vector<float>& qi = q[static_cast<size_t>(i)];
          draft_distribution(dl.data(), dv, tv, cfg.sampling, qi);
          d = draw(qi.data(), tv, model::sample_uniform(cfg.seed ^ 0xD1ull, step, i));
        } else {
          d = argmax_row(dl.data(), dv);
        }
        drafts.push_back(d);
      }
    }
    stats.draft_seconds += since(t0);
    // ---- verify: [last, d1..dK] in one target pass ----
    const int kk = static_cast<int>(drafts.size());
    std::vector<int32_t> in = {fit(last, tv)};
    for (int32_t d : drafts) in.push_back(fit(d, tv));
    logits.resize(static_cast<size_t>(kk + 1) * static_cast<size_t>(tv));
    const int base = target.length(target_seq);
    const auto t1 = std::chrono::steady_clock::now();
    model::StepOutput o;
    o.logits = logits.data();
    target.prefill(target_seq, in.data(), kk + 1, kk + 1, o);
    stats.verify_seconds += since(t1);
    std::vector<int32_t> emitted;
    int j;
    if (sampled) {
      std::vector<int> path;
      j = verify_logits_sampled(DraftTree::chain(drafts), logits.data(), tv, cfg, cfg.source == DraftSource::Ngram ? nullptr : &q, step, emitted, path);
    } else {
      std::vector<int32_t> choice(static_cast<size_t>(kk + 1));
      for (int i = 0; i <= kk; ++i)
        choice[static_cast<size_t>(i)] = force_truth ? truth(static_cast<int64_t>(out.size()) + i) : argmax_row(&logits[static_cast<size_t>(i) * tv], tv);
      j = verify_greedy(drafts, choice, emitted);
    }
    count_step(stats, kk, j, j < kk, emitted);
    stats.count_positions(kk, j);
    ++step;
    // Keep last + the accepted drafts in the target's cache; the new last token is not cached yet.
    target.truncate(target_seq, base + 1 + j);
    if (draft && cfg.source != DraftSource::Ngram && kk > 0) {
      // The draft cached pending + d1..d_{K-1}; keep pending + the accepted ones among them.
      const int cached_drafts = kk - 1;
      const int keep = std::min(j, cached_drafts);
      draft->truncate(draft_seq, draft->length(draft_seq) - (cached_drafts - keep));
      pending.clear();
      if (j == kk) pending.push_back(drafts.back());
      pending.push_back(emitted.back());
    } else if (draft && cfg.source != DraftSource::Ngram) {
      pending.push_back(emitted.back());
    }
    append_emitted(emitted, out, history);
    last = emitted.back();
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

namespace {

// EAGLE-2's dynamic draft tree (Li et al. 2024): a node's confidence is the product of the draft's
// probabilities along its path. From the root (the draft's logits row `root`), each depth adds the
// `width` most likely children of every expanded node and expands the `width` most confident of
// them (one draft tree pass); at the end the `nodes` most confident of all become the tree (a
// child is never more confident than its parent, so they form a tree). draft_slot: per node its
// index in the draft's open tree, -1 for nodes never expanded.
DraftTree draft_dynamic_tree(model::Model& draft, int draft_seq, std::vector<float>& rows, int tv, int depth, int width, int nodes,
                             SpecStats& stats, std::vector<int>& draft_slot, bool& draft_open) {
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
      std::partial_sort(idx.begin(), idx.begin() + take, idx.end(), [&](int32_t a, int32_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
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
    return pool[static_cast<size_t>(a)].depth < pool[static_cast<size_t>(b)].depth || (pool[static_cast<size_t>(a)].depth == pool[static_cast<size_t>(b)].depth && a < b);
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

std::vector<int32_t> speculative_generate_tree(model::Model& target, int target_seq, model::Model* draft, int draft_seq, int32_t last,
                                               int n, const SpecConfig& cfg, const std::function<int32_t(int64_t)>& truth,
                                               bool force_truth, std::vector<int32_t>& history, SpecStats& stats) {
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
        tree = draft_dynamic_tree(*draft, draft_seq, dl, tv, depth, cfg.tree[0], cfg.dynamic_nodes, stats, draft_slot, draft_open);
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
                if (static_cast<double>(random_bits(cfg.seed ^ 0x7EEull, ctr * 17u + static_cast<uint64_t>(r)) >> 11) * (1.0 / 9007199254740992.0) <
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
            std::partial_sort(idx.begin(), idx.begin() + take, idx.end(), [&](int32_t a, int32_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
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

namespace {

// Sequence b's own seed in a batch: its draws independent of the others'.
uint64_t sequence_seed(uint64_t seed, int b) { return b == 0 ? seed : random_bits(seed ^ 0xBA7Cull, static_cast<uint64_t>(b)); }

// Controlled drafting's decision for drafted position `pos` (i-th draft of `step`): the target's
// token with probability alpha, else another one.
int32_t controlled_draft(const SpecConfig& cfg, int32_t want, int64_t pos, uint64_t step, int i, int vocab, uint64_t stream = 0) {
  const uint64_t r = random_bits(cfg.seed ^ 0xC0DEull ^ (stream * 0x9E3779B97F4A7C15ull),
                                 static_cast<uint64_t>(pos) * 131u + step * 7u + static_cast<uint64_t>(i));
  const bool hit = static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0) < cfg.alpha;
  return hit ? want : static_cast<int32_t>((want + 1 + static_cast<int64_t>((r >> 3) % static_cast<uint64_t>(vocab - 1))) % vocab);
}

}  // namespace

std::vector<std::vector<int32_t>> speculative_generate_batch(model::Model& target, const std::vector<int>& target_seqs, model::Model& draft,
                                                             const std::vector<int>& draft_seqs, const std::vector<int32_t>& lasts, int n,
                                                             const SpecConfig& cfg,
                                                             const std::vector<std::function<int32_t(int64_t)>>& truths, SpecStats& stats) {
  if (cfg.source == DraftSource::Ngram) throw std::invalid_argument("batched speculative decoding drafts with a draft model");
  check_sampled(cfg, false);
  const bool sampled = !cfg.sampling.greedy();
  if (cfg.record_batch) cfg.record_batch->assign(target_seqs.size(), {});
  const int B = static_cast<int>(target_seqs.size());
  const int tv = target.config().vocab, dv = draft.config().vocab;
  const size_t TV = static_cast<size_t>(tv), DV = static_cast<size_t>(dv);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<std::vector<int32_t>> pending(static_cast<size_t>(B));  // accepted tokens the draft has not seen
  std::vector<int32_t> last = lasts;
  for (int b = 0; b < B; ++b) pending[static_cast<size_t>(b)] = {lasts[static_cast<size_t>(b)]};
  std::vector<float> dl, logits;
  uint64_t step = 0;
  for (;;) {
    // The unfinished sequences, each drafting k_a = min(K, tokens left − 1) this step.
    std::vector<int> act, ks;
    for (int b = 0; b < B; ++b) {
      const int left = n - static_cast<int>(out[static_cast<size_t>(b)].size());
      if (left <= 0) continue;
      act.push_back(b);
      ks.push_back(std::min(cfg.k, left - 1));
    }
    if (act.empty()) break;
    const int A = static_cast<int>(act.size());
    std::vector<int> ts, ds;
    for (int b : act) {
      ts.push_back(target_seqs[static_cast<size_t>(b)]);
      ds.push_back(draft_seqs[static_cast<size_t>(b)]);
    }
    // ---- draft: the sequences still drafting at depth i run together ----
    std::vector<std::vector<int32_t>> drafts(static_cast<size_t>(A));
    std::vector<std::vector<std::vector<float>>> qs(static_cast<size_t>(A));  // sampled: draft i's distribution, per sequence
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int> sel;  // active indices drafting now; row r of dl is sel[r]'s (after the first pass: last rows)
    for (int a = 0; a < A; ++a)
      if (ks[static_cast<size_t>(a)] > 0) sel.push_back(a);
    if (!sel.empty()) {
      std::vector<int> seqs, counts;
      std::vector<int32_t> in;
      for (int a : sel) {
        const auto& pend = pending[static_cast<size_t>(act[static_cast<size_t>(a)])];
        seqs.push_back(ds[static_cast<size_t>(a)]);
        counts.push_back(static_cast<int>(pend.size()));
        for (int32_t t : pend) in.push_back(fit(t, dv));
      }
      dl.resize(in.size() * DV);
      model::StepOutput o;
      o.logits = dl.data();
      draft.prefill_batch(seqs.data(), counts.data(), static_cast<int>(sel.size()), in.data(), o);
      ++stats.draft_forward;
      std::vector<size_t> row;
      for (size_t r = 0, end = 0; r < sel.size(); ++r) row.push_back((end += static_cast<size_t>(counts[r])) - 1);
      for (int i = 0; !sel.empty(); ++i) {
        std::vector<int> next_sel;
        std::vector<int32_t> next_tok;
        for (size_t r = 0; r < sel.size(); ++r) {
          const int a = sel[r], b = act[static_cast<size_t>(a)];
          const int64_t pos = static_cast<int64_t>(out[static_cast<size_t>(b)].size()) + i;
          int32_t d;
          if (cfg.source == DraftSource::Controlled) {
            d = controlled_draft(cfg, truths[static_cast<size_t>(b)](pos), pos, step, i, tv, static_cast<uint64_t>(b));
          } else if (sampled) {
            std::vector<float>& q = qs[static_cast<size_t>(a)].emplace_back();
            draft_distribution(&dl[row[r] * DV], dv, tv, cfg.sampling, q);
            d = draw(q.data(), tv, model::sample_uniform(sequence_seed(cfg.seed, b) ^ 0xD1ull, step, i));
          } else {
            d = argmax_row(&dl[row[r] * DV], std::min(dv, tv));
          }
          drafts[static_cast<size_t>(a)].push_back(d);
          if (i + 1 < ks[static_cast<size_t>(a)]) {
            next_sel.push_back(a);
            next_tok.push_back(fit(d, dv));
          }
        }
        sel = std::move(next_sel);
        if (sel.empty()) break;
        seqs.clear();
        for (int a : sel) seqs.push_back(ds[static_cast<size_t>(a)]);
        dl.resize(sel.size() * DV);
        o.logits = dl.data();
        draft.decode(seqs.data(), next_tok.data(), static_cast<int>(sel.size()), o);
        ++stats.draft_forward;
        row.resize(sel.size());
        for (size_t r = 0; r < sel.size(); ++r) row[r] = r;
      }
    }
    stats.draft_seconds += since(t0);
    // ---- verify: [last, drafts] of every active sequence in one target pass ----
    std::vector<int> counts(static_cast<size_t>(A)), base(static_cast<size_t>(A)), first_row(static_cast<size_t>(A));
    std::vector<int32_t> in;
    for (int a = 0; a < A; ++a) {
      const int b = act[static_cast<size_t>(a)];
      base[static_cast<size_t>(a)] = target.length(ts[static_cast<size_t>(a)]);
      first_row[static_cast<size_t>(a)] = static_cast<int>(in.size());
      counts[static_cast<size_t>(a)] = ks[static_cast<size_t>(a)] + 1;
      in.push_back(fit(last[static_cast<size_t>(b)], tv));
      for (int32_t d : drafts[static_cast<size_t>(a)]) in.push_back(fit(d, tv));
    }
    logits.resize(in.size() * TV);
    const auto t1 = std::chrono::steady_clock::now();
    model::StepOutput o;
    o.logits = logits.data();
    target.prefill_batch(ts.data(), counts.data(), A, in.data(), o);
    stats.verify_seconds += since(t1);
    ++stats.passes;
    for (int a = 0; a < A; ++a) {
      const int b = act[static_cast<size_t>(a)], k = ks[static_cast<size_t>(a)];
      const float* rows = &logits[static_cast<size_t>(first_row[static_cast<size_t>(a)]) * TV];
      std::vector<int32_t> emitted;
      int j;
      if (sampled) {
        // This sequence's chain by rejection sampling, with its own stream of uniforms.
        SpecConfig own = cfg;
        own.seed = sequence_seed(cfg.seed, b);
        own.record_target = cfg.record_batch ? &(*cfg.record_batch)[static_cast<size_t>(b)] : nullptr;
        std::vector<std::vector<float>>& q = qs[static_cast<size_t>(a)];
        q.resize(static_cast<size_t>(k) + 1);
        std::vector<int> path;
        j = verify_logits_sampled(DraftTree::chain(drafts[static_cast<size_t>(a)]), rows, tv, own, &q, step, emitted, path);
      } else {
        std::vector<int32_t> choice(static_cast<size_t>(k + 1));
        for (int i = 0; i <= k; ++i) choice[static_cast<size_t>(i)] = argmax_row(rows + static_cast<size_t>(i) * TV, tv);
        j = verify_greedy(drafts[static_cast<size_t>(a)], choice, emitted);
      }
      ++stats.steps;
      stats.drafted += k;
      stats.accepted += j;
      stats.count_positions(k, j);
      stats.tested += j + (j < k ? 1 : 0);
      stats.emitted += static_cast<int64_t>(emitted.size());
      target.truncate(ts[static_cast<size_t>(a)], base[static_cast<size_t>(a)] + 1 + j);
      std::vector<int32_t>& pend = pending[static_cast<size_t>(b)];
      if (k > 0) {
        // The draft cached pending + d1..d_{k-1}; keep pending + the accepted ones among them.
        const int cached_drafts = k - 1, keep = std::min(j, cached_drafts);
        draft.truncate(ds[static_cast<size_t>(a)], draft.length(ds[static_cast<size_t>(a)]) - (cached_drafts - keep));
        pend.clear();
        if (j == k) pend.push_back(drafts[static_cast<size_t>(a)].back());
      }
      pend.push_back(emitted.back());
      std::vector<int32_t>& o_b = out[static_cast<size_t>(b)];
      o_b.insert(o_b.end(), emitted.begin(), emitted.end());
      last[static_cast<size_t>(b)] = emitted.back();
    }
    ++step;
  }
  for (auto& o_b : out) o_b.resize(static_cast<size_t>(n));
  return out;
}

std::vector<std::vector<int32_t>> autoregressive_generate_batch(model::Model& target, const std::vector<int>& target_seqs,
                                                                const std::vector<int32_t>& lasts, int n, const model::SamplingParams& sampling) {
  const int B = static_cast<int>(target_seqs.size()), tv = target.config().vocab;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  std::vector<int32_t> in(static_cast<size_t>(B)), next(static_cast<size_t>(B));
  for (int b = 0; b < B; ++b) in[static_cast<size_t>(b)] = fit(lasts[static_cast<size_t>(b)], tv);
  for (int i = 0; i < n; ++i) {
    model::StepOutput o;
    o.next = next.data();
    o.sampling = sampling;
    o.step = static_cast<uint64_t>(i);
    target.decode(target_seqs.data(), in.data(), B, o);
    for (int b = 0; b < B; ++b) {
      out[static_cast<size_t>(b)].push_back(next[static_cast<size_t>(b)]);
      in[static_cast<size_t>(b)] = next[static_cast<size_t>(b)];
    }
  }
  return out;
}

std::vector<int32_t> autoregressive_generate(model::Model& target, int target_seq, int32_t last, int n,
                                             const model::SamplingParams& sampling, const std::function<int32_t(int64_t)>& truth,
                                             bool force_truth) {
  const int tv = target.config().vocab;
  std::vector<int32_t> out;
  int32_t next = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t in = fit(last, tv);
    model::StepOutput o;
    o.next = &next;
    o.sampling = sampling;
    o.step = static_cast<uint64_t>(i);
    target.decode(&target_seq, &in, 1, o);
    last = force_truth ? truth(i) : next;
    out.push_back(last);
  }
  return out;
}

}  // namespace ib::specdec
