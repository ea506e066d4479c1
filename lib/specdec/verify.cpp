// Verification of drafted tokens, greedy and by rejection sampling, chain and tree: given the
// drafts and the target's logits, which tokens are kept; kept apart from how drafts are made.
#include "specdec/specdec.h"

#include <algorithm>
#include <stdexcept>

#include "specdec/specdec_internal.h"

namespace ib::specdec {

int verify_tree_greedy(const DraftTree& tree, const std::vector<int32_t>& choice, std::vector<int32_t>& emitted,
                       std::vector<int>& path) {
  if (choice.size() != static_cast<size_t>(tree.size()) + 1)
    throw std::invalid_argument("verify_tree_greedy needs 1 + nodes target choices");
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

namespace detail {

// Sampled verification needs the draft model's own distribution or deterministic candidates;
// a forced text or controlled acceptance decides tokens without one.
void check_sampled(const SpecConfig& cfg, bool force_truth) {
  if (cfg.sampling.greedy()) return;
  if (cfg.source == DraftSource::Controlled)
    throw std::invalid_argument(
        "sampled verification needs the draft model's own distribution (acceptance: model), not controlled acceptance");
  if (force_truth) throw std::invalid_argument("sampled verification cannot follow a forced text");
}

// Sampled verification of a verify pass's logits (row 0 after the root, 1 + i after node i, tv
// wide) through verify_tree_sampled; the target's distributions are computed for the rows the
// walk reaches. q: the draft distribution each row's children were drawn from, or nullptr for
// deterministic candidates. Records the target rows of the emitted tokens when asked.
int verify_logits_sampled(const DraftTree& tree, const float* logits, int tv, const SpecConfig& cfg,
                          const std::vector<std::vector<float>>* q, uint64_t step, std::vector<int32_t>& emitted,
                          std::vector<int>& path) {
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

}  // namespace detail

}  // namespace ib::specdec
