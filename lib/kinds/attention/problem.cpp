#include "kinds/attention/problem.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ib::attention {

int AttentionShape::visible_keys(int i) const {
  if (!causal) return seq_k;
  const int64_t last = int64_t{i} + seq_k - seq_q;  // last visible key
  return static_cast<int>(std::clamp<int64_t>(last + 1, 0, seq_k));
}

int AttentionShape::first_key(int i) const {
  if (!causal || window <= 0) return 0;
  return std::max(0, visible_keys(i) - window);
}

double AttentionShape::visible_pairs() const {
  if (!causal) return static_cast<double>(seq_q) * seq_k;
  double pairs = 0;
  for (int i = 0; i < seq_q; ++i) pairs += std::max(0, visible_keys(i) - first_key(i));
  return pairs;
}

double AttentionShape::flops() const { return 4.0 * head_dim * visible_pairs() * heads * batch; }

double AttentionShape::io_bytes() const {
  return static_cast<double>(2 * q_elems() + 2 * kv_elems()) * static_cast<double>(dtype_size(dtype));
}

double AttentionShape::scale() const { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

std::string AttentionShape::label() const {
  return fmt::format("batch {} × {} heads ({} kv) × d {}, seq {}×{}{}{}, {}", batch, heads, kv_heads, head_dim, seq_q, seq_k,
                     causal ? " causal" : "", causal && window > 0 ? fmt::format(" window {}", window) : "", to_string(dtype));
}

AttentionShape attention_shape(const AttentionKeys& p) {
  AttentionShape s;
  s.batch = p.batch;
  s.heads = p.heads;
  s.kv_heads = p.kv_heads == 0 ? s.heads : p.kv_heads;
  s.head_dim = p.head_dim;
  s.seq_k = p.seq;
  s.seq_q = p.seq_q == 0 ? s.seq_k : p.seq_q;
  s.causal = p.causal;
  s.window = p.window;
  s.dtype = p.dtype;
  return s;
}

AttentionShape attention_shape(const Point& p) { return attention_shape(attention_keys().read(p)); }

std::string shape_problem(const AttentionShape& s) {
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0)
    return fmt::format("heads ({}) must be a multiple of kv_heads ({})", s.heads, s.kv_heads);
  if (s.window > 0 && !s.causal) return "a sliding window needs causal: true";
  return {};
}

void reference_row(const AttentionShape& s, const AttentionInputs& in, int b, int h, int i, double* out) {
  const int d = s.head_dim, n = s.visible_keys(i);
  const int kvh = h / s.group();
  const int64_t q0 = ((int64_t{b} * s.heads + h) * s.seq_q + i) * d;
  const int64_t k0 = (int64_t{b} * s.kv_heads + kvh) * s.seq_k * d;
  std::fill(out, out + d, 0.0);
  if (n == 0) return;
  std::vector<double> q(static_cast<size_t>(d)), score(static_cast<size_t>(n));
  for (int c = 0; c < d; ++c) q[static_cast<size_t>(c)] = in.q(q0 + c);
  const int first = s.first_key(i);
  double m = -INFINITY;
  for (int j = first; j < n; ++j) {
    double acc = 0;
    for (int c = 0; c < d; ++c) acc += q[static_cast<size_t>(c)] * in.k(k0 + int64_t{j} * d + c);
    score[static_cast<size_t>(j)] = acc * s.scale();
    m = std::max(m, score[static_cast<size_t>(j)]);
  }
  double l = 0;
  for (int j = first; j < n; ++j) {
    const double p = std::exp(score[static_cast<size_t>(j)] - m);
    l += p;
    for (int c = 0; c < d; ++c) out[c] += p * in.v(k0 + int64_t{j} * d + c);
  }
  for (int c = 0; c < d; ++c) out[c] /= l;
}

double output_tolerance(DType dtype) { return dtype == DType::F32 ? 1e-4 : 1e-2; }

Validation check_output(const AttentionShape& s, const AttentionInputs& in, uint64_t seed,
                        const std::function<float(int64_t row, int col)>& out, double tolerance) {
  const int64_t rows = s.rows();
  const int d = s.head_dim;
  // Poisoned (unwritten) or NaN elements anywhere.
  int64_t bad = 0, first_bad = -1;
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < d; ++c)
      if (!std::isfinite(out(r, c))) {
        if (bad++ == 0) first_bad = r;
        break;
      }
  if (bad > 0)
    return {false, "nan_rows", static_cast<double>(bad), 0,
            fmt::format("{} of {} rows hold NaN/inf or were not written (first: row {})", bad, rows, first_bad)};

  std::vector<int64_t> picked;
  const double work = static_cast<double>(rows) * s.seq_k * d;
  if (work <= 4e7) {
    for (int64_t r = 0; r < rows; ++r) picked.push_back(r);
  } else {
    picked = {0, rows - 1};
    for (uint64_t t = 0; picked.size() < 64; ++t)
      picked.push_back(static_cast<int64_t>(random_bits(seed ^ 0xA77E, t) % static_cast<uint64_t>(rows)));
  }
  double err2 = 0, ref2 = 0, max_err = 0;
  std::vector<double> ref(static_cast<size_t>(d));
  for (int64_t r : picked) {
    const int i = static_cast<int>(r % s.seq_q);
    const int64_t bh = r / s.seq_q;
    reference_row(s, in, static_cast<int>(bh / s.heads), static_cast<int>(bh % s.heads), i, ref.data());
    for (int c = 0; c < d; ++c) {
      const double e = static_cast<double>(out(r, c)) - ref[static_cast<size_t>(c)];
      err2 += e * e;
      ref2 += ref[static_cast<size_t>(c)] * ref[static_cast<size_t>(c)];
      max_err = std::max(max_err, std::fabs(e));
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return {rel <= tolerance, "rel_l2", rel, tolerance,
          fmt::format("{} of {} rows vs float64, max abs error {:.2e}", picked.size(), rows, max_err)};
}

}  // namespace ib::attention
