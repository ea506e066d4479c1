// The CPU engine's LoRA serving: adapters resident (transposed for its matmul), each row's
// low-rank update gathered per adapter (SGMV's segments: one A product and one B product per
// adapter and projection, whatever the batch's order), and merging one adapter into the weights.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/errors.h"
#include "model/cpu_model_internal.h"

namespace ib::model::cpu_detail {
namespace {

const Buf& base_weight(const Layer& L, LoraModule m) {
  switch (m) {
    case LoraModule::Q:
      return L.wq;
    case LoraModule::K:
      return L.wk;
    case LoraModule::V:
      return L.wv;
    case LoraModule::O:
      return L.wo;
    case LoraModule::Gate:
      return L.wg;
    case LoraModule::Up:
      return L.wu;
    case LoraModule::Down:
      break;
  }
  return L.wd;
}

}  // namespace

const float* CpuModel::weight(const Layer& L, LoraModule m) const {
  return merged_modules_[static_cast<size_t>(m)] ? L.merged[static_cast<size_t>(m)].data() : base_weight(L, m).data();
}

int CpuModel::add_adapter(const LoraAdapter& a) {
  check_adapter_fits(c_, a);
  CpuAdapter ad;
  ad.rank = a.rank;
  ad.scaling = a.scaling;
  ad.targets = a.targets;
  ad.at.resize(static_cast<size_t>(c_.layers));
  ad.bt.resize(static_cast<size_t>(c_.layers));
  const size_t r = static_cast<size_t>(a.rank);
  int64_t bytes = 0;
  for (int l = 0; l < c_.layers; ++l)
    for (LoraModule m : a.modules()) {
      const auto [out, in] = module_shape(c_, m);
      const size_t i = static_cast<size_t>(m), L = static_cast<size_t>(l);
      Buf& at = ad.at[L][i];
      Buf& bt = ad.bt[L][i];
      at.allocate(static_cast<size_t>(in) * r, "LoRA A");
      bt.allocate(r * static_cast<size_t>(out), "LoRA B");
      const std::vector<float>& A = a.a[L][i];  // [rank][in]
      const std::vector<float>& B = a.b[L][i];  // [out][rank]
      for (size_t k = 0; k < r; ++k)
        for (size_t x = 0; x < static_cast<size_t>(in); ++x) at[x * r + k] = A[k * static_cast<size_t>(in) + x];
      for (size_t o = 0; o < static_cast<size_t>(out); ++o)
        for (size_t k = 0; k < r; ++k) bt[k * static_cast<size_t>(out) + o] = B[o * r + k];
      bytes += static_cast<int64_t>(at.bytes() + bt.bytes());
    }
  adapters_.push_back(std::move(ad));
  adapter_bytes_ += bytes;
  return static_cast<int>(adapters_.size()) - 1;
}

void CpuModel::set_adapter(int seq, int adapter) {
  if (adapter < -1 || adapter >= static_cast<int>(adapters_.size()))
    throw std::invalid_argument(fmt::format("adapter {}: {} adapters are resident", adapter, adapters_.size()));
  at(seq).adapter = adapter;
}

void CpuModel::merge_adapter(int adapter) {
  if (adapter < -1 || adapter >= static_cast<int>(adapters_.size()))
    throw std::invalid_argument(fmt::format("adapter {}: {} adapters are resident", adapter, adapters_.size()));
  if (adapter >= 0 && !float_matrices_)
    throw InputError(
        "an adapter cannot be merged into int8 panels: this engine keeps no float32 weights (cpu_matmul int8 on "
        "block weights); serve it per request (unmerged), or use cpu_matmul blas");
  merged_modules_ = {};
  merged_ = adapter;
  if (adapter < 0) return;  // the base weights are never written: restoring them is free
  const CpuAdapter& ad = adapters_[static_cast<size_t>(adapter)];
  // W' = W + scaling·(A_t·B_t) in the transposed [in][out] layout: one rank-r product per
  // projection and layer, then the base added; the cost a single-adapter server pays to switch.
  for (int l = 0; l < c_.layers; ++l)
    for (int i = 0; i < kLoraModules; ++i) {
      if (!ad.targets[static_cast<size_t>(i)]) continue;
      const LoraModule m = static_cast<LoraModule>(i);
      const auto [out, in] = module_shape(c_, m);
      Layer& L = layers_[static_cast<size_t>(l)];
      Buf& dst = L.merged[static_cast<size_t>(i)];
      if (!dst.data()) {
        dst.allocate(static_cast<size_t>(in) * static_cast<size_t>(out), "merged LoRA weights");
        merged_bytes_ += static_cast<int64_t>(dst.bytes());
      }
      matmul(ad.at[static_cast<size_t>(l)][static_cast<size_t>(i)].data(), in, ad.rank,
             ad.bt[static_cast<size_t>(l)][static_cast<size_t>(i)].data(), out, nullptr, dst.data());
      const float* w = base_weight(L, m).data();
      const size_t n = static_cast<size_t>(in) * static_cast<size_t>(out);
      for (size_t e = 0; e < n; ++e) dst[e] = w[e] + ad.scaling * dst[e];
    }
  merged_modules_ = ad.targets;
}

void CpuModel::check_adapters(int rows, const std::vector<int>& seq_of) const {
  if (merged_ < 0) return;
  for (int r = 0; r < rows; ++r) {
    const int a = at(seq_of[static_cast<size_t>(r)]).adapter;
    if (a != merged_)
      throw std::logic_error(fmt::format("sequence {} uses adapter {} but adapter {} is merged into the weights",
                                         seq_of[static_cast<size_t>(r)], a, merged_));
  }
}

void CpuModel::lora_add(int layer, LoraModule m, const float* x, int rows, int in, int out, const std::vector<int>& seq_of,
                        float* y) {
  if (adapters_.empty() || merged_ >= 0) return;  // merged: the update is in the weights
  // The rows of each adapter (a segment), in row order.
  std::vector<std::vector<int>> rows_of;
  for (int r = 0; r < rows; ++r) {
    const int a = at(seq_of[static_cast<size_t>(r)]).adapter;
    if (a < 0 || !adapters_[static_cast<size_t>(a)].targets[static_cast<size_t>(m)]) continue;
    if (rows_of.size() <= static_cast<size_t>(a)) rows_of.resize(static_cast<size_t>(a) + 1);
    rows_of[static_cast<size_t>(a)].push_back(r);
  }
  std::vector<float> xg, t, d;
  for (size_t a = 0; a < rows_of.size(); ++a) {
    const std::vector<int>& seg = rows_of[a];
    if (seg.empty()) continue;
    const CpuAdapter& ad = adapters_[a];
    const int n = static_cast<int>(seg.size());
    const size_t rank = static_cast<size_t>(ad.rank);
    xg.resize(static_cast<size_t>(n) * static_cast<size_t>(in));
    for (int j = 0; j < n; ++j)
      std::copy(x + static_cast<size_t>(seg[static_cast<size_t>(j)]) * in,
                x + static_cast<size_t>(seg[static_cast<size_t>(j)] + 1) * in, xg.begin() + static_cast<std::ptrdiff_t>(j) * in);
    t.resize(static_cast<size_t>(n) * rank);
    d.resize(static_cast<size_t>(n) * static_cast<size_t>(out));
    matmul(xg.data(), n, in, ad.at[static_cast<size_t>(layer)][static_cast<size_t>(m)].data(), ad.rank, nullptr, t.data());
    matmul(t.data(), n, ad.rank, ad.bt[static_cast<size_t>(layer)][static_cast<size_t>(m)].data(), out, nullptr, d.data());
    for (int j = 0; j < n; ++j) {
      float* yr = y + static_cast<size_t>(seg[static_cast<size_t>(j)]) * out;
      const float* dr = d.data() + static_cast<size_t>(j) * out;
      for (int o = 0; o < out; ++o) yr[o] += ad.scaling * dr[o];
    }
  }
}

}  // namespace ib::model::cpu_detail
