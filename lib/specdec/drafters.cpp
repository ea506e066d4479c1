// The drafters that stand on their own: prompt lookup (n-gram) as a chain or a tree, the draft
// tree and its shape, and the draft model's sampling distribution (each loop drafts inline too).
#include "specdec/specdec.h"

#include <algorithm>
#include <string>

#include "specdec/specdec_internal.h"
#include "specdec/step_helpers.h"

namespace ib::specdec {

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

namespace detail {

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

}  // namespace detail

}  // namespace ib::specdec
