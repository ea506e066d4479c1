// The CPU engine's forward pass and the float32 arithmetic only it uses (GEMV/SGEMM, the attention
// dot product, RMSNorm, RoPE): kept in one file so that each product's order of operations is
// visible next to the pass whose decode/verify bit-for-bit agreement depends on it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <immintrin.h>

#include "model/cpu_model_internal.h"
#include "model/sample.h"
#include "numerics/blas_sgemm.h"
#include "numerics/parallel.h"
#include "numerics/query_attention.h"
#include "numerics/sgemm.h"
#include "numerics/swiglu.h"

namespace ib::model::cpu_detail {
namespace {

template <class F>
void run_chunks(bool parallel, size_t n, F&& body) {
  if (parallel)
    parallel_for(n, body);
  else if (n)
    body(0, n);
}

// The GEMV-class product of decode steps and verify passes: y[r][o] for o in [o0, o1) as one
// fused multiply-add per input in input order, so a row's result is the same bit for bit whatever
// the other rows of the batch (a verify pass of K tokens scores each exactly as a decode step
// would, and greedy speculative decoding reproduces the target's own tokens). Rows go in blocks
// of up to 4 against 16 output columns held in registers.
template <int NR>
__attribute__((target("avx2,fma"))) void gemv_tile_avx2(const float* x, int in, const float* wt, int out, int o, float* y) {
  __m256 acc[NR][2];
  for (int r = 0; r < NR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int i = 0; i < in; ++i) {
    const float* w = wt + static_cast<size_t>(i) * out + o;
    const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + 8);
    for (int r = 0; r < NR; ++r) {
      const __m256 a = _mm256_broadcast_ss(x + static_cast<size_t>(r) * in + i);
      acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    _mm256_storeu_ps(y + static_cast<size_t>(r) * out + o, acc[r][0]);
    _mm256_storeu_ps(y + static_cast<size_t>(r) * out + o + 8, acc[r][1]);
  }
}

// Column slices outer, row blocks inner: a 16-column slice of the weights (in × 64 bytes) is read
// from memory once and stays in the L1/L2 cache for every block of rows, so a verify pass of 30
// rows streams the weights once, not once per 4 rows. Each output's operations are the same in
// either order.
__attribute__((target("avx2,fma"))) void gemv_avx2(const float* x, int rows, int in, const float* wt, int out, int o0, int o1,
                                                   float* y) {
  int o = o0;
  for (; o + 16 <= o1; o += 16)
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const float* xr = x + static_cast<size_t>(r0) * in;
      float* yr = y + static_cast<size_t>(r0) * out;
      switch (std::min(4, rows - r0)) {
        case 1:
          gemv_tile_avx2<1>(xr, in, wt, out, o, yr);
          break;
        case 2:
          gemv_tile_avx2<2>(xr, in, wt, out, o, yr);
          break;
        case 3:
          gemv_tile_avx2<3>(xr, in, wt, out, o, yr);
          break;
        default:
          gemv_tile_avx2<4>(xr, in, wt, out, o, yr);
          break;
      }
    }
  for (; o < o1; ++o)  // the last columns: the same fused operations, one at a time
    for (int r = 0; r < rows; ++r) {
      float acc = 0;
      for (int i = 0; i < in; ++i) acc = std::fma(x[static_cast<size_t>(r) * in + i], wt[static_cast<size_t>(i) * out + o], acc);
      y[static_cast<size_t>(r) * out + o] = acc;
    }
}

// Without AVX2/FMA: the same order of operations, one column at a time.
void gemv_generic(const float* x, int rows, int in, const float* wt, int out, int o0, int o1, float* y) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + static_cast<size_t>(r) * out;
    std::fill(yr + o0, yr + o1, 0.0f);
    for (int i = 0; i < in; ++i) {
      const float a = x[static_cast<size_t>(r) * in + i];
      const float* w = wt + static_cast<size_t>(i) * out;
      for (int o = o0; o < o1; ++o) yr[o] = std::fma(a, w[o], yr[o]);
    }
  }
}

using GemvFn = void (*)(const float*, int, int, const float*, int, int, int, float*);
GemvFn pick_gemv() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? gemv_avx2 : gemv_generic;
}

void rmsnorm(const float* x, int rows, int n, const float* w, float eps, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + static_cast<size_t>(r) * n;
    double ss = 0;
    for (int i = 0; i < n; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
    for (int i = 0; i < n; ++i) y[static_cast<size_t>(r) * n + i] = xr[i] * inv * w[i];
  }
}

// Hugging Face Llama's rotate-half RoPE on one head vector: pairs (i, i + d/2) rotated by
// pos · inv_freq[i] (ModelConfig::rope_inv_freq: theta and scaling applied), cos and sin
// multiplied by `attention_factor` (YaRN; 1 otherwise), as transformers' rotary embedding does.
// The angles depend only on the position, so a row's cos/sin (d/2 each) are computed once per
// pass and shared by every head of every layer.
void rope_angles(int d, int pos, const double* inv_freq, double attention_factor, float* cs) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = pos * inv_freq[i];
    cs[i] = static_cast<float>(std::cos(angle) * attention_factor);
    cs[half + i] = static_cast<float>(std::sin(angle) * attention_factor);
  }
}
void rope(float* v, int d, const float* cs) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const float c = cs[i], s = cs[half + i];
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

// Products of at least this many multiply-adds split their panels over the threads; below it a
// wake-up of the pool costs more than the half of the product it saves.
constexpr double kParallelMacs = 1 << 17;

// Y = X·W through the packed decode GEMV (bit for bit the GEMV of `matmul`).
void packed_matmul(const PackedWeights& w, const float* x, int rows, float* y) {
  const bool big = static_cast<double>(w.in()) * w.out() * rows >= kParallelMacs;
  run_chunks(big, w.panels(), [&](size_t lo, size_t hi) { w.multiply(x, rows, lo, hi, y); });
}

// Columns [c0, c0 + n) of each row of a [rows][width] product into y [rows][n], plus the bias.
void take_columns(const float* src, int rows, int width, int c0, int n, const float* bias, float* y) {
  for (int r = 0; r < rows; ++r) {
    const float* s = src + static_cast<size_t>(r) * width + c0;
    float* d = y + static_cast<size_t>(r) * n;
    if (bias)
      for (int o = 0; o < n; ++o) d[o] = s[o] + bias[o];
    else
      std::copy_n(s, n, d);
  }
}

}  // namespace

void matmul(const float* x, int rows, int in, const float* wt, int out, const float* bias, float* y, bool blas) {
  // Up to 32 rows (decode batches, verify passes) the GEMV kernel: row-independent results, the
  // weights read once per 4 rows. Past that (prefill) the packed SGEMM, ours or OpenBLAS's.
  if (rows > 32 && blas) {
    blas_sgemm(rows, out, in, x, in, wt, out, y, out);
  } else if (rows > 32) {
    sgemm_blocked(rows, out, in, x, in, wt, out, y, out);
  } else {
    static const GemvFn gemv = pick_gemv();
    // Threads take 64-column slices; they are started per call, so small products stay on the
    // calling thread.
    const size_t chunks = static_cast<size_t>((out + 63) / 64);
    const bool big = static_cast<double>(in) * out * rows >= (1 << 20);
    run_chunks(big, chunks, [&](size_t lo, size_t hi) {
      gemv(x, rows, in, wt, out, static_cast<int>(lo) * 64, std::min(out, static_cast<int>(hi) * 64), y);
    });
  }
  if (bias) add_bias(y, rows, out, bias);
}

void add_bias(float* y, int rows, int out, const float* bias) {
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) y[static_cast<size_t>(r) * out + o] += bias[o];
}

bool CpuModel::packed(const PackedWeights& w, int rows, std::initializer_list<LoraModule> modules) const {
  if (w.empty()) return false;  // Reference
  // Past 32 rows (a prefill) float weights go through SGEMM; int8 panels take every row count,
  // faster than OpenBLAS on float copies and the same product for a row in any pass.
  if (rows > 32 && !w.int8_dot()) return false;
  for (LoraModule m : modules)
    if (merged_modules_[static_cast<size_t>(m)]) return false;  // the merged float32 weights
  return true;
}

// The plain rows' attention: their runs of consecutive positions of one sequence cut into
// pieces of up to 16 rows, each piece's queries of one kv head (16 rows × heads/kv_heads) one task
// over that head's keys, read through row pointers (either cache layout).
void CpuModel::plain_attention(int l, int rows, const std::vector<int>& seq_of, const std::vector<int>& pos,
                               const std::vector<uint8_t>& plain, const float* q, float* att) {
  constexpr int kPieceRows = 16;
  const int d = c_.head_dim, qd = c_.q_dim(), g = c_.heads / c_.kv_heads, window = c_.window(l);
  struct Piece {
    int r0, r1;
  };
  std::vector<Piece> pieces;
  double work = 0;
  for (int r0 = 0; r0 < rows;) {
    if (!plain[static_cast<size_t>(r0)]) {
      ++r0;
      continue;
    }
    int r1 = r0 + 1;
    while (r1 < rows && r1 - r0 < kPieceRows && plain[static_cast<size_t>(r1)] &&
           seq_of[static_cast<size_t>(r1)] == seq_of[static_cast<size_t>(r0)] &&
           pos[static_cast<size_t>(r1)] == pos[static_cast<size_t>(r1) - 1] + 1)
      ++r1;
    pieces.push_back({r0, r1});
    for (int r = r0; r < r1; ++r) work += static_cast<double>(pos[static_cast<size_t>(r)] + 1) * c_.heads * d;
    r0 = r1;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  run_chunks(work >= (1 << 18), pieces.size() * static_cast<size_t>(c_.kv_heads), [&](size_t lo, size_t hi) {
    std::vector<AttentionQuery> queries;
    std::vector<const float*> keys, values;
    for (size_t t = lo; t < hi; ++t) {
      const Piece& piece = pieces[t / static_cast<size_t>(c_.kv_heads)];
      const int kh = static_cast<int>(t % static_cast<size_t>(c_.kv_heads));
      Sequence& s = at(seq_of[static_cast<size_t>(piece.r0)]);
      const int p0 = pos[static_cast<size_t>(piece.r0)], p1 = pos[static_cast<size_t>(piece.r1) - 1];
      const int first = window > 0 ? std::max(0, p0 - window + 1) : 0;
      const KvRows kc = kv_rows(s, l, 0, kh), vc = kv_rows(s, l, 1, kh);
      keys.resize(static_cast<size_t>(p1) + 1);
      values.resize(static_cast<size_t>(p1) + 1);
      for (int j = first; j <= p1; ++j) {
        keys[static_cast<size_t>(j)] = kc.row(j);
        values[static_cast<size_t>(j)] = vc.row(j);
      }
      queries.clear();
      for (int r = piece.r0; r < piece.r1; ++r) {
        const int p = pos[static_cast<size_t>(r)];
        for (int hh = kh * g; hh < (kh + 1) * g; ++hh) {
          const size_t at_row = static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d;
          queries.push_back({q + at_row, att + at_row, window > 0 ? std::max(0, p - window + 1) : 0, p});
        }
      }
      attend_queries(queries.data(), static_cast<int>(queries.size()), keys.data(), values.data(), d, scale);
    }
  });
}

// Rows are tokens: row r belongs to sequence seq_of[r] at position pos[r]; its K/V are written
// there, and it attends to that sequence's keys up to its own position (within the window).
// With `tree` (one sequence), row r's K/V go to slot tree->slot[r] and it attends to the
// positions before tree->base (within the window) and to its ancestors' slots.
// Outputs the rows from `first_out` on, or with `out_rows` those rows (ascending), in that order.
void CpuModel::forward(const int32_t* tokens, int rows, const std::vector<int>& seq_of, const std::vector<int>& pos,
                       int first_out, const StepOutput& out, const TreeRows* tree, const std::vector<int>* out_rows) {
  auto slot = [&](int r) { return tree ? tree->slot[static_cast<size_t>(r)] : pos[static_cast<size_t>(r)]; };
  const int h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), d = c_.head_dim, g = c_.heads / c_.kv_heads;
  for (int r = 0; r < rows; ++r) {
    check_token(tokens[r], c_.vocab);
    if (slot(r) >= at(seq_of[static_cast<size_t>(r)]).capacity)
      throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq_of[static_cast<size_t>(r)],
                                              at(seq_of[static_cast<size_t>(r)]).capacity));
  }
  check_adapters(rows, seq_of);
  {  // Paged: every sequence's blocks for the slots this pass writes, before anything changes.
    std::vector<int> grow, upto;
    for (int r = 0; r < rows; ++r) {
      const int id = seq_of[static_cast<size_t>(r)];
      const auto it = std::find(grow.begin(), grow.end(), id);
      if (it == grow.end()) {
        grow.push_back(id);
        upto.push_back(slot(r) + 1);
      } else {
        int& u = upto[static_cast<size_t>(it - grow.begin())];
        u = std::max(u, slot(r) + 1);
      }
    }
    grow_blocks(grow, upto);
  }
  const size_t R = static_cast<size_t>(rows);
  // A position written now is in the cache again. A recording sequence records its last row.
  std::vector<uint8_t> recorded(R, 0);
  std::vector<int> found;  // recording sequences whose last row is known
  for (int r = rows - 1; r >= 0; --r) {
    const int id = seq_of[static_cast<size_t>(r)];
    Sequence& s = at(id);
    const int p = pos[static_cast<size_t>(r)];
    if (!s.evicted.empty()) s.evicted[static_cast<size_t>(slot(r))] = 0;
    for (int lh = 0; !s.evicted_head.empty() && lh < c_.layers * c_.kv_heads; ++lh)
      s.evicted_head[static_cast<size_t>(lh) * static_cast<size_t>(s.capacity) + static_cast<size_t>(slot(r))] = 0;
    if (!s.recording || std::find(found.begin(), found.end(), id) != found.end()) continue;
    found.push_back(id);
    recorded[static_cast<size_t>(r)] = 1;
    s.record.weights.assign(static_cast<size_t>(p) + 1, 0.0f);
    s.record.output.assign(static_cast<size_t>(c_.layers) * qd, 0.0f);
    s.record.kv_head_weights.assign(static_cast<size_t>(c_.layers) * c_.kv_heads * (static_cast<size_t>(p) + 1), 0.0f);
    s.head_weights.assign(static_cast<size_t>(c_.heads) * (static_cast<size_t>(p) + 1), 0.0f);
  }
  // The pass's activations in the engine's scratch (sized once for the largest pass so far: a
  // decode step allocates nothing); every element is written before it is read.
  ForwardScratch& scr = scratch_;
  auto sized = [](std::vector<float>& b, size_t n) -> std::vector<float>& {
    b.resize(n);
    return b;
  };
  std::vector<float>& x = sized(scr.x, R * h);
  std::vector<float>& xn = sized(scr.xn, R * h);
  std::vector<float>& q = sized(scr.q, R * qd);
  std::vector<float>& k = sized(scr.k, R * kvd);
  std::vector<float>& v = sized(scr.v, R * kvd);
  std::vector<float>& att = sized(scr.att, R * qd);
  std::vector<float>& tmp = sized(scr.tmp, R * h);
  std::vector<float>& gate = sized(scr.gate, R * c_.mlp);
  std::vector<float>& up = sized(scr.up, R * c_.mlp);
  std::vector<float>& fused = scr.fused;
  for (int r = 0; r < rows; ++r)
    std::memcpy(&x[static_cast<size_t>(r) * h], embed_.data() + static_cast<size_t>(tokens[r]) * h, sizeof(float) * h);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float>& rope_cs = sized(scr.rope_cs, R * static_cast<size_t>(d));
  for (int r = 0; r < rows; ++r)
    rope_angles(d, pos[static_cast<size_t>(r)], inv_freq_.data(), rope_factor_, &rope_cs[static_cast<size_t>(r) * d]);
  for (int l = 0; l < c_.layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    rmsnorm(x.data(), rows, h, L.in_norm.data(), c_.rms_eps, xn.data());
    if (packed(L.qkv, rows, {LoraModule::Q, LoraModule::K, LoraModule::V})) {
      const int w = qd + 2 * kvd;
      fused.resize(R * static_cast<size_t>(w));
      packed_matmul(L.qkv, xn.data(), rows, fused.data());
      take_columns(fused.data(), rows, w, 0, qd, c_.qkv_bias ? L.bq.data() : nullptr, q.data());
      take_columns(fused.data(), rows, w, qd, kvd, c_.qkv_bias ? L.bk.data() : nullptr, k.data());
      take_columns(fused.data(), rows, w, qd + kvd, kvd, c_.qkv_bias ? L.bv.data() : nullptr, v.data());
    } else {
      matmul(xn.data(), rows, h, weight(L, LoraModule::Q), qd, c_.qkv_bias ? L.bq.data() : nullptr, q.data(), blas_);
      matmul(xn.data(), rows, h, weight(L, LoraModule::K), kvd, c_.qkv_bias ? L.bk.data() : nullptr, k.data(), blas_);
      matmul(xn.data(), rows, h, weight(L, LoraModule::V), kvd, c_.qkv_bias ? L.bv.data() : nullptr, v.data(), blas_);
    }
    lora_add(l, LoraModule::Q, xn.data(), rows, h, qd, seq_of, q.data());
    lora_add(l, LoraModule::K, xn.data(), rows, h, kvd, seq_of, k.data());
    lora_add(l, LoraModule::V, xn.data(), rows, h, kvd, seq_of, v.data());
    for (int r = 0; r < rows; ++r) {
      if (c_.qk_norm) {  // Qwen3: RMSNorm over each head's head_dim, before RoPE
        rmsnorm(&q[static_cast<size_t>(r) * qd], c_.heads, d, L.q_norm.data(), c_.rms_eps, &q[static_cast<size_t>(r) * qd]);
        rmsnorm(&k[static_cast<size_t>(r) * kvd], c_.kv_heads, d, L.k_norm.data(), c_.rms_eps, &k[static_cast<size_t>(r) * kvd]);
      }
      const float* cs = &rope_cs[static_cast<size_t>(r) * d];
      for (int hh = 0; hh < c_.heads; ++hh) rope(&q[static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d], d, cs);
      for (int kh = 0; kh < c_.kv_heads; ++kh) rope(&k[static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d], d, cs);
    }
    round_kv(l, rows, seq_of, k.data(), v.data());
    for (int r = 0; r < rows; ++r) {
      const int p = slot(r);
      Sequence& s = at(seq_of[static_cast<size_t>(r)]);
      // A block another sequence shares is never written (grow_blocks copied it on write).
      if (s.blocks >= 0 && l == 0 &&
          blocks_->ref_count(blocks_->table(s.blocks)[static_cast<size_t>(p / blocks_->block_size())]) != 1)
        throw std::logic_error(
            fmt::format("sequence {}: position {} is in a shared KV block", seq_of[static_cast<size_t>(r)], p));
      for (int kh = 0; kh < c_.kv_heads; ++kh) {
        std::memcpy(kv_rows(s, l, 0, kh).row(p), &k[static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d],
                    sizeof(float) * d);
        std::memcpy(kv_rows(s, l, 1, kh).row(p), &v[static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d],
                    sizeof(float) * d);
      }
      if (s.kv_format && kvcache::is_kivi(*s.kv_format)) kivi_close_group(s, l, p);
    }
    // Rows that attend plainly (not a tree pass, no evicted keys, no recorded weights) go through
    // attend_queries by runs of one sequence; the rest key by key below, in the same arithmetic.
    std::vector<uint8_t> plain(R, 0);
    if (!tree)
      for (int r = 0; r < rows; ++r) {
        const Sequence& s = at(seq_of[static_cast<size_t>(r)]);
        plain[static_cast<size_t>(r)] = s.evicted.empty() && s.evicted_head.empty() && !recorded[static_cast<size_t>(r)];
      }
    plain_attention(l, rows, seq_of, pos, plain, q.data(), att.data());
    double attn_work = 0;
    for (int r = 0; r < rows; ++r)
      if (!plain[static_cast<size_t>(r)]) attn_work += static_cast<double>(pos[static_cast<size_t>(r)] + 1) * c_.heads * d;
    run_chunks(attn_work >= (1 << 18), R * static_cast<size_t>(c_.heads), [&](size_t lo, size_t hi) {
      std::vector<float> score;
      for (size_t t = lo; t < hi; ++t) {
        const int r = static_cast<int>(t / static_cast<size_t>(c_.heads)),
                  hh = static_cast<int>(t % static_cast<size_t>(c_.heads));
        if (plain[static_cast<size_t>(r)]) continue;
        const int p = pos[static_cast<size_t>(r)];
        Sequence& s = at(seq_of[static_cast<size_t>(r)]);
        const int window = c_.window(l);
        const int first = window > 0 ? std::max(0, p - window + 1) : 0;
        const float* qv = &q[static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d];
        const KvRows kc = kv_rows(s, l, 0, hh / g), vc = kv_rows(s, l, 1, hh / g);
        const uint8_t* evicted = s.evicted.empty() ? nullptr : s.evicted.data();
        const uint8_t* head_evicted =
            s.evicted_head.empty()
                ? nullptr
                : s.evicted_head.data() +
                      (static_cast<size_t>(l) * c_.kv_heads + static_cast<size_t>(hh / g)) * static_cast<size_t>(s.capacity);
        // Keys: positions first..p, or in a tree the committed ones then the ancestors' slots.
        const std::vector<int>* anc = tree ? tree->nodes[static_cast<size_t>(r)] : nullptr;
        const int cached = anc ? std::max(0, tree->base - first) : p - first + 1;
        const int n_keys = cached + (anc ? static_cast<int>(anc->size()) : 0);
        auto key = [&](int jj) { return jj < cached ? first + jj : tree->base + (*anc)[static_cast<size_t>(jj - cached)]; };
        score.assign(static_cast<size_t>(n_keys), 0.0f);
        for (int jj = 0; jj < n_keys; ++jj) {
          const int j = key(jj);
          // An evicted key's score is -inf: the softmax gives it weight 0.
          const bool gone = (evicted && evicted[j]) || (head_evicted && head_evicted[j]);
          score[static_cast<size_t>(jj)] = gone ? -INFINITY : attention_dot(qv, kc.row(j), d) * scale;
        }
        attention_softmax(score.data(), n_keys);
        float* o = &att[static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d];
        std::fill(o, o + d, 0.0f);
        for (int jj = 0; jj < n_keys; ++jj) attention_axpy(score[static_cast<size_t>(jj)], vc.row(key(jj)), o, d);
        if (recorded[static_cast<size_t>(r)]) {
          float* hw = s.head_weights.data() + static_cast<size_t>(hh) * (static_cast<size_t>(p) + 1);
          for (int j = first; j <= p; ++j) hw[j] = score[static_cast<size_t>(j - first)];
          std::memcpy(s.record.output.data() + static_cast<size_t>(l) * qd + static_cast<size_t>(hh) * d, o, sizeof(float) * d);
        }
      }
    });
    // Sum the recorded rows' weights over heads (the tasks above wrote disjoint head rows).
    for (int r = 0; r < rows; ++r) {
      if (!recorded[static_cast<size_t>(r)]) continue;
      Sequence& s = at(seq_of[static_cast<size_t>(r)]);
      const size_t n = s.record.weights.size();
      for (int hh = 0; hh < c_.heads; ++hh) {
        float* kvw = s.record.kv_head_weights.data() + (static_cast<size_t>(l) * c_.kv_heads + static_cast<size_t>(hh / g)) * n;
        for (size_t j = 0; j < n; ++j) {
          s.record.weights[j] += s.head_weights[static_cast<size_t>(hh) * n + j];
          kvw[j] += s.head_weights[static_cast<size_t>(hh) * n + j];
        }
      }
    }
    if (packed(L.o, rows, {LoraModule::O})) {
      packed_matmul(L.o, att.data(), rows, tmp.data());
      if (c_.o_bias) add_bias(tmp.data(), rows, h, L.bo.data());
    } else {
      matmul(att.data(), rows, qd, weight(L, LoraModule::O), h, c_.o_bias ? L.bo.data() : nullptr, tmp.data(), blas_);
    }
    lora_add(l, LoraModule::O, att.data(), rows, qd, h, seq_of, tmp.data());
    for (size_t i = 0; i < R * h; ++i) x[i] += tmp[i];
    rmsnorm(x.data(), rows, h, L.post_norm.data(), c_.rms_eps, xn.data());
    if (packed(L.gate_up, rows, {LoraModule::Gate, LoraModule::Up})) {
      fused.resize(R * 2 * static_cast<size_t>(c_.mlp));
      packed_matmul(L.gate_up, xn.data(), rows, fused.data());
      take_columns(fused.data(), rows, 2 * c_.mlp, 0, c_.mlp, c_.mlp_bias ? L.bg.data() : nullptr, gate.data());
      take_columns(fused.data(), rows, 2 * c_.mlp, c_.mlp, c_.mlp, c_.mlp_bias ? L.bu.data() : nullptr, up.data());
    } else {
      matmul(xn.data(), rows, h, weight(L, LoraModule::Gate), c_.mlp, c_.mlp_bias ? L.bg.data() : nullptr, gate.data(), blas_);
      matmul(xn.data(), rows, h, weight(L, LoraModule::Up), c_.mlp, c_.mlp_bias ? L.bu.data() : nullptr, up.data(), blas_);
    }
    lora_add(l, LoraModule::Gate, xn.data(), rows, h, c_.mlp, seq_of, gate.data());
    lora_add(l, LoraModule::Up, xn.data(), rows, h, c_.mlp, seq_of, up.data());
    run_chunks(R * static_cast<size_t>(c_.mlp) >= (1 << 15), R, [&](size_t lo, size_t hi) {
      const size_t m = static_cast<size_t>(c_.mlp);
      swiglu(gate.data() + lo * m, up.data() + lo * m, (hi - lo) * m);
    });
    if (packed(L.down, rows, {LoraModule::Down})) {
      packed_matmul(L.down, gate.data(), rows, tmp.data());
      if (c_.mlp_bias) add_bias(tmp.data(), rows, h, L.bd.data());
    } else {
      matmul(gate.data(), rows, c_.mlp, weight(L, LoraModule::Down), h, c_.mlp_bias ? L.bd.data() : nullptr, tmp.data(), blas_);
    }
    lora_add(l, LoraModule::Down, gate.data(), rows, c_.mlp, h, seq_of, tmp.data());
    for (size_t i = 0; i < R * h; ++i) x[i] += tmp[i];
  }
  for (int r = 0; r < rows; ++r) {
    Sequence& s = at(seq_of[static_cast<size_t>(r)]);
    s.length = std::max(s.length, slot(r) + 1);
  }
  if (!out.logits && !out.next) return;
  const int n_out = out_rows ? static_cast<int>(out_rows->size()) : rows - first_out;
  if (out_rows) {  // gathered in place: out_rows is ascending and out_rows[i] >= i
    for (int i = 0; i < n_out; ++i) {
      const int src = (*out_rows)[static_cast<size_t>(i)];
      if (src != i) std::copy_n(&x[static_cast<size_t>(src) * h], h, &x[static_cast<size_t>(i) * h]);
    }
  } else if (first_out > 0) {
    std::copy_n(&x[static_cast<size_t>(first_out) * h], static_cast<size_t>(n_out) * h, x.data());
  }
  rmsnorm(x.data(), n_out, h, final_norm_.data(), c_.rms_eps, xn.data());
  std::vector<float> own;
  float* logits = out.logits;
  if (!logits) {
    own.resize(static_cast<size_t>(n_out) * static_cast<size_t>(c_.vocab));
    logits = own.data();
  }
  if (packed(lm_head_packed_, n_out, {}))
    packed_matmul(lm_head_packed_, xn.data(), n_out, logits);
  else
    matmul(xn.data(), n_out, h, lm_head_.data(), c_.vocab, nullptr, logits, blas_);
  if (out.next)
    for (int r = 0; r < n_out; ++r)
      out.next[r] = sample_token(logits + static_cast<size_t>(r) * c_.vocab, c_.vocab, out.sampling,
                                 sample_uniform(out.sampling.seed, out.step, r));
}

}  // namespace ib::model::cpu_detail
