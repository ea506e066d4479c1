// The open token tree of a sequence (Model::prefill_tree), shared by the CPU and CUDA engines:
// the committed tokens before it and, per node, its ancestors' node indices root first, itself
// last. Node i sits at cache slot base + i and at position base + depth − 1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace ib::model {

class TokenTree {
 public:
  bool open() const { return base_ >= 0; }
  int base() const { return base_; }
  int size() const { return static_cast<int>(nodes_.size()); }
  const std::vector<int>& ancestors(int node) const { return nodes_.at(static_cast<size_t>(node)); }

  // The ancestor lists of n new nodes with these parents (-1: the last committed token), checked
  // against the tree as it is; the tree does not change.
  std::vector<std::vector<int>> extend(const int32_t* parents, int n) const {
    std::vector<std::vector<int>> added;
    for (int i = 0; i < n; ++i) {
      const int self = size() + i, parent = parents[i];
      if (parent < -1 || parent >= self)
        throw std::invalid_argument(fmt::format("prefill_tree: node {} has parent {} (want -1 .. {})", self, parent, self - 1));
      std::vector<int> anc;
      if (parent >= 0) anc = parent < size() ? nodes_[static_cast<size_t>(parent)] : added[static_cast<size_t>(parent - size())];
      anc.push_back(self);
      added.push_back(std::move(anc));
    }
    return added;
  }
  // Opens the tree after `committed` tokens if it is closed, then appends `added` (from extend).
  void append(int committed, std::vector<std::vector<int>>&& added) {
    if (!open()) base_ = committed;
    for (auto& a : added) nodes_.push_back(std::move(a));
  }
  // Undoes an append: back to `nodes` nodes, closed again when `close`.
  void rollback(int nodes, bool close) {
    nodes_.resize(static_cast<size_t>(nodes));
    if (close) this->close();
  }
  // Throws unless path[i] is a node at depth i + 1 whose ancestors are path[0 .. i].
  void check_path(const std::vector<int>& path) const {
    if (!open()) throw std::logic_error("keep_tree_path without an open token tree");
    for (size_t i = 0; i < path.size(); ++i) {
      const int node = path[i];
      const std::vector<int>* anc = node >= 0 && node < size() ? &nodes_[static_cast<size_t>(node)] : nullptr;
      if (!anc || anc->size() != i + 1 || !std::equal(anc->begin(), anc->end(), path.begin()))
        throw std::invalid_argument(fmt::format("keep_tree_path: node {} at depth {} does not continue the path", node, i + 1));
    }
  }
  void close() {
    base_ = -1;
    nodes_.clear();
  }

 private:
  int base_ = -1;
  std::vector<std::vector<int>> nodes_;
};

}  // namespace ib::model
