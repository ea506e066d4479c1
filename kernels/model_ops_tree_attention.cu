// Attention of the rows of a token tree over their caches (tree verification, lib/model's
// prefill_tree): one block per (row, head), any context. Its own file: decode attention is split-K.
#include "model_ops.h"

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "model_ops_internal.cuh"
#include "numerics/cuda_check.h"

namespace ib {

using namespace detail;

namespace {

// ---- tree attention (tree verification) ----

constexpr int kTreeThreads = 128;
constexpr int kTreeTile = 256;  // keys whose scores are staged at once

// One block per (row, head), keys in tiles of kTreeTile with an online softmax: the row's query
// in shared memory, one warp per key for the tile's scores (lanes over head_dim), the tile's
// max and sum, then each thread rescales and extends its output elements (a warp reads a V
// row's consecutive elements). Fixed shared memory whatever the context.
__global__ void __launch_bounds__(kTreeThreads) tree_attention_kernel(TreeAttentionArgs a) {
  __shared__ float qs[256];
  __shared__ float red[32];
  __shared__ float score[kTreeTile];
  const int D = a.head_dim;
  const int r = blockIdx.x / a.heads, h = blockIdx.x % a.heads;
  const AttnRow row = a.rows[r];
  const int kvh = h / (a.heads / a.kv_heads);
  const size_t head_elems = static_cast<size_t>(row.capacity) * D;
  const uint16_t* kc = row.cache + (static_cast<size_t>(a.layer) * 2 * a.kv_heads + kvh) * head_elems;
  const uint16_t* vc = row.cache + (static_cast<size_t>(a.layer) * 2 * a.kv_heads + a.kv_heads + kvh) * head_elems;
  const int first = a.window > 0 ? max(0, row.pos + 1 - a.window) : 0;
  const int cached = max(0, a.base - first);
  const int a0 = a.anc_begin[r];
  const int n = cached + (a.anc_begin[r + 1] - a0);
  const uint16_t* q = a.q + static_cast<size_t>(r) * a.q_row_stride + static_cast<size_t>(h) * D;
  for (int d = threadIdx.x; d < D; d += kTreeThreads) qs[d] = bf2f(q[d]);
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float m_run = -FLT_MAX, l_run = 0.0f;
  float acc[2] = {0.0f, 0.0f};  // output elements threadIdx.x and threadIdx.x + 128 (D <= 256)
  for (int t0 = 0; t0 < n; t0 += kTreeTile) {
    const int nt = min(kTreeTile, n - t0);
    for (int j = warp; j < nt; j += kTreeThreads / 32) {
      const int jj = t0 + j;
      const int pos = jj < cached ? first + jj : a.anc[a0 + jj - cached];
      const uint16_t* k = kc + static_cast<size_t>(pos) * D;
      float dot = 0.0f;
      for (int d = lane; d < D; d += 32) dot += qs[d] * bf2f(k[d]);
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if (lane == 0) score[j] = dot * a.scale;
    }
    __syncthreads();
    // The tile's max (warp shuffles, then the 4 warps' maxima through `red`).
    float mt = -FLT_MAX;
    for (int j = threadIdx.x; j < nt; j += kTreeThreads) mt = fmaxf(mt, score[j]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
    if (lane == 0) red[warp] = mt;
    __syncthreads();
    mt = red[0];
    for (int w = 1; w < kTreeThreads / 32; ++w) mt = fmaxf(mt, red[w]);
    __syncthreads();  // red is reused by block_sum
    const float m_new = fmaxf(m_run, mt);
    const float correction = __expf(m_run - m_new);  // 0 on the first tile
    float part = 0.0f;
    for (int j = threadIdx.x; j < nt; j += kTreeThreads) {
      const float p = __expf(score[j] - m_new);
      score[j] = p;
      part += p;
    }
    l_run = l_run * correction + block_sum<kTreeThreads>(part, red);  // its barriers publish the p values
    for (int e = 0; e < 2; ++e) {
      const int d = threadIdx.x + e * kTreeThreads;
      if (d >= D) break;
      float sum = 0.0f;
      for (int j = 0; j < nt; ++j) {
        const int jj = t0 + j;
        const int pos = jj < cached ? first + jj : a.anc[a0 + jj - cached];
        sum += score[j] * bf2f(vc[static_cast<size_t>(pos) * D + d]);
      }
      acc[e] = acc[e] * correction + sum;
    }
    m_run = m_new;
    __syncthreads();  // every thread is done with this tile's scores
  }
  uint16_t* o = a.out + static_cast<size_t>(r) * a.heads * D + static_cast<size_t>(h) * D;
  for (int e = 0; e < 2; ++e) {
    const int d = threadIdx.x + e * kTreeThreads;
    if (d < D) o[d] = f2bf(acc[e] / l_run);
  }
}

}  // namespace

void launch_tree_attention(const TreeAttentionArgs& a, cudaStream_t stream) {
  if (a.n_rows <= 0) return;
  if (a.head_dim > 256 || a.heads % a.kv_heads != 0)
    throw std::invalid_argument("tree_attention: head_dim <= 256, heads a multiple of kv_heads");
  const int64_t blocks = static_cast<int64_t>(a.n_rows) * a.heads;
  if (blocks > 0x7fffffff) throw std::invalid_argument("tree_attention: too many rows");
  tree_attention_kernel<<<static_cast<unsigned>(blocks), kTreeThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
