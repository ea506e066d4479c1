// CPU variants of `attention`: the float64 reference, the standard three passes (our SGEMM,
// a row softmax, our SGEMM) with the n×n matrices materialised, and the tiled flash algorithm
// with the online softmax, which never holds more than one tile of scores per thread. Inputs are
// the bf16/fp16-rounded values the GPU sees, computed in fp32 (float64 for the reference).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/backend.h"
#include "core/memory.h"
#include "core/registry.h"
#include "kinds/attention/cpu_attention.h"
#include "kinds/attention/problem.h"
#include "numerics/online_softmax.h"
#include "numerics/parallel.h"
#include "numerics/sgemm.h"

namespace ib::attention {
namespace {

// ---- reference: float64, one query row at a time (the oracle the gate uses, over every row) ----
class Reference : public CpuAttention {
 public:
  void run(BackendRuntime&) override {
    const int d = s_.head_dim;
    parallel_for(static_cast<size_t>(s_.rows()), [&](size_t lo, size_t hi) {
      std::vector<double> row(static_cast<size_t>(d));
      for (size_t r = lo; r < hi; ++r) {
        const int64_t bh = static_cast<int64_t>(r) / s_.seq_q;
        reference_row(s_, in_, static_cast<int>(bh / s_.heads), static_cast<int>(bh % s_.heads),
                      static_cast<int>(static_cast<int64_t>(r) % s_.seq_q), row.data());
        for (int c = 0; c < d; ++c)
          o_[r * static_cast<size_t>(d) + static_cast<size_t>(c)] = static_cast<float>(row[static_cast<size_t>(c)]);
      }
    });
  }
  Work work() const override { return {s_.flops(), s_.io_bytes()}; }
};

// ---- cpu_standard: S = Q·Kᵀ (SGEMM) for every head, P = softmax(scale·S) row by row, O = P·V ----
class CpuStandard : public CpuAttention {
 public:
  void run(BackendRuntime&) override {
    const int d = s_.head_dim, g = s_.group(), nq = s_.seq_q, nk = s_.seq_k;
    const int m = g * nq;  // the heads of one kv group are contiguous: one (g·n_q) × n_k GEMM
    const size_t per_group = static_cast<size_t>(m) * static_cast<size_t>(nk);
    for (int b = 0; b < s_.batch; ++b)
      for (int kvh = 0; kvh < s_.kv_heads; ++kvh) {
        const float* k = kv_rows(k_, b, kvh * g);
        for (int j = 0; j < nk; ++j)
          for (int c = 0; c < d; ++c) kt_[static_cast<size_t>(c) * nk + j] = k[static_cast<size_t>(j) * d + c];
        const size_t gi = static_cast<size_t>(b) * s_.kv_heads + kvh;
        sgemm_blocked(m, nk, d, q_rows(b, kvh * g), d, kt_.data(), nk, scores_.data() + gi * per_group, nk);
      }
    const float scale = static_cast<float>(s_.scale());
    parallel_for(static_cast<size_t>(s_.rows()), [&](size_t lo, size_t hi) {
      for (size_t r = lo; r < hi; ++r) {
        const float* srow = scores_.data() + r * nk;
        float* prow = probs_.data() + r * nk;
        const int i = static_cast<int>(r % static_cast<size_t>(nq));
        const int n = s_.visible_keys(i), first = std::min(s_.first_key(i), n);
        float mx = -INFINITY;
        for (int j = first; j < n; ++j) mx = std::max(mx, srow[j] * scale);
        float sum = 0;
        for (int j = first; j < n; ++j) {
          prow[j] = std::exp(srow[j] * scale - mx);
          sum += prow[j];
        }
        const float inv = n > first ? 1.0f / sum : 0.0f;
        for (int j = 0; j < first; ++j) prow[j] = 0.0f;
        for (int j = first; j < n; ++j) prow[j] *= inv;
        for (int j = n; j < nk; ++j) prow[j] = 0.0f;
      }
    });
    for (int b = 0; b < s_.batch; ++b)
      for (int kvh = 0; kvh < s_.kv_heads; ++kvh) {
        const size_t gi = static_cast<size_t>(b) * s_.kv_heads + kvh;
        sgemm_blocked(m, d, nk, probs_.data() + gi * per_group, nk, kv_rows(v_, b, kvh * g), d, o_rows(b, kvh * g), d);
      }
  }
  Work work() const override {
    // Useful FLOPs as for every variant (its GEMMs also compute the masked half); S and P
    // each written once and read once.
    const double nn = static_cast<double>(s_.rows()) * s_.seq_k;
    return {s_.flops(), s_.io_bytes() + 4.0 * nn * sizeof(float)};
  }

 protected:
  void allocate_workspace() override {
    const size_t nn = static_cast<size_t>(s_.rows()) * static_cast<size_t>(s_.seq_k);
    scores_.allocate(nn, "S = Q·Kᵀ (n_q × n_k per head, fp32)");
    probs_.allocate(nn, "P = softmax(S) (n_q × n_k per head, fp32)");
    kt_.allocate(static_cast<size_t>(s_.head_dim) * static_cast<size_t>(s_.seq_k), "Kᵀ of one head");
  }

 private:
  HostBuffer<float> scores_, probs_, kt_;
};

// ---- cpu_flash: tiles of kBr queries × kBc keys, online softmax, one tile of scores per thread ----
class CpuFlash : public CpuAttention {
 public:
  static constexpr int kBr = 48, kBc = 64;  // 48 = 8 register tiles of the SGEMM micro-kernel

  void run(BackendRuntime&) override {
    const int q_tiles = (s_.seq_q + kBr - 1) / kBr;
    const size_t tasks = static_cast<size_t>(s_.batch) * s_.heads * static_cast<size_t>(q_tiles);
    const size_t slots = threads_;
    // Thread t takes tasks t, t + slots, ...: with causal masking the late query tiles cost more,
    // and interleaving spreads them.
    parallel_for(slots, [&](size_t lo, size_t hi) {
      for (size_t slot = lo; slot < hi; ++slot)
        for (size_t t = slot; t < tasks; t += slots) {
          const int qt = static_cast<int>(t % static_cast<size_t>(q_tiles));
          const size_t bh = t / static_cast<size_t>(q_tiles);
          tile(static_cast<int>(bh / static_cast<size_t>(s_.heads)), static_cast<int>(bh % static_cast<size_t>(s_.heads)), qt,
               work_.data() + slot * per_thread_);
        }
    });
  }
  Work work() const override { return {s_.flops(), s_.io_bytes()}; }

 protected:
  void allocate_workspace() override {
    threads_ = std::max(1u, cpu_threads());
    const size_t d = static_cast<size_t>(s_.head_dim);
    per_thread_ = kBr * d /*O*/ + kBc * d * 2 /*Kᵀ, V*/ + kBr * kBc /*S*/ + 2 * kBr /*m, l*/;
    work_.allocate(per_thread_ * threads_, "flash tiles (per thread)");
  }

 private:
  void tile(int b, int h, int qt, float* ws) {
    const int d = s_.head_dim, r0 = qt * kBr, rows = std::min(kBr, s_.seq_q - r0);
    float* o = ws;
    float* kt = o + kBr * d;
    float* v = kt + kBc * d;
    float* sc = v + kBc * d;
    float* row_max = sc + kBr * kBc;
    float* row_sum = row_max + kBr;
    const float* q = q_rows(b, h) + int64_t{r0} * d;
    const float* k = kv_rows(k_, b, h);
    const float* vv = kv_rows(v_, b, h);
    const float scale = static_cast<float>(s_.scale());
    std::fill(o, o + kBr * d, 0.0f);
    for (int r = 0; r < rows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0;
    }
    // Keys past the last row's diagonal, and (sliding window) the tiles before the first row's
    // first key, are invisible to the whole tile.
    const int keys = s_.visible_keys(r0 + rows - 1);
    for (int c0 = s_.first_key(r0) / kBc * kBc; c0 < keys; c0 += kBc) {
      const int cols = std::min(kBc, keys - c0);
      for (int j = 0; j < cols; ++j)
        for (int c = 0; c < d; ++c) kt[c * kBc + j] = k[int64_t{c0 + j} * d + c];
      std::memcpy(v, vv + int64_t{c0} * d, sizeof(float) * static_cast<size_t>(cols) * static_cast<size_t>(d));
      // S = Q_tile · K_tileᵀ with the SGEMM micro-kernel (Kᵀ tile is d × cols, row stride kBc).
      std::fill(sc, sc + kBr * kBc, 0.0f);
      sgemm_accumulate_serial(rows, cols, d, q, d, kt, kBc, sc, kBc);
      for (int r = 0; r < rows; ++r) {
        float* s = sc + r * kBc;
        // This row sees tile columns lo .. visible − 1.
        const int visible = std::max(0, std::min(cols, s_.visible_keys(r0 + r) - c0));
        const int lo = std::min(visible, std::max(0, s_.first_key(r0 + r) - c0));
        float tile_max = -INFINITY;
        for (int j = lo; j < visible; ++j) {
          s[j] *= scale;
          tile_max = std::max(tile_max, s[j]);
        }
        // Summarise the tile's piece of the row, merge it into the running summary; `keep`
        // rescales the running output, `add` the tile's probabilities, both to the merged maximum.
        float tile_sum = 0;
        for (int j = lo; j < visible; ++j) {
          s[j] = std::exp(s[j] - tile_max);
          tile_sum += s[j];
        }
        float keep = 0, add = 0;
        const SoftmaxSummary<float> merged =
            softmax_merge(SoftmaxSummary<float>{row_max[r], row_sum[r]},
                          visible > lo ? SoftmaxSummary<float>{tile_max, tile_sum} : softmax_empty<float>(), &keep, &add);
        row_max[r] = merged.max;
        row_sum[r] = merged.sum;
        float* orow = o + r * d;
        for (int c = 0; c < d; ++c) orow[c] *= keep;
        for (int j = 0; j < lo; ++j) s[j] = 0.0f;
        for (int j = lo; j < visible; ++j) s[j] *= add;
        for (int j = visible; j < kBc; ++j) s[j] = 0.0f;
      }
      // O_tile += P_tile · V_tile.
      sgemm_accumulate_serial(rows, d, cols, sc, kBc, v, d, o, d);
    }
    float* out = o_rows(b, h) + int64_t{r0} * d;
    for (int r = 0; r < rows; ++r) {
      const float inv = row_sum[r] > 0 ? 1.0f / row_sum[r] : 0.0f;
      for (int c = 0; c < d; ++c) out[r * d + c] = o[r * d + c] * inv;
    }
  }

  size_t threads_ = 1, per_thread_ = 0;
  HostBuffer<float> work_;
};

const VariantRegistration reg_attention_reference(
    "attention", {"reference", Backend::Cpu, "float64, one query row at a time: the correctness oracle", attention_shape_keys()},
    make_variant<Reference>());
const VariantRegistration reg_attention_cpu_standard(
    "attention",
    {"cpu_standard", Backend::Cpu,
     "the three passes on the CPU: our SGEMM, a row softmax, our SGEMM; S and P materialised (fp32)", attention_shape_keys()},
    make_variant<CpuStandard>());
// The chapter's flash2 figures are this variant's on the CPU (role flash2).
const VariantRegistration reg_attention_cpu_flash("attention",
                                                  {"cpu_flash", Backend::Cpu,
                                                   "the flash algorithm on the CPU: 48×64 tiles through the SGEMM micro-kernel, "
                                                   "online softmax, one tile of scores per thread (fp32)",
                                                   attention_shape_keys(), false, "flash2"},
                                                  make_variant<CpuFlash>());

}  // namespace
}  // namespace ib::attention
