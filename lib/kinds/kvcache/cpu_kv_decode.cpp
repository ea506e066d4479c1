// CPU variants of `kv-quant` and `kv-paged`: decode attention over a bf16 / FP8 / INT8 cache,
// contiguous or paged, and over an int4 or int2 (KIVI) cache, contiguous, with the layouts of
// decode_problem.h. The cache is written by the host quantizer; the attention reads the stored
// bytes and dequantizes a row at a time (FP8 by moving its bits into a float's, its per-head
// scales folded into the query and the output; INT8's per-token scales applied to the score and
// the probability; KIVI's packed codes through the key group's per-channel and the token's
// per-group (scale, zero), its residual tokens read as bf16). Threads take (sequence, kv head,
// split) tasks; each split keeps its own online-softmax state and the splits are merged at the
// end, as the CUDA kernel does. KIVI splits are whole key groups.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/backend.h"
#include "core/memory.h"
#include "core/registry.h"
#include "kinds/kvcache/decode_check.h"
#include "kinds/kvcache/kv_decode_keys.h"
#include "kvcache/decode_problem.h"
#include "numerics/parallel.h"

namespace ib::kvcache {
namespace {

constexpr int kTile = 32;  // tokens scored before their values are accumulated
constexpr int kMinSplitTokens = 256;
constexpr float kFp8Unbias = 1.329227995784916e+36f;  // 2^120

// The decode over the cache of the shape a variant reads (shape_of: its format and layout); one
// small class per way of reading it, after the base.
class CpuKvDecode : public Variant {
 public:
  std::string unsupported(const Point& p) const override { return decode_shape_problem(shape_of(p)); }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    s_ = shape_of(p);
    in_ = decode_inputs(s_, seed);
    seed_ = seed;
    const int d = s_.head_dim;
    elem_ = s_.format == KvFormat::BF16 ? 2 : 1;
    if (is_kivi(s_.format)) allocate_kivi();
    int64_t slots = int64_t{s_.batch} * s_.context;
    if (s_.paged()) {
      tables_ = build_block_tables(s_, seed);
      slots = int64_t{tables_.num_blocks} * s_.block_size;
    }
    const size_t token_heads = static_cast<size_t>(slots) * static_cast<size_t>(s_.kv_heads);
    if (!is_kivi(s_.format)) {
      k_.allocate(token_heads * static_cast<size_t>(d) * elem_, "K cache");
      v_.allocate(token_heads * static_cast<size_t>(d) * elem_, "V cache");
    }
    if (s_.format == KvFormat::FP8) {
      k_scale_.allocate(static_cast<size_t>(s_.batch) * s_.kv_heads, "K scales (per sequence, head)");
      v_scale_.allocate(k_scale_.size(), "V scales (per sequence, head)");
    } else if (s_.format == KvFormat::INT8) {
      k_scale_.allocate(token_heads, "K scales (per token, head)");
      v_scale_.allocate(token_heads, "V scales (per token, head)");
    }
    q_.allocate(static_cast<size_t>(s_.batch) * s_.heads * d, "q");
    out_.allocate(q_.size(), "out");
    for (int b = 0; b < s_.batch; ++b)
      for (int h = 0; h < s_.heads; ++h)
        for (int c = 0; c < d; ++c) q_[(static_cast<size_t>(b) * s_.heads + h) * d + c] = in_.q(b, h, c);
    // Quantize-on-append by the host quantizer, one (sequence, kv head) per task.
    const size_t pairs = static_cast<size_t>(s_.batch) * s_.kv_heads;
    parallel_for(pairs, [&](size_t lo, size_t hi) {
      for (size_t i = lo; i < hi; ++i) store(static_cast<int>(i / s_.kv_heads), static_cast<int>(i % s_.kv_heads));
    });
    // Splits: enough tasks for every thread several times over, each split a few hundred tokens.
    const int threads = static_cast<int>(std::max(1u, cpu_threads()));
    const int want = (4 * threads + static_cast<int>(pairs) - 1) / static_cast<int>(pairs);
    splits_ = std::clamp(want, 1, std::max(1, s_.context / kMinSplitTokens));
    const size_t g = static_cast<size_t>(s_.group());
    partial_.allocate(pairs * static_cast<size_t>(splits_) * g * (static_cast<size_t>(d) + 2), "split partials");
  }

  Validation validate(BackendRuntime& rt) override {
    std::fill(out_.begin(), out_.end(), std::numeric_limits<float>::quiet_NaN());
    run(rt);
    const int d = s_.head_dim;
    check_ = check_decode(
        s_, in_, seed_, [&](int b, int kvh) { return fetch(b, kvh); },
        [&](int b, int h, int c) { return out_[(static_cast<size_t>(b) * s_.heads + h) * d + c]; }, 1e-2);
    return check_.gate;
  }

  void run(BackendRuntime&) override {
    const size_t pairs = static_cast<size_t>(s_.batch) * s_.kv_heads;
    parallel_for(pairs * static_cast<size_t>(splits_), [&](size_t lo, size_t hi) {
      std::vector<float> ws(static_cast<size_t>(s_.group()) * (kTile + static_cast<size_t>(s_.head_dim)) +
                            static_cast<size_t>(s_.head_dim));
      if (is_kivi(s_.format)) {
        const size_t g = static_cast<size_t>(s_.group()), d = static_cast<size_t>(s_.head_dim);
        ws.resize(g * (static_cast<size_t>(s_.kivi_group) + 2 * d + 1 + d / static_cast<size_t>(s_.kivi_group)) + d);
        const auto task = s_.format == KvFormat::INT2 ? &CpuKvDecode::kivi_split_task<2> : &CpuKvDecode::kivi_split_task<4>;
        for (size_t t = lo; t < hi; ++t) (this->*task)(t / splits_, static_cast<int>(t % splits_), ws.data());
        return;
      }
      for (size_t t = lo; t < hi; ++t) split_task(t / splits_, static_cast<int>(t % splits_), ws.data());
    });
    merge();
  }

  Work work() const override { return {s_.flops(), s_.io_bytes()}; }
  std::vector<Metric> metrics() const override {
    auto m = decode_metrics(s_, check_);
    m.push_back({"splits", static_cast<double>(splits_), ""});
    return m;
  }

 protected:
  // The problem of a point with the cache this variant holds.
  virtual DecodeShape shape_of(const Point& p) const = 0;

 private:
  // Index of (sequence b, kv head, token t) in units of token-heads: × head_dim for elements,
  // as is for INT8 scales.
  size_t slot(int b, int kvh, int t) const {
    if (!s_.paged())
      return (static_cast<size_t>(b) * s_.kv_heads + kvh) * static_cast<size_t>(s_.context) + static_cast<size_t>(t);
    const int32_t block = tables_.table[static_cast<size_t>(b) * tables_.max_blocks + static_cast<size_t>(t / s_.block_size)];
    return (static_cast<size_t>(block) * s_.kv_heads + kvh) * static_cast<size_t>(s_.block_size) +
           static_cast<size_t>(t % s_.block_size);
  }

  // slot(b, kvh, t) for tokens visited in increasing order: consecutive tokens of one block (all
  // of a contiguous cache) are consecutive slots, so the block table is read once per block.
  // run_at is the slot of token run_end - 1; run_end = -1 starts a new walk.
  size_t slot_in_run(int b, int kvh, int t, size_t& run_at, int& run_end) const {
    if (t == run_end && (!s_.paged() || t % s_.block_size != 0)) {
      ++run_end;
      return ++run_at;
    }
    run_at = slot(b, kvh, t);
    run_end = t + 1;
    return run_at;
  }

  void store(int b, int kvh) {
    const StoredHead h = quantize_head(s_, in_, b, kvh);
    if (is_kivi(s_.format)) return store_kivi(b, kvh, h);
    const size_t row = static_cast<size_t>(s_.head_dim) * elem_;
    for (int t = 0; t < s_.length(b); ++t) {
      const size_t at = slot(b, kvh, t);
      std::memcpy(k_.data() + at * row, h.k.data() + static_cast<size_t>(t) * row, row);
      std::memcpy(v_.data() + at * row, h.v.data() + static_cast<size_t>(t) * row, row);
      if (s_.format == KvFormat::INT8) {
        k_scale_[at] = h.k_scale[static_cast<size_t>(t)];
        v_scale_[at] = h.v_scale[static_cast<size_t>(t)];
      }
    }
    if (s_.format == KvFormat::FP8) {
      k_scale_[static_cast<size_t>(b) * s_.kv_heads + kvh] = h.k_scale.at(0);
      v_scale_[static_cast<size_t>(b) * s_.kv_heads + kvh] = h.v_scale.at(0);
    }
  }

  StoredHead fetch(int b, int kvh) const {
    if (is_kivi(s_.format)) return fetch_kivi(b, kvh);
    StoredHead h;
    const size_t row = static_cast<size_t>(s_.head_dim) * elem_;
    const int n = s_.length(b);
    h.k.resize(static_cast<size_t>(n) * row);
    h.v.resize(h.k.size());
    for (int t = 0; t < n; ++t) {
      const size_t at = slot(b, kvh, t);
      std::memcpy(h.k.data() + static_cast<size_t>(t) * row, k_.data() + at * row, row);
      std::memcpy(h.v.data() + static_cast<size_t>(t) * row, v_.data() + at * row, row);
      if (s_.format == KvFormat::INT8) {
        h.k_scale.push_back(k_scale_[at]);
        h.v_scale.push_back(v_scale_[at]);
      }
    }
    if (s_.format == KvFormat::FP8) {
      h.k_scale.push_back(k_scale_[static_cast<size_t>(b) * s_.kv_heads + kvh]);
      h.v_scale.push_back(v_scale_[static_cast<size_t>(b) * s_.kv_heads + kvh]);
    }
    return h;
  }

  // Row t of K or V, dequantized up to a per-token (INT8) or per-head (FP8) scale.
  void load_row(const uint8_t* base, size_t at, float* dst) const {
    const int d = s_.head_dim;
    const uint8_t* src = base + at * static_cast<size_t>(d) * elem_;
    switch (s_.format) {
      case KvFormat::BF16:
        for (int c = 0; c < d; ++c) {
          uint16_t h;
          std::memcpy(&h, src + 2 * c, 2);
          dst[c] = bits_float(static_cast<uint32_t>(h) << 16);
        }
        break;
      case KvFormat::FP8:
        // e4m3 bits moved into a float's sign, exponent and mantissa fields read as 2^-120 × the
        // value (subnormals included); kFp8Unbias, folded into the head's scale, restores it.
        for (int c = 0; c < d; ++c)
          dst[c] = bits_float((static_cast<uint32_t>(src[c] & 0x7fu) << 20) | (static_cast<uint32_t>(src[c] & 0x80u) << 24));
        break;
      default:
        for (int c = 0; c < d; ++c) dst[c] = static_cast<float>(static_cast<int8_t>(src[c]));
        break;
    }
  }

  static float dot(const float* a, const float* b, int d) {
    float acc[8] = {};
    int c = 0;
    for (; c + 8 <= d; c += 8)
      for (int j = 0; j < 8; ++j) acc[j] += a[c + j] * b[c + j];
    float s = 0;
    for (; c < d; ++c) s += a[c] * b[c];
    for (float x : acc) s += x;
    return s;
  }

  float* partial(size_t pair, int split, int i) {
    const size_t g = static_cast<size_t>(s_.group()), stride = static_cast<size_t>(s_.head_dim) + 2;
    return partial_.data() +
           ((pair * static_cast<size_t>(splits_) + static_cast<size_t>(split)) * g + static_cast<size_t>(i)) * stride;
  }

  // Online softmax of the group's queries over tokens [t0, t1) of one split; state (m, l, acc[d])
  // per query head in the partials.
  void split_task(size_t pair, int split, float* ws) {
    const int b = static_cast<int>(pair / s_.kv_heads), kvh = static_cast<int>(pair % s_.kv_heads);
    const int d = s_.head_dim, g = s_.group(), n = s_.length(b);
    const int per = (n + splits_ - 1) / splits_;
    const int t0 = std::min(n, split * per), t1 = std::min(n, t0 + per);
    float k_head_scale = 1, v_head_scale = 1;
    if (s_.format == KvFormat::FP8) {
      k_head_scale = k_scale_[pair] * kFp8Unbias;
      v_head_scale = v_scale_[pair] * kFp8Unbias;
    }
    const float qs = static_cast<float>(s_.scale()) * k_head_scale;
    float* scores = ws;                                // [g][kTile]
    float* row = ws + static_cast<size_t>(g) * kTile;  // one K or V row
    float* qs_rows = row + d;                          // [g][d]: the group's queries × softmax scale × K's head scale
    for (int i = 0; i < g; ++i) {
      const float* q = q_.data() + (static_cast<size_t>(b) * s_.heads + static_cast<size_t>(kvh * g + i)) * d;
      for (int c = 0; c < d; ++c) qs_rows[static_cast<size_t>(i) * d + c] = q[c] * qs;
    }
    for (int i = 0; i < g; ++i) {
      float* st = partial(pair, split, i);
      st[0] = -INFINITY;
      st[1] = 0;
      std::fill(st + 2, st + 2 + d, 0.0f);
    }
    size_t run_at = 0;
    int run_end = -1;
    for (int base = t0; base < t1; base += kTile) {
      const int m = std::min(kTile, t1 - base);
      if (s_.paged()) prefetch_tile(b, kvh, base + kTile, std::min(kTile, t1 - base - kTile));
      run_end = -1;
      for (int j = 0; j < m; ++j) {
        const size_t at = slot_in_run(b, kvh, base + j, run_at, run_end);
        load_row(k_.data(), at, row);
        const float ts = s_.format == KvFormat::INT8 ? k_scale_[at] : 1.0f;
        for (int i = 0; i < g; ++i) scores[i * kTile + j] = dot(qs_rows + static_cast<size_t>(i) * d, row, d) * ts;
      }
      for (int i = 0; i < g; ++i) {
        float* st = partial(pair, split, i);
        float mx = st[0];
        for (int j = 0; j < m; ++j) mx = std::max(mx, scores[i * kTile + j]);
        const float corr = std::exp(st[0] - mx);
        st[0] = mx;
        st[1] *= corr;
        for (int c = 0; c < d; ++c) st[2 + c] *= corr;
        for (int j = 0; j < m; ++j) {
          const float p = std::exp(scores[i * kTile + j] - mx);
          scores[i * kTile + j] = p;
          st[1] += p;
        }
      }
      run_end = -1;
      for (int j = 0; j < m; ++j) {
        const size_t at = slot_in_run(b, kvh, base + j, run_at, run_end);
        load_row(v_.data(), at, row);
        const float ts = s_.format == KvFormat::INT8 ? v_scale_[at] : 1.0f;
        for (int i = 0; i < g; ++i) {
          const float p = scores[i * kTile + j] * ts;
          float* acc = partial(pair, split, i) + 2;
          for (int c = 0; c < d; ++c) acc[c] += p * row[c];
        }
      }
    }
    if (v_head_scale != 1.0f)
      for (int i = 0; i < g; ++i) {
        float* acc = partial(pair, split, i) + 2;
        for (int c = 0; c < d; ++c) acc[c] *= v_head_scale;
      }
  }

  // ---- int4 / int2 (KIVI), contiguous: the buffers of decode_problem.h ----

  size_t kivi_row() const { return static_cast<size_t>(kivi_row_bytes(s_.head_dim, kivi_bits(s_.format))); }
  size_t kivi_groups() const { return static_cast<size_t>((s_.context + s_.kivi_group - 1) / s_.kivi_group); }

  void allocate_kivi() {
    const size_t pairs = static_cast<size_t>(s_.batch) * s_.kv_heads, d = static_cast<size_t>(s_.head_dim);
    const size_t ctx = static_cast<size_t>(s_.context), G = static_cast<size_t>(s_.kivi_group);
    kc_.allocate(pairs * ctx * kivi_row(), "K codes");
    vc_.allocate(kc_.size(), "V codes");
    kp_.allocate(pairs * kivi_groups() * d * 2, "K (scale, zero) per group and channel");
    vp_.allocate(pairs * ctx * (d / G) * 2, "V (scale, zero) per token and channel group");
    kr_.allocate(pairs * G * d, "K residual (bf16)");
    vr_.allocate(kr_.size(), "V residual (bf16)");
  }

  void store_kivi(int b, int kvh, const StoredHead& h) {
    const size_t pair = static_cast<size_t>(b) * s_.kv_heads + kvh, d = static_cast<size_t>(s_.head_dim);
    const size_t nq = static_cast<size_t>(s_.quantized_length(b)), n = static_cast<size_t>(s_.length(b));
    const size_t row = kivi_row(), ctx = static_cast<size_t>(s_.context), G = static_cast<size_t>(s_.kivi_group);
    std::memcpy(kc_.data() + pair * ctx * row, h.k.data(), nq * row);
    std::memcpy(vc_.data() + pair * ctx * row, h.v.data(), nq * row);
    std::memcpy(kr_.data() + pair * G * d, h.k.data() + nq * row, (n - nq) * d * 2);
    std::memcpy(vr_.data() + pair * G * d, h.v.data() + nq * row, (n - nq) * d * 2);
    uint16_t* kp = kp_.data() + pair * kivi_groups() * d * 2;
    uint16_t* vp = vp_.data() + pair * ctx * (d / G) * 2;
    for (size_t i = 0; i < h.k_scale.size(); ++i) kp[i] = float_to_fp16_bits(h.k_scale[i]);
    for (size_t i = 0; i < h.v_scale.size(); ++i) vp[i] = float_to_fp16_bits(h.v_scale[i]);
  }

  StoredHead fetch_kivi(int b, int kvh) const {
    const size_t pair = static_cast<size_t>(b) * s_.kv_heads + kvh, d = static_cast<size_t>(s_.head_dim);
    const size_t nq = static_cast<size_t>(s_.quantized_length(b)), n = static_cast<size_t>(s_.length(b));
    const size_t row = kivi_row(), ctx = static_cast<size_t>(s_.context), G = static_cast<size_t>(s_.kivi_group);
    StoredHead h;
    h.k.resize(nq * row + (n - nq) * d * 2);
    h.v.resize(h.k.size());
    std::memcpy(h.k.data(), kc_.data() + pair * ctx * row, nq * row);
    std::memcpy(h.v.data(), vc_.data() + pair * ctx * row, nq * row);
    std::memcpy(h.k.data() + nq * row, kr_.data() + pair * G * d, (n - nq) * d * 2);
    std::memcpy(h.v.data() + nq * row, vr_.data() + pair * G * d, (n - nq) * d * 2);
    const uint16_t* kp = kp_.data() + pair * kivi_groups() * d * 2;
    const uint16_t* vp = vp_.data() + pair * ctx * (d / G) * 2;
    for (size_t i = 0; i < nq / G * d * 2; ++i) h.k_scale.push_back(fp16_bits_to_float(kp[i]));
    for (size_t i = 0; i < nq * (d / G) * 2; ++i) h.v_scale.push_back(fp16_bits_to_float(vp[i]));
    return h;
  }

  // Packed B-bit codes of a row -> floats (channel c in bits (c mod 8/B)·B of byte c / (8/B)).
  template <int B>
  static void unpack_codes(const uint8_t* src, int d, float* dst) {
    constexpr int kPer = 8 / B;
    constexpr uint32_t kMask = (1u << B) - 1;
    for (int i = 0; i < d / kPer; ++i)
      for (int j = 0; j < kPer; ++j) dst[kPer * i + j] = static_cast<float>((static_cast<uint32_t>(src[i]) >> (j * B)) & kMask);
  }

  // split_task for KIVI (B-bit codes): key groups [g0, g1) of the split, one at a time (the last one of a
  // sequence may be its bf16 residual). Dequantization is folded into the arithmetic: a full
  // group's per-channel K scales go into the queries (qk = q·scale) and its zeros into one
  // constant per query head (Σ q·zero), so a score is that constant + qk · codes; a value row adds
  // p·scale_g · codes to the output and p·zero_g to its channel group's sum, added once per group.
  template <int B>
  void kivi_split_task(size_t pair, int split, float* ws) {
    const int b = static_cast<int>(pair / s_.kv_heads), kvh = static_cast<int>(pair % s_.kv_heads);
    const int d = s_.head_dim, g = s_.group(), n = s_.length(b), nq = s_.quantized_length(b), G = s_.kivi_group;
    const int groups = (n + G - 1) / G, per = (groups + splits_ - 1) / splits_;
    const int g0 = std::min(groups, split * per), g1 = std::min(groups, g0 + per);
    const size_t row_bytes = kivi_row(), ctx = static_cast<size_t>(s_.context);
    const uint8_t* kc = kc_.data() + pair * ctx * row_bytes;
    const uint8_t* vc = vc_.data() + pair * ctx * row_bytes;
    const uint16_t* kp = kp_.data() + pair * kivi_groups() * static_cast<size_t>(d) * 2;
    const uint16_t* vp = vp_.data() + pair * ctx * static_cast<size_t>(d / G) * 2;
    const uint16_t* kr = kr_.data() + pair * static_cast<size_t>(G) * d;
    const uint16_t* vr = vr_.data() + pair * static_cast<size_t>(G) * d;
    float* scores = ws;                                // [g][G]
    float* qs_rows = ws + static_cast<size_t>(g) * G;  // [g][d]
    float* row = qs_rows + static_cast<size_t>(g) * d;
    float* qk = row + d;                          // [g][d] queries × the group's K scales
    float* qz = qk + static_cast<size_t>(g) * d;  // [g]: Σ q·zero of the group
    float* zsum = qz + g;                         // [g][d / G]: Σ p·zero of the group's values
    const float qs = static_cast<float>(s_.scale());
    for (int i = 0; i < g; ++i) {
      const float* q = q_.data() + (static_cast<size_t>(b) * s_.heads + static_cast<size_t>(kvh * g + i)) * d;
      for (int c = 0; c < d; ++c) qs_rows[static_cast<size_t>(i) * d + c] = q[c] * qs;
      float* st = partial(pair, split, i);
      st[0] = -INFINITY;
      st[1] = 0;
      std::fill(st + 2, st + 2 + d, 0.0f);
    }
    auto bf16_row = [&](const uint16_t* src) {
      for (int c = 0; c < d; ++c) row[c] = bits_float(static_cast<uint32_t>(src[c]) << 16);
    };
    for (int j = g0; j < g1; ++j) {
      const int t0 = j * G, m = std::min(G, n - t0);
      const bool full = t0 < nq;
      if (full) {
        const uint16_t* p = kp + static_cast<size_t>(j) * d * 2;
        for (int i = 0; i < g; ++i) {
          const float* q = qs_rows + static_cast<size_t>(i) * d;
          float z = 0;
          for (int c = 0; c < d; ++c) {
            qk[static_cast<size_t>(i) * d + c] = q[c] * fp16_bits_to_float(p[2 * c]);
            z += q[c] * fp16_bits_to_float(p[2 * c + 1]);
          }
          qz[i] = z;
        }
      }
      for (int u = 0; u < m; ++u) {
        const int t = t0 + u;
        if (full) {
          unpack_codes<B>(kc + static_cast<size_t>(t) * row_bytes, d, row);
          for (int i = 0; i < g; ++i) scores[i * G + u] = qz[i] + dot(qk + static_cast<size_t>(i) * d, row, d);
        } else {
          bf16_row(kr + static_cast<size_t>(u) * d);
          for (int i = 0; i < g; ++i) scores[i * G + u] = dot(qs_rows + static_cast<size_t>(i) * d, row, d);
        }
      }
      for (int i = 0; i < g; ++i) {
        float* st = partial(pair, split, i);
        float mx = st[0];
        for (int u = 0; u < m; ++u) mx = std::max(mx, scores[i * G + u]);
        const float corr = std::exp(st[0] - mx);
        st[0] = mx;
        st[1] *= corr;
        for (int c = 0; c < d; ++c) st[2 + c] *= corr;
        for (int u = 0; u < m; ++u) {
          const float e = std::exp(scores[i * G + u] - mx);
          scores[i * G + u] = e;
          st[1] += e;
        }
      }
      const int vg = d / G;
      if (full) std::fill(zsum, zsum + static_cast<size_t>(g) * vg, 0.0f);
      for (int u = 0; u < m; ++u) {
        const int t = t0 + u;
        if (full) {
          unpack_codes<B>(vc + static_cast<size_t>(t) * row_bytes, d, row);
          const uint16_t* p = vp + static_cast<size_t>(t) * vg * 2;
          for (int cg = 0; cg < vg; ++cg) {
            const float sc = fp16_bits_to_float(p[2 * cg]), z = fp16_bits_to_float(p[2 * cg + 1]);
            for (int i = 0; i < g; ++i) {
              const float pr = scores[i * G + u];
              float* acc = partial(pair, split, i) + 2 + cg * G;
              const float w = pr * sc;
              const float* codes = row + cg * G;
              for (int c = 0; c < G; ++c) acc[c] += w * codes[c];
              zsum[i * vg + cg] += pr * z;
            }
          }
        } else {
          bf16_row(vr + static_cast<size_t>(u) * d);
          for (int i = 0; i < g; ++i) {
            const float pr = scores[i * G + u];
            float* acc = partial(pair, split, i) + 2;
            for (int c = 0; c < d; ++c) acc[c] += pr * row[c];
          }
        }
      }
      if (full)
        for (int i = 0; i < g; ++i) {
          float* acc = partial(pair, split, i) + 2;
          for (int c = 0; c < d; ++c) acc[c] += zsum[i * vg + c / G];
        }
    }
  }

  // A paged cache's blocks are scattered 4 KB runs (16 tokens of a head): too short for the
  // hardware prefetchers to follow, so the next tile's K and V rows are requested ahead.
  void prefetch_tile(int b, int kvh, int t0, int n) const {
    const size_t row = static_cast<size_t>(s_.head_dim) * elem_;
    for (int t = 0; t < n; ++t) {
      const size_t at = slot(b, kvh, t0 + t) * row;
      for (size_t off = 0; off < row; off += 64) {
        __builtin_prefetch(k_.data() + at + off);
        __builtin_prefetch(v_.data() + at + off);
      }
    }
  }

  // Log-sum-exp merge of the splits into out.
  void merge() {
    const int d = s_.head_dim, g = s_.group();
    const size_t pairs = static_cast<size_t>(s_.batch) * s_.kv_heads;
    for (size_t pair = 0; pair < pairs; ++pair) {
      const int b = static_cast<int>(pair / s_.kv_heads), kvh = static_cast<int>(pair % s_.kv_heads);
      for (int i = 0; i < g; ++i) {
        float mx = -INFINITY;
        for (int sp = 0; sp < splits_; ++sp) mx = std::max(mx, partial(pair, sp, i)[0]);
        float* o = out_.data() + (static_cast<size_t>(b) * s_.heads + static_cast<size_t>(kvh * g + i)) * d;
        std::fill(o, o + d, 0.0f);
        float l = 0;
        if (mx == -INFINITY) continue;  // an empty sequence attends to nothing: zeros
        for (int sp = 0; sp < splits_; ++sp) {
          const float* st = partial(pair, sp, i);
          if (st[0] == -INFINITY) continue;
          const float w = std::exp(st[0] - mx);
          l += st[1] * w;
          for (int c = 0; c < d; ++c) o[c] += st[2 + c] * w;
        }
        for (int c = 0; c < d; ++c) o[c] /= l;
      }
    }
  }

  DecodeShape s_;
  DecodeInputs in_;
  uint64_t seed_ = 0;
  size_t elem_ = 2;
  BlockTables tables_;
  HostBuffer<uint8_t> k_, v_;
  HostBuffer<float> k_scale_, v_scale_, q_, out_, partial_;
  HostBuffer<uint8_t> kc_, vc_;             // KIVI codes
  HostBuffer<uint16_t> kp_, vp_, kr_, vr_;  // KIVI (scale, zero) fp16 pairs; bf16 residuals
  int splits_ = 1;
  DecodeCheck check_;
};

// kv-quant: the format is the variant; block_size (0 = contiguous) comes from the point.
template <KvFormat F>
class CpuQuantDecode final : public CpuKvDecode {
  DecodeShape shape_of(const Point& p) const override { return decode_shape(kv_quant_keys().read(p), F); }
};

// kv-paged: the format is kv_dtype; the variant is the layout.
class CpuContiguousDecode final : public CpuKvDecode {
  DecodeShape shape_of(const Point& p) const override {
    const KvDecodeKeys k = kv_paged_keys().read(p);
    DecodeShape s = decode_shape(k, k.kv_dtype);
    s.block_size = 0;
    return s;
  }
};

class CpuPagedDecode final : public CpuKvDecode {
  DecodeShape shape_of(const Point& p) const override {
    const KvDecodeKeys k = kv_paged_keys().read(p);
    return decode_shape(k, k.kv_dtype);
  }
};

const VariantRegistration reg_kv_quant_cpu_bf16("kv-quant",
                                                {"cpu_bf16", Backend::Cpu,
                                                 "bf16 cache on the CPU: the baseline (threads over sequence × kv head × split)",
                                                 quant_variant_keys(false, KvFormat::BF16)},
                                                make_variant<CpuQuantDecode<KvFormat::BF16>>());
const VariantRegistration reg_kv_quant_cpu_fp8("kv-quant",
                                               {"cpu_fp8", Backend::Cpu, "FP8 e4m3 cache on the CPU (per-head scales)",
                                                quant_variant_keys(false, KvFormat::FP8)},
                                               make_variant<CpuQuantDecode<KvFormat::FP8>>());
const VariantRegistration reg_kv_quant_cpu_int8("kv-quant",
                                                {"cpu_int8", Backend::Cpu, "INT8 cache on the CPU (per-token scales)",
                                                 quant_variant_keys(false, KvFormat::INT8)},
                                                make_variant<CpuQuantDecode<KvFormat::INT8>>());
const VariantRegistration reg_kv_quant_cpu_int4(
    "kv-quant",
    {"cpu_int4", Backend::Cpu, "int4 KIVI cache on the CPU (keys per channel, values per token, bf16 residual; contiguous only)",
     quant_variant_keys(false, KvFormat::INT4)},
    make_variant<CpuQuantDecode<KvFormat::INT4>>());
const VariantRegistration reg_kv_quant_cpu_int2("kv-quant",
                                                {"cpu_int2", Backend::Cpu,
                                                 "int2 KIVI cache on the CPU (2-bit codes, 4 per byte; otherwise as cpu_int4)",
                                                 quant_variant_keys(false, KvFormat::INT2)},
                                                make_variant<CpuQuantDecode<KvFormat::INT2>>());
// kv-paged: the format is kv_dtype; the variant is the layout.
const VariantRegistration reg_kv_paged_cpu_contiguous("kv-paged",
                                                      {"cpu_contiguous",
                                                       Backend::Cpu,
                                                       "contiguous cache on the CPU: the baseline",
                                                       {"batch", "heads", "kv_heads", "head_dim", "context", "ragged",
                                                        "kv_dtype"}},
                                                      make_variant<CpuContiguousDecode>());
const VariantRegistration reg_kv_paged_cpu_paged("kv-paged",
                                                 {"cpu_paged",
                                                  Backend::Cpu,
                                                  "paged cache on the CPU",
                                                  {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "block_size",
                                                   "kv_dtype"}},
                                                 make_variant<CpuPagedDecode>());

}  // namespace
}  // namespace ib::kvcache
