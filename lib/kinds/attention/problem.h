// Attention problems shared by every variant: the shape read from a sweep point, the inputs
// (counter-based random, so a reference regenerates them), the float64 reference and the
// correctness gate. Tensors are [batch][heads][seq][head_dim]; with grouped-query attention
// query head h reads kv head h / (heads / kv_heads). Causal masking is aligned bottom-right as in
// FlashAttention-2: query i sees key j iff j <= i + seq_k - seq_q.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/sweep.h"
#include "core/variant.h"
#include "kinds/attention/attention_keys.h"
#include "numerics/dtype.h"
#include "numerics/random.h"

namespace ib::attention {

struct AttentionShape {
  int batch = 1, heads = 32, kv_heads = 32, head_dim = 128, seq_q = 2048, seq_k = 2048;
  bool causal = true;
  int window = 0;  // causal only: a sliding window of this many keys (0: none)
  DType dtype = DType::BF16;

  int group() const { return heads / kv_heads; }
  int64_t q_elems() const { return int64_t{batch} * heads * seq_q * head_dim; }      // also O
  int64_t kv_elems() const { return int64_t{batch} * kv_heads * seq_k * head_dim; }  // each of K, V
  int64_t rows() const { return int64_t{batch} * heads * seq_q; }
  // Keys query i sees: first_key(i) .. visible_keys(i) − 1 (the end is at most seq_k; with a
  // sliding window the first is end − window when positive, else 0).
  int visible_keys(int i) const;
  int first_key(int i) const;
  // Σ over queries of visible keys, per (batch, head).
  double visible_pairs() const;
  // 4·d FLOP per visible (query, key) pair (two GEMMs) over every batch and head: the usual
  // count "4·n_q·n_k·d·heads·batch, halved when causal" up to the n/2 pairs of the diagonal.
  double flops() const;
  // Q, K, V read and O written once, in the element type: the traffic of a fused kernel.
  double io_bytes() const;
  double scale() const;
  std::string label() const;
};

// The shape of a point's parameters (attention_keys.h): kv_heads 0 = heads, seq_q 0 = seq.
AttentionShape attention_shape(const Point& p);
AttentionShape attention_shape(const AttentionKeys& p);
// Why the shape is not an attention problem ("" when it is): heads not a multiple of kv_heads...
std::string shape_problem(const AttentionShape& s);

// Inputs of a point: element i of Q, K, V is round(dtype, scale · random_uniform(seed + t, i)).
// Q is drawn wider than K so that softmax rows are peaked, not flat (a flat softmax would hide
// a wrong maximum or a missing rescale).
struct AttentionInputs {
  uint64_t seed = 0;
  DType dtype = DType::BF16;
  static constexpr float kQScale = 2.0f, kKScale = 1.0f, kVScale = 1.0f;
  float q(int64_t i) const { return round_to(dtype, kQScale * random_uniform(seed, static_cast<uint64_t>(i))); }
  float k(int64_t i) const { return round_to(dtype, kKScale * random_uniform(seed + 1, static_cast<uint64_t>(i))); }
  float v(int64_t i) const { return round_to(dtype, kVScale * random_uniform(seed + 2, static_cast<uint64_t>(i))); }
};

// Float64 attention of one query row (b, h, i) into out[head_dim] (zeros when no key is visible).
void reference_row(const AttentionShape& s, const AttentionInputs& in, int b, int h, int i, double* out);

// The correctness gate of every variant: no NaN anywhere in the output (the output is poisoned
// with NaN before the checked run, so an unwritten element shows), and relative L2 error against
// the float64 reference over every row when the problem is small, else over 64 sampled rows
// (the first, the last and random ones). `out(r, c)` reads element c of row r = (b·heads + h)·seq_q + i.
Validation check_output(const AttentionShape& s, const AttentionInputs& in, uint64_t seed,
                        const std::function<float(int64_t row, int col)>& out, double tolerance);

// Relative L2 tolerance of an output in `dtype` (bf16/fp16 outputs: 1e-2; fp32: 1e-4).
double output_tolerance(DType dtype);

// The chapter's first table: elements of one layer-head's n×n score matrix.
inline double score_matrix_elems(int64_t n) { return static_cast<double>(n) * static_cast<double>(n); }

}  // namespace ib::attention
