// The CPU engine's attention arithmetic: a query's scores q·k, softmax, and the weighted sum of
// values, in one fixed order per query, so a token's attention output does not depend on which
// other rows share its pass (decode steps, verify passes, prefill chunks of any length agree bit
// for bit).
//
// The order is the per-key loop's: each score a dot product in two 8-lane fused multiply-add
// chains (elements e ≡ 0..7 and 8..15 mod 16), the chains' lanes added, then summed as
// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), the last d mod 8 elements added one by one; each output
// element Σ_j w_j·v_j[e] from zero in key order, a multiply then an add (not fused). The
// softmax's exponential is exp_fixed (numerics/vector_exp.h), whose bits do not depend on width.
//
// Why a kernel for many queries: one query's per-key loop spends most of its time reducing a dot
// product's lanes and re-reading its output row; for a prefill chunk or a verify pass over a long
// cached prefix it was most of the step. Here, with AVX-512, sixteen keys' dot products are
// reduced together by a shuffle tree that pairs the lanes exactly as the loop does, a block of
// keys is read once from L1 for every query of a kv head, and the output row stays in registers.
#pragma once

#include "numerics/packed_gemv.h"  // CpuIsa

namespace ib {

// One query of a kv head: attends to keys [first, last] (inclusive) of the key/value rows given to
// attend_queries; its d outputs go to `out`.
struct AttentionQuery {
  const float* q = nullptr;
  float* out = nullptr;
  int first = 0, last = -1;
};

// out = softmax(scale · q·Kᵀ) · V for each query, keys[j] and values[j] the rows of position j
// (d floats each). Every level of `isa` gives the per-key loop's bits at that level's dot product
// (Avx512 and Avx2: the AVX2 dot product's order; Generic: element order). A query with no keys
// (last < first) gets zeros.
void attend_queries(const AttentionQuery* queries, int m, const float* const* keys, const float* const* values, int d,
                    float scale, CpuIsa isa = best_cpu_isa());

// The per-key loop's pieces, for the engine's paths that attend key by key (evicted keys, tree
// passes, recorded weights): a score's dot product, the softmax of n scores in place (max,
// exp_fixed of each minus it, their sum in key order, each divided by it; a score of -inf gets
// weight 0) and o += w·v, in the order above at `isa`.
void attention_softmax(float* s, int n, CpuIsa isa = best_cpu_isa());
float attention_dot(const float* q, const float* k, int d, CpuIsa isa = best_cpu_isa());
void attention_axpy(float w, const float* v, float* o, int d, CpuIsa isa = best_cpu_isa());

}  // namespace ib
