// The CPU engine: the model in float32 on bf16-rounded weights, the reference the CUDA engine is
// tested against and the backend of every model-driven experiment on a machine without a GPU.
// Weights are kept transposed ([in][out]) so that both the GEMM of a prefill (our SGEMM) and the
// GEMV of a decode step (an axpy over contiguous rows) stream them in order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <immintrin.h>

#include "numerics/sgemm.h"
#include "core/errors.h"
#include "core/memory.h"
#include "numerics/parallel.h"
#include "model/model.h"
#include "model/sequence_table.h"
#include "model/token_tree.h"

namespace ib::model {
namespace {

using Buf = HostBuffer<float>;

template <class F>
void run_chunks(bool parallel, size_t n, F&& body) {
  if (parallel) parallel_for(n, body);
  else if (n) body(0, n);
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
__attribute__((target("avx2,fma"))) void gemv_avx2(const float* x, int rows, int in, const float* wt, int out, int o0, int o1, float* y) {
  int o = o0;
  for (; o + 16 <= o1; o += 16)
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const float* xr = x + static_cast<size_t>(r0) * in;
      float* yr = y + static_cast<size_t>(r0) * out;
      switch (std::min(4, rows - r0)) {
        case 1: gemv_tile_avx2<1>(xr, in, wt, out, o, yr); break;
        case 2: gemv_tile_avx2<2>(xr, in, wt, out, o, yr); break;
        case 3: gemv_tile_avx2<3>(xr, in, wt, out, o, yr); break;
        default: gemv_tile_avx2<4>(xr, in, wt, out, o, yr); break;
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

// An attention score's dot product q·k over d floats: two 8-lane fused multiply-add chains, then
// the lanes summed in a fixed order and the last d mod 8 elements added one by one. The order
// depends only on d, so a token's scores do not depend on the other rows of its batch (decode
// steps and verify passes agree bit for bit). Without AVX2/FMA: one chain in element order.
__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int d) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int e = 0;
  for (; e + 16 <= d; e += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e + 8), _mm256_loadu_ps(b + e + 8), acc1);
  }
  if (e + 8 <= d) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + e), _mm256_loadu_ps(b + e), acc0);
    e += 8;
  }
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  s4 = _mm_add_ss(s4, _mm_shuffle_ps(s4, s4, 1));
  float r = _mm_cvtss_f32(s4);
  for (; e < d; ++e) r = std::fma(a[e], b[e], r);
  return r;
}

float dot_generic(const float* a, const float* b, int d) {
  float acc = 0;
  for (int e = 0; e < d; ++e) acc += a[e] * b[e];
  return acc;
}

using DotFn = float (*)(const float*, const float*, int);
DotFn pick_dot() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? dot_avx2 : dot_generic;
}

// Y[rows][out] = X[rows][in] · Wt[in][out] (+ bias).
void matmul(const float* x, int rows, int in, const float* wt, int out, const float* bias, float* y) {
  // Up to 32 rows (decode batches, verify passes) the GEMV kernel: row-independent results, the
  // weights read once per 4 rows. Past that (prefill) the packed SGEMM.
  if (rows > 32) {
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
  if (bias)
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) y[static_cast<size_t>(r) * out + o] += bias[o];
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

// Hugging Face Llama's rotate-half RoPE on one head vector at position `pos`: pairs (i, i + d/2)
// rotated by pos · inv_freq[i] (ModelConfig::rope_inv_freq: theta and scaling applied), cos and
// sin multiplied by `attention_factor` (YaRN; 1 otherwise), as transformers' rotary embedding does.
void rope(float* v, int d, int pos, const double* inv_freq, double attention_factor) {
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = pos * inv_freq[i];
    const float c = static_cast<float>(std::cos(angle) * attention_factor), s = static_cast<float>(std::sin(angle) * attention_factor);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

struct Layer {
  Buf in_norm, post_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, bo, wg, wu, wd, bg, bu, bd;
};

struct Sequence {
  bool live = false;
  int capacity = 0, length = 0;
  Buf cache;  // [layers][2][kv_heads][capacity][head_dim]
  // Eviction studies: evicted[p] != 0 hides position p from attention (empty until a position is
  // marked, so the common path pays nothing); the recorded attention of the last token.
  std::vector<uint8_t> evicted;
  std::vector<uint8_t> evicted_head;  // [layers][kv_heads][capacity], empty until set_kept_head hides one
  bool recording = false;
  AttentionRecord record;
  std::vector<float> head_weights;  // [heads][positions]: one layer's weights while recording
  // Format studies: K/V rounded through kv_format on write; fp8 scales [layers][2][kv_heads].
  std::optional<kvcache::KvFormat> kv_format;
  std::vector<float> fp8_scale;
  TokenTree tree;  // open while a tree verification is in progress (prefill_tree)
};

// The rows of a tree pass: row r is node nodes[r] (its ancestor list) at cache slot slot[r].
struct TreeRows {
  int base = 0;
  std::vector<int> slot;
  std::vector<const std::vector<int>*> nodes;
};

class CpuModel : public Model {
 public:
  CpuModel(const ModelConfig& c, const WeightSource& w) : c_(c), inv_freq_(c.rope_inv_freq()), rope_factor_(c.rope_attention_factor()) {
    const auto specs = tensor_specs(c);
    auto load = [&](const std::string& name, Buf& dst, bool transpose) {
      for (const auto& s : specs)
        if (s.name == name) {
          dst.allocate(static_cast<size_t>(s.elems()), name);
          if (!transpose || s.shape.size() != 2) {
            w.read(s, dst.data());
          } else {
            std::vector<float> tmp(static_cast<size_t>(s.elems()));
            w.read(s, tmp.data());
            const int64_t out = s.shape[0], in = s.shape[1];
            parallel_for(static_cast<size_t>(in), [&](size_t lo, size_t hi) {
              for (size_t i = lo; i < hi; ++i)
                for (int64_t o = 0; o < out; ++o) dst[i * static_cast<size_t>(out) + static_cast<size_t>(o)] = tmp[static_cast<size_t>(o * in) + i];
            });
          }
          weight_bytes_ += static_cast<int64_t>(dst.bytes());
          return;
        }
      throw std::logic_error("no tensor " + name);
    };
    load("model.embed_tokens.weight", embed_, false);
    layers_.resize(static_cast<size_t>(c.layers));
    for (int l = 0; l < c.layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      Layer& L = layers_[static_cast<size_t>(l)];
      load(p + "input_layernorm.weight", L.in_norm, false);
      load(p + "post_attention_layernorm.weight", L.post_norm, false);
      load(p + "self_attn.q_proj.weight", L.wq, true);
      load(p + "self_attn.k_proj.weight", L.wk, true);
      load(p + "self_attn.v_proj.weight", L.wv, true);
      if (c.qkv_bias) {
        load(p + "self_attn.q_proj.bias", L.bq, false);
        load(p + "self_attn.k_proj.bias", L.bk, false);
        load(p + "self_attn.v_proj.bias", L.bv, false);
      }
      if (c.qk_norm) {
        load(p + "self_attn.q_norm.weight", L.q_norm, false);
        load(p + "self_attn.k_norm.weight", L.k_norm, false);
      }
      load(p + "self_attn.o_proj.weight", L.wo, true);
      if (c.o_bias) load(p + "self_attn.o_proj.bias", L.bo, false);
      load(p + "mlp.gate_proj.weight", L.wg, true);
      load(p + "mlp.up_proj.weight", L.wu, true);
      load(p + "mlp.down_proj.weight", L.wd, true);
      if (c.mlp_bias) {
        load(p + "mlp.gate_proj.bias", L.bg, false);
        load(p + "mlp.up_proj.bias", L.bu, false);
        load(p + "mlp.down_proj.bias", L.bd, false);
      }
    }
    load("model.norm.weight", final_norm_, false);
    load(c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", lm_head_, true);
  }

  const ModelConfig& config() const override { return c_; }

  int new_sequence(int capacity) override {
    if (capacity <= 0) throw std::invalid_argument("sequence capacity must be positive");
    const int id = seqs_.free_id();
    Sequence& s = seqs_.slot(id);
    s.cache.allocate(static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(capacity), "KV cache");
    s.capacity = capacity;
    s.length = 0;
    s.live = true;
    s.evicted.clear();
    s.evicted_head.clear();
    s.recording = false;
    s.record = {};
    s.kv_format.reset();
    s.fp8_scale.clear();
    s.tree.close();
    return id;
  }
  void release(int seq) override {
    Sequence& s = at(seq);
    s.cache.reset();
    s.live = false;
    s.tree.close();
  }
  int fork(int seq) override {
    no_tree(seq, "fork");
    const int src_capacity = at(seq).capacity;
    const int id = new_sequence(src_capacity);
    Sequence& src = at(seq);  // new_sequence may have grown seqs_
    Sequence& dst = at(id);
    std::memcpy(dst.cache.data(), src.cache.data(), src.cache.bytes());
    dst.length = src.length;
    dst.evicted = src.evicted;
    dst.evicted_head = src.evicted_head;
    dst.kv_format = src.kv_format;
    dst.fp8_scale = src.fp8_scale;
    return id;
  }
  void truncate(int seq, int length) override {
    Sequence& s = at(seq);
    if (length < 0 || length > s.length) throw std::invalid_argument(fmt::format("truncate to {} of a {}-token sequence", length, s.length));
    if (s.tree.open()) {
      if (length > s.tree.base())
        throw std::invalid_argument(fmt::format("truncate to {} inside an open token tree (committed {})", length, s.tree.base()));
      s.tree.close();
    }
    s.length = length;
  }
  int length(int seq) const override { return at(seq).length; }
  void copy_cache(int src, int dst, int begin, int n) override {
    no_tree(src, "copy_cache");
    no_tree(dst, "copy_cache");
    Sequence& s = at(src);
    Sequence& d = at(dst);
    if (begin < 0 || n < 0 || d.length < begin || s.length < begin + n || begin + n > d.capacity)
      throw std::invalid_argument(fmt::format("copy_cache [{}, {}) from a {}-token into a {}-token sequence (capacity {})", begin,
                                              begin + n, s.length, d.length, d.capacity));
    const size_t hd = static_cast<size_t>(c_.head_dim);
    for (int l = 0; l < c_.layers; ++l)
      for (int kh = 0; kh < c_.kv_heads; ++kh) {
        std::memcpy(cache_k(d, l, kh) + static_cast<size_t>(begin) * hd, cache_k(s, l, kh) + static_cast<size_t>(begin) * hd,
                    sizeof(float) * hd * static_cast<size_t>(n));
        std::memcpy(cache_v(d, l, kh) + static_cast<size_t>(begin) * hd, cache_v(s, l, kh) + static_cast<size_t>(begin) * hd,
                    sizeof(float) * hd * static_cast<size_t>(n));
      }
    if (!d.evicted.empty()) std::fill(d.evicted.begin() + begin, d.evicted.begin() + begin + n, uint8_t{0});
    for (int lh = 0; !d.evicted_head.empty() && lh < c_.layers * c_.kv_heads; ++lh) {
      auto row = d.evicted_head.begin() + static_cast<std::ptrdiff_t>(lh) * d.capacity;
      std::fill(row + begin, row + begin + n, uint8_t{0});
    }
    d.length = begin + n;
  }
  int capacity(int seq) const override { return at(seq).capacity; }

  void prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) override {
    if (n <= 0) throw std::invalid_argument("prefill of no tokens");
    n_logits = std::clamp(n_logits, 1, n);
    no_tree(seq, "prefill");
    std::vector<int> seq_of(static_cast<size_t>(n), seq), pos(static_cast<size_t>(n));
    const int start = at(seq).length;
    for (int r = 0; r < n; ++r) pos[static_cast<size_t>(r)] = start + r;
    forward(tokens, n, seq_of, pos, n - n_logits, out);
  }

  void prefill_batch(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out) override {
    std::vector<int> seq_of, pos;
    for (int i = 0; i < n; ++i) {
      if (counts[i] <= 0) throw std::invalid_argument("prefill_batch: a sequence with no tokens");
      no_tree(seqs[i], "prefill_batch");
      for (int i2 = 0; i2 < i; ++i2)
        if (seqs[i] == seqs[i2]) throw std::invalid_argument("prefill_batch holds each sequence once");
      for (int j = 0; j < counts[i]; ++j) {
        seq_of.push_back(seqs[i]);
        pos.push_back(at(seqs[i]).length + j);
      }
    }
    forward(tokens, static_cast<int>(seq_of.size()), seq_of, pos, 0, out);
  }

  void decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) override {
    std::vector<int> seq_of(seqs, seqs + batch), pos(static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      no_tree(seqs[r], "decode");
      pos[static_cast<size_t>(r)] = at(seqs[r]).length;
    }
    for (int r = 0; r < batch; ++r)
      for (int r2 = 0; r2 < r; ++r2)
        if (seqs[r] == seqs[r2]) throw std::invalid_argument("a decode batch holds each sequence once");
    forward(tokens, batch, seq_of, pos, 0, out);
  }

  void prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out) override {
    if (n <= 0) throw std::invalid_argument("prefill_tree of no tokens");
    Sequence& s = at(seq);
    if (s.recording) throw std::invalid_argument("prefill_tree while recording attention");
    for (int i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c_.vocab) throw std::invalid_argument(fmt::format("token {} outside the vocabulary", tokens[i]));
    const int base = s.tree.open() ? s.tree.base() : s.length, first_node = s.tree.size();
    if (base + first_node + n > s.capacity) throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq, s.capacity));
    s.tree.append(base, s.tree.extend(parents, n));
    TreeRows tree;
    tree.base = base;
    std::vector<int> seq_of(static_cast<size_t>(n), seq), pos(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const std::vector<int>& anc = s.tree.ancestors(first_node + i);
      pos[static_cast<size_t>(i)] = base + static_cast<int>(anc.size()) - 1;
      tree.slot.push_back(base + first_node + i);
      tree.nodes.push_back(&anc);
    }
    forward(tokens, n, seq_of, pos, 0, out, &tree);
  }

  void keep_tree_path(int seq, const std::vector<int>& path) override {
    Sequence& s = at(seq);
    s.tree.check_path(path);
    const int base = s.tree.base();
    const size_t hd = static_cast<size_t>(c_.head_dim);
    // path is increasing and path[i] >= i, so no slot is overwritten before it is read.
    for (size_t i = 0; i < path.size(); ++i) {
      const size_t from = static_cast<size_t>(base + path[i]), to = static_cast<size_t>(base) + i;
      if (from == to) continue;
      for (int l = 0; l < c_.layers; ++l)
        for (int kh = 0; kh < c_.kv_heads; ++kh) {
          std::memmove(cache_k(s, l, kh) + to * hd, cache_k(s, l, kh) + from * hd, sizeof(float) * hd);
          std::memmove(cache_v(s, l, kh) + to * hd, cache_v(s, l, kh) + from * hd, sizeof(float) * hd);
        }
      if (!s.evicted.empty()) s.evicted[to] = s.evicted[from];
      for (size_t lh = 0; !s.evicted_head.empty() && lh < static_cast<size_t>(c_.layers) * c_.kv_heads; ++lh)
        s.evicted_head[lh * static_cast<size_t>(s.capacity) + to] = s.evicted_head[lh * static_cast<size_t>(s.capacity) + from];
    }
    s.length = base + static_cast<int>(path.size());
    s.tree.close();
  }

  void set_kept(int seq, int pos, bool kept) override {
    Sequence& s = at(seq);
    if (pos < 0 || pos >= s.capacity) throw std::invalid_argument(fmt::format("position {} of a {}-token sequence", pos, s.capacity));
    if (!kept && s.evicted.empty()) s.evicted.assign(static_cast<size_t>(s.capacity), 0);
    if (!s.evicted.empty()) s.evicted[static_cast<size_t>(pos)] = kept ? 0 : 1;
  }
  void set_kept_head(int seq, int layer, int kv_head, int pos, bool kept) override {
    Sequence& s = at(seq);
    if (layer < 0 || layer >= c_.layers || kv_head < 0 || kv_head >= c_.kv_heads || pos < 0 || pos >= s.capacity)
      throw std::invalid_argument(fmt::format("set_kept_head: layer {}, kv head {}, position {} of a {}-layer, {}-kv-head, {}-token sequence",
                                              layer, kv_head, pos, c_.layers, c_.kv_heads, s.capacity));
    if (!kept && s.evicted_head.empty()) s.evicted_head.assign(static_cast<size_t>(c_.layers) * c_.kv_heads * static_cast<size_t>(s.capacity), 0);
    if (!s.evicted_head.empty())
      s.evicted_head[(static_cast<size_t>(layer) * c_.kv_heads + static_cast<size_t>(kv_head)) * static_cast<size_t>(s.capacity) + static_cast<size_t>(pos)] =
          kept ? 0 : 1;
  }
  void record_attention(int seq, bool on) override { at(seq).recording = on; }
  void set_kv_format(int seq, kvcache::KvFormat format, const std::vector<float>& fp8_scales) override {
    Sequence& s = at(seq);
    if (s.length > 0) throw std::logic_error("set_kv_format: the sequence already holds tokens");
    if (kvcache::is_kivi(format) && c_.head_dim % kivi_value_group() != 0)
      throw std::invalid_argument(fmt::format("set_kv_format: {} needs head_dim ({}) a multiple of {}", kvcache::to_string(format),
                                              c_.head_dim, kivi_value_group()));
    const size_t n = static_cast<size_t>(c_.layers) * 2 * static_cast<size_t>(c_.kv_heads);
    if (format == kvcache::KvFormat::FP8 && fp8_scales.size() != n)
      throw std::invalid_argument(fmt::format("set_kv_format: fp8 needs {} scales, got {}", n, fp8_scales.size()));
    s.kv_format = format;
    s.fp8_scale = fp8_scales;
  }
  std::vector<float> kv_amax(int seq) const override {
    const Sequence& s = at(seq);
    const size_t per = static_cast<size_t>(s.capacity) * static_cast<size_t>(c_.head_dim);
    const size_t used = static_cast<size_t>(s.length) * static_cast<size_t>(c_.head_dim);
    std::vector<float> amax(static_cast<size_t>(c_.layers) * 2 * static_cast<size_t>(c_.kv_heads), 0.0f);
    for (size_t i = 0; i < amax.size(); ++i)  // the cache is [layers][K, V][kv_heads][capacity][head_dim]
      for (size_t e = 0; e < used; ++e) amax[i] = std::max(amax[i], std::fabs(s.cache[i * per + e]));
    return amax;
  }
  std::vector<float> kv_channel_amax(int seq) const override {
    const Sequence& s = at(seq);
    const size_t D = static_cast<size_t>(c_.head_dim), per = static_cast<size_t>(s.capacity) * D;
    std::vector<float> amax(static_cast<size_t>(c_.layers) * 2 * static_cast<size_t>(c_.kv_heads) * D, 0.0f);
    for (size_t i = 0; i < amax.size() / D; ++i)  // the cache is [layers][K, V][kv_heads][capacity][head_dim]
      for (size_t t = 0; t < static_cast<size_t>(s.length); ++t)
        for (size_t d = 0; d < D; ++d) amax[i * D + d] = std::max(amax[i * D + d], std::fabs(s.cache[i * per + t * D + d]));
    return amax;
  }
  const AttentionRecord& attention_record(int seq) const override { return at(seq).record; }

  int64_t weight_bytes() const override { return weight_bytes_; }
  int64_t kv_bytes() const override { return seqs_.cache_bytes(); }

 private:
  Sequence& at(int seq) { return seqs_.at(seq); }
  const Sequence& at(int seq) const { return seqs_.at(seq); }
  void no_tree(int seq, const char* what) const {
    if (at(seq).tree.open()) throw std::logic_error(fmt::format("{} on sequence {} while its token tree is open", what, seq));
  }

  float* cache_k(Sequence& s, int layer, int kvh) {
    return s.cache.data() + ((static_cast<size_t>(layer) * 2 * c_.kv_heads + kvh) * s.capacity) * c_.head_dim;
  }
  float* cache_v(Sequence& s, int layer, int kvh) {
    return s.cache.data() + ((static_cast<size_t>(layer) * 2 * c_.kv_heads + c_.kv_heads + kvh) * s.capacity) * c_.head_dim;
  }

  // Rounds the K and V rows ([rows][kv_dim], after RoPE) of sequences with a KV format through
  // it, in place, before they are written to the cache.
  void round_kv(int l, int rows, const std::vector<int>& seq_of, float* k, float* v) {
    const int d = c_.head_dim, kvd = c_.kv_dim(), kvh = c_.kv_heads;
    for (int r = 0; r < rows; ++r) {
      Sequence& s = at(seq_of[static_cast<size_t>(r)]);
      if (!s.kv_format) continue;
      const float* scales = s.fp8_scale.empty() ? nullptr : s.fp8_scale.data() + static_cast<size_t>(l) * 2 * static_cast<size_t>(kvh);
      for (int kh = 0; kh < kvh; ++kh) {
        round_row(*s.kv_format, k + static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d, d, scales ? scales[kh] : 0.0f);
        round_row(*s.kv_format, v + static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d, d, scales ? scales[kvh + kh] : 0.0f);
      }
    }
  }
  static void round_row(kvcache::KvFormat f, float* x, int d, float fp8_scale) {
    using kvcache::KvFormat;
    if (f == KvFormat::BF16 || kvcache::is_kivi(f)) {  // int4/int2: bf16 until the key group completes (kivi_close_group)
      for (int e = 0; e < d; ++e) x[e] = bf16_bits_to_float(float_to_bf16_bits(x[e]));
    } else if (f == KvFormat::FP8) {
      for (int e = 0; e < d; ++e) x[e] = kvcache::fp8_dequantize(kvcache::fp8_quantize(x[e], fp8_scale), fp8_scale);
    } else {
      float amax = 0;
      for (int e = 0; e < d; ++e) amax = std::max(amax, std::fabs(x[e]));
      const float scale = kvcache::int8_scale(amax);
      for (int e = 0; e < d; ++e) x[e] = kvcache::int8_dequantize(kvcache::int8_quantize(x[e], scale), scale);
    }
  }
  // int4 / int2 (KIVI, kv_format.h): when position p completes a key group of G = kKiviGroup tokens, the
  // group's keys are re-quantized per channel and its values per token (groups of
  // kivi_value_group() channels) in place; until then they stay bf16 (the residual).
  int kivi_value_group() const { return std::min(kvcache::kKiviGroup, c_.head_dim); }
  void kivi_close_group(Sequence& s, int l, int p) {
    const int G = kvcache::kKiviGroup, d = c_.head_dim, bits = kvcache::kivi_bits(*s.kv_format);
    if ((p + 1) % G != 0) return;
    const size_t first = static_cast<size_t>(p + 1 - G) * static_cast<size_t>(d);
    for (int kh = 0; kh < c_.kv_heads; ++kh) {
      kvcache::kivi_round_key_group(cache_k(s, l, kh) + first, G, d, d, bits);
      for (int t = 0; t < G; ++t)
        kvcache::kivi_round_value_row(cache_v(s, l, kh) + first + static_cast<size_t>(t) * d, d, kivi_value_group(), bits);
    }
  }

  // Rows are tokens: row r belongs to sequence seq_of[r] at position pos[r]; its K/V are written
  // there, and it attends to that sequence's keys up to its own position (within the window).
  // With `tree` (one sequence), row r's K/V go to slot tree->slot[r] and it attends to the
  // positions before tree->base (within the window) and to its ancestors' slots.
  // Outputs the rows from `first_out` on.
  void forward(const int32_t* tokens, int rows, const std::vector<int>& seq_of, const std::vector<int>& pos, int first_out,
               const StepOutput& out, const TreeRows* tree = nullptr) {
    auto slot = [&](int r) { return tree ? tree->slot[static_cast<size_t>(r)] : pos[static_cast<size_t>(r)]; };
    const int h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), d = c_.head_dim, g = c_.heads / c_.kv_heads;
    for (int r = 0; r < rows; ++r) {
      if (tokens[r] < 0 || tokens[r] >= c_.vocab) throw std::invalid_argument(fmt::format("token {} outside the vocabulary", tokens[r]));
      if (slot(r) >= at(seq_of[static_cast<size_t>(r)]).capacity)
        throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq_of[static_cast<size_t>(r)], at(seq_of[static_cast<size_t>(r)]).capacity));
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
    std::vector<float> x(R * h), xn(R * h), q(R * qd), k(R * kvd), v(R * kvd), att(R * qd), tmp(R * h);
    std::vector<float> gate(R * c_.mlp), up(R * c_.mlp);
    for (int r = 0; r < rows; ++r)
      std::memcpy(&x[static_cast<size_t>(r) * h], embed_.data() + static_cast<size_t>(tokens[r]) * h, sizeof(float) * h);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (int l = 0; l < c_.layers; ++l) {
      Layer& L = layers_[static_cast<size_t>(l)];
      rmsnorm(x.data(), rows, h, L.in_norm.data(), c_.rms_eps, xn.data());
      matmul(xn.data(), rows, h, L.wq.data(), qd, c_.qkv_bias ? L.bq.data() : nullptr, q.data());
      matmul(xn.data(), rows, h, L.wk.data(), kvd, c_.qkv_bias ? L.bk.data() : nullptr, k.data());
      matmul(xn.data(), rows, h, L.wv.data(), kvd, c_.qkv_bias ? L.bv.data() : nullptr, v.data());
      for (int r = 0; r < rows; ++r) {
        const int p = pos[static_cast<size_t>(r)];
        if (c_.qk_norm) {  // Qwen3: RMSNorm over each head's head_dim, before RoPE
          rmsnorm(&q[static_cast<size_t>(r) * qd], c_.heads, d, L.q_norm.data(), c_.rms_eps, &q[static_cast<size_t>(r) * qd]);
          rmsnorm(&k[static_cast<size_t>(r) * kvd], c_.kv_heads, d, L.k_norm.data(), c_.rms_eps, &k[static_cast<size_t>(r) * kvd]);
        }
        for (int hh = 0; hh < c_.heads; ++hh)
          rope(&q[static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d], d, p, inv_freq_.data(), rope_factor_);
        for (int kh = 0; kh < c_.kv_heads; ++kh)
          rope(&k[static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d], d, p, inv_freq_.data(), rope_factor_);
      }
      round_kv(l, rows, seq_of, k.data(), v.data());
      for (int r = 0; r < rows; ++r) {
        const int p = slot(r);
        Sequence& s = at(seq_of[static_cast<size_t>(r)]);
        for (int kh = 0; kh < c_.kv_heads; ++kh) {
          std::memcpy(cache_k(s, l, kh) + static_cast<size_t>(p) * d, &k[static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d], sizeof(float) * d);
          std::memcpy(cache_v(s, l, kh) + static_cast<size_t>(p) * d, &v[static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d], sizeof(float) * d);
        }
        if (s.kv_format && kvcache::is_kivi(*s.kv_format)) kivi_close_group(s, l, p);
      }
      double attn_work = 0;
      for (int r = 0; r < rows; ++r) attn_work += static_cast<double>(pos[static_cast<size_t>(r)] + 1) * c_.heads * d;
      run_chunks(attn_work >= (1 << 18), R * static_cast<size_t>(c_.heads), [&](size_t lo, size_t hi) {
        static const DotFn dot = pick_dot();
        std::vector<float> score;
        for (size_t t = lo; t < hi; ++t) {
          const int r = static_cast<int>(t / static_cast<size_t>(c_.heads)), hh = static_cast<int>(t % static_cast<size_t>(c_.heads));
          const int p = pos[static_cast<size_t>(r)];
          Sequence& s = at(seq_of[static_cast<size_t>(r)]);
          const int window = c_.window(l);
          const int first = window > 0 ? std::max(0, p - window + 1) : 0;
          const float* qv = &q[static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d];
          const float* kc = cache_k(s, l, hh / g);
          const float* vc = cache_v(s, l, hh / g);
          const uint8_t* evicted = s.evicted.empty() ? nullptr : s.evicted.data();
          const uint8_t* head_evicted =
              s.evicted_head.empty() ? nullptr
                                     : s.evicted_head.data() + (static_cast<size_t>(l) * c_.kv_heads + static_cast<size_t>(hh / g)) * static_cast<size_t>(s.capacity);
          // Keys: positions first..p, or in a tree the committed ones then the ancestors' slots.
          const std::vector<int>* anc = tree ? tree->nodes[static_cast<size_t>(r)] : nullptr;
          const int cached = anc ? std::max(0, tree->base - first) : p - first + 1;
          const int n_keys = cached + (anc ? static_cast<int>(anc->size()) : 0);
          auto key = [&](int jj) { return jj < cached ? first + jj : tree->base + (*anc)[static_cast<size_t>(jj - cached)]; };
          score.assign(static_cast<size_t>(n_keys), 0.0f);
          float mx = -INFINITY;
          for (int jj = 0; jj < n_keys; ++jj) {
            const int j = key(jj);
            if ((evicted && evicted[j]) || (head_evicted && head_evicted[j])) {
              score[static_cast<size_t>(jj)] = -INFINITY;  // exp() gives it weight 0
              continue;
            }
            const float acc = dot(qv, kc + static_cast<size_t>(j) * d, d);
            score[static_cast<size_t>(jj)] = acc * scale;
            mx = std::max(mx, acc * scale);
          }
          float sum = 0;
          for (auto& sc : score) sum += sc = std::exp(sc - mx);
          float* o = &att[static_cast<size_t>(r) * qd + static_cast<size_t>(hh) * d];
          std::fill(o, o + d, 0.0f);
          for (int jj = 0; jj < n_keys; ++jj) {
            const float w = score[static_cast<size_t>(jj)] / sum;
            const int j = key(jj);
            for (int e = 0; e < d; ++e) o[e] += w * vc[static_cast<size_t>(j) * d + e];
          }
          if (recorded[static_cast<size_t>(r)]) {
            float* hw = s.head_weights.data() + static_cast<size_t>(hh) * (static_cast<size_t>(p) + 1);
            for (int j = first; j <= p; ++j) hw[j] = score[static_cast<size_t>(j - first)] / sum;
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
      matmul(att.data(), rows, qd, L.wo.data(), h, c_.o_bias ? L.bo.data() : nullptr, tmp.data());
      for (size_t i = 0; i < R * h; ++i) x[i] += tmp[i];
      rmsnorm(x.data(), rows, h, L.post_norm.data(), c_.rms_eps, xn.data());
      matmul(xn.data(), rows, h, L.wg.data(), c_.mlp, c_.mlp_bias ? L.bg.data() : nullptr, gate.data());
      matmul(xn.data(), rows, h, L.wu.data(), c_.mlp, c_.mlp_bias ? L.bu.data() : nullptr, up.data());
      for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
      matmul(gate.data(), rows, c_.mlp, L.wd.data(), h, c_.mlp_bias ? L.bd.data() : nullptr, tmp.data());
      for (size_t i = 0; i < R * h; ++i) x[i] += tmp[i];
    }
    for (int r = 0; r < rows; ++r) {
      Sequence& s = at(seq_of[static_cast<size_t>(r)]);
      s.length = std::max(s.length, slot(r) + 1);
    }
    const int n_out = rows - first_out;
    if (!out.logits && !out.next) return;
    rmsnorm(&x[static_cast<size_t>(first_out) * h], n_out, h, final_norm_.data(), c_.rms_eps, xn.data());
    std::vector<float> own;
    float* logits = out.logits;
    if (!logits) {
      own.resize(static_cast<size_t>(n_out) * static_cast<size_t>(c_.vocab));
      logits = own.data();
    }
    matmul(xn.data(), n_out, h, lm_head_.data(), c_.vocab, nullptr, logits);
    if (out.next)
      for (int r = 0; r < n_out; ++r)
        out.next[r] = sample_token(logits + static_cast<size_t>(r) * c_.vocab, c_.vocab, out.sampling,
                                   sample_uniform(out.sampling.seed, out.step, r));
  }

  ModelConfig c_;
  std::vector<double> inv_freq_;  // RoPE [head_dim / 2], theta and scaling applied
  double rope_factor_ = 1.0;       // on cos and sin (YaRN)
  Buf embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  SequenceTable<Sequence> seqs_;
  int64_t weight_bytes_ = 0;
};

}  // namespace

void Model::copy_cache(int, int, int, int) { throw std::runtime_error("copy_cache is not implemented by this backend"); }
void Model::set_kv_format(int, kvcache::KvFormat, const std::vector<float>&) {
  throw std::runtime_error("set_kv_format is not supported by this engine");
}
std::vector<float> Model::kv_amax(int) const { throw std::runtime_error("kv_amax is not supported by this engine"); }
std::vector<float> Model::kv_channel_amax(int) const { throw std::runtime_error("kv_channel_amax is not supported by this engine"); }
void Model::prefill_batch(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out) {
  const size_t V = static_cast<size_t>(config().vocab);
  int row = 0;
  for (int i = 0; i < n; ++i) {
    StepOutput o = out;
    if (o.logits) o.logits = out.logits + static_cast<size_t>(row) * V;
    if (o.next) o.next = out.next + row;
    prefill(seqs[i], tokens + row, counts[i], counts[i], o);
    row += counts[i];
  }
}
void Model::prefill_tree(int, const int32_t*, const int32_t*, int, const StepOutput&) {
  throw std::runtime_error("prefill_tree (tree verification) is not supported by this engine");
}
void Model::keep_tree_path(int, const std::vector<int>&) {
  throw std::runtime_error("keep_tree_path (tree verification) is not supported by this engine");
}
void Model::set_kept(int, int, bool) { throw std::runtime_error("set_kept (KV eviction) is not supported by this engine"); }
void Model::set_kept_head(int, int, int, int, bool) {
  throw std::runtime_error("set_kept_head (per-head KV eviction) is not supported by this engine");
}
void Model::record_attention(int, bool) { throw std::runtime_error("record_attention is not supported by this engine"); }
const AttentionRecord& Model::attention_record(int) const {
  throw std::runtime_error("attention_record is not supported by this engine");
}

const std::vector<std::string>& matmul_names() {
  static const std::vector<std::string> names = {"cublas", "gemv"};
  return names;
}
const char* to_string(Matmul m) { return matmul_names()[static_cast<size_t>(m)].c_str(); }
Matmul parse_matmul(const std::string& name) {
  const auto& names = matmul_names();
  for (size_t i = 0; i < names.size(); ++i)
    if (name == names[i]) return static_cast<Matmul>(i);
  throw InputError(fmt::format("matmul: '{}' is not one of {}", name, fmt::join(names, ", ")));
}

std::unique_ptr<Model> make_cpu_model(const ModelConfig& c, const WeightSource& w) { return std::make_unique<CpuModel>(c, w); }

#if !defined(INFER_BENCH_HAVE_CUDA_MODEL)
std::unique_ptr<Model> make_cuda_model(const ModelConfig&, const WeightSource&, const EngineOptions&, void*) {
  throw InputError("this infer-bench was built without the CUDA engine");
}
#endif

}  // namespace ib::model
