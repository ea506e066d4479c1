// FlashAttention-1, kept faithful to the paper's loop order so that its HBM traffic for the
// running output is visible: the structural baseline of flash2 (attention_flash2.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention.h"
#include "element.cuh"
#include "flash_common.cuh"
#include "numerics/cuda_check.h"
#include "numerics/online_softmax.h"

namespace ib {

namespace {

// =====================================================================================
// FlashAttention-1
// =====================================================================================
//
// v1: Algorithm 1 of the FlashAttention paper, one block of 256 threads per (batch, head).
// The outer loop walks K/V tiles of kF1Bc keys (loaded once into shared memory), the inner loop
// walks Q tiles of kF1Br rows; for each pair the block re-reads the running output O_i (fp32),
// row max m_i and row sum l_i from the HBM workspace, merges the tile's softmax summary into
// them with softmax_merge and writes them back. That round trip per (K/V tile, Q tile) is the
// point of the kernel: it is what FlashAttention-2 removes by swapping the loops. The output is
// kept unnormalised (O = Σ exp(s − m)·v) and divided by l once at the end, after a block
// barrier, so no second kernel is needed. Math is plain fp32 FMA on shared memory (no tensor
// cores): this kernel is the structural baseline, correctness first.
//
// Shared memory (floats): Q tile [Br][D+1], K tile [Bc][D+1] (the +1 pad makes the column
// walks of S = Q·Kᵀ conflict-free), V tile [Bc][D], S/P tile [Br][Bc+1], two per-row factors.
constexpr int kF1Threads = 256;
constexpr int kF1Br = 64;
constexpr int kF1Bc = 64;

template <int D>
constexpr size_t flash1_smem_floats() {
  return size_t{kF1Br} * (D + 1) + size_t{kF1Bc} * (D + 1) + size_t{kF1Bc} * D + size_t{kF1Br} * (kF1Bc + 1) + 2 * kF1Br;
}

struct Flash1Args {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* o_acc;    // [batch·heads][seq_q][D]
  float* row_max;  // [batch·heads][seq_q]
  float* row_sum;  // [batch·heads][seq_q]
  int heads, group, seq_q, seq_k;
  float scale;
  bool causal;
};

template <class T, int D>
__global__ void __launch_bounds__(kF1Threads) flash1_kernel(const Flash1Args a) {
  static_assert(kF1Threads == 256 && kF1Br == 64 && kF1Bc == 64, "the thread mappings below assume 256 threads, 64×64 tiles");
  static_assert(D % 16 == 0, "D is a multiple of 16");
  extern __shared__ float4 f1_smem4[];
  float* const sQ = reinterpret_cast<float*>(f1_smem4);  // [Br][D+1]
  float* const sK = sQ + kF1Br * (D + 1);                // [Bc][D+1]
  float* const sV = sK + kF1Bc * (D + 1);                // [Bc][D]
  float* const sS = sV + kF1Bc * D;                      // [Br][Bc+1]: scores, then probabilities
  float* const sScaleO = sS + kF1Br * (kF1Bc + 1);       // [Br] factor on the old O_i
  float* const sScaleP = sScaleO + kF1Br;                // [Br] factor on this tile's P̃·V

  const int tid = threadIdx.x;
  const int64_t bh = blockIdx.x;  // b·heads + h
  const int h = static_cast<int>(bh % a.heads);
  const int64_t b = bh / a.heads;
  const int64_t kvh = b * (a.heads / a.group) + h / a.group;  // (b, kv head) index
  const int seq_q = a.seq_q, seq_k = a.seq_k;
  const int shift = seq_k - seq_q;  // query i sees keys j <= i + shift when causal
  const T* q = static_cast<const T*>(a.q) + bh * seq_q * D;
  const T* k = static_cast<const T*>(a.k) + kvh * seq_k * D;
  const T* v = static_cast<const T*>(a.v) + kvh * seq_k * D;
  T* o = static_cast<T*>(a.o) + bh * seq_q * D;
  float* O = a.o_acc + bh * seq_q * D;
  float* M = a.row_max + bh * seq_q;
  float* L = a.row_sum + bh * seq_q;

  // The workspace arrives uninitialised: every (m, l, O) starts as the empty summary.
  for (int64_t i = tid; i < int64_t{seq_q} * D; i += kF1Threads) O[i] = 0.0f;
  for (int i = tid; i < seq_q; i += kF1Threads) {
    M[i] = -INFINITY;
    L[i] = 0.0f;
  }
  __syncthreads();  // also orders these global writes before the other threads' reads below

  // S and O mappings: thread (tr, tc) owns rows 4·tr..4·tr+3 of the Q tile and columns tc + 16·j.
  const int tr = tid >> 4, tc = tid & 15;
  // Every K/V tile is visited: with the bottom-right causal alignment the last query row sees
  // every key (seq_q − 1 + shift = seq_k − 1); the Q tiles a K/V tile cannot reach are skipped.
  for (int n0 = 0; n0 < seq_k; n0 += kF1Bc) {
    // Load K_j and V_j (fp32), zero past seq_k.
    for (int i = tid; i < kF1Bc * D; i += kF1Threads) {
      const int r = i / D, d = i % D;
      const bool ok = n0 + r < seq_k;
      sK[r * (D + 1) + d] = ok ? to_float(k[int64_t{n0 + r} * D + d]) : 0.0f;
      sV[r * D + d] = ok ? to_float(v[int64_t{n0 + r} * D + d]) : 0.0f;
    }
    __syncthreads();

    for (int q0 = 0; q0 < seq_q; q0 += kF1Br) {
      // Causal: the tile's last valid row sees keys up to last_row + shift; a K/V tile starting
      // after that is fully masked for this Q tile (uniform over the block).
      const int last_row = min(q0 + kF1Br, seq_q) - 1;
      if (a.causal && n0 > last_row + shift) continue;

      for (int i = tid; i < kF1Br * D; i += kF1Threads) {
        const int r = i / D, d = i % D;
        sQ[r * (D + 1) + d] = q0 + r < seq_q ? to_float(q[int64_t{q0 + r} * D + d]) : 0.0f;
      }
      __syncthreads();

      // S = scale·Q_i·K_jᵀ, -inf where the key is past seq_k or causally masked.
      {
        float acc[4][4] = {};
        for (int d = 0; d < D; ++d) {
          float qv[4], kv[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) qv[i] = sQ[(4 * tr + i) * (D + 1) + d];
#pragma unroll
          for (int j = 0; j < 4; ++j) kv[j] = sK[(tc + 16 * j) * (D + 1) + d];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(qv[i], kv[j], acc[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = 4 * tr + i;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int c = tc + 16 * j, key = n0 + c;
            const bool masked = key >= seq_k || (a.causal && key > q0 + r + shift);
            sS[r * (kF1Bc + 1) + c] = masked ? -INFINITY : acc[i][j] * a.scale;
          }
        }
      }
      __syncthreads();

      // One thread per row: the tile's summary (m̃, l̃), P̃ = exp(S − m̃) in place, and the merge
      // with the running (m_i, l_i) read from and written back to HBM.
      if (tid < kF1Br) {
        const int r = tid, row = q0 + r;
        float* srow = sS + r * (kF1Bc + 1);
        const SoftmaxSummary<float> tile = softmax_summarize(srow, kF1Bc);
        for (int c = 0; c < kF1Bc; ++c)
          srow[c] = tile.max == -INFINITY ? 0.0f : softmax_exp(srow[c] - tile.max);  // a fully masked row has no P̃
        float sa = 0.0f, sb = 0.0f;
        if (row < seq_q) {
          const SoftmaxSummary<float> merged = softmax_merge(SoftmaxSummary<float>{M[row], L[row]}, tile, &sa, &sb);
          M[row] = merged.max;
          L[row] = merged.sum;
        }
        sScaleO[r] = sa;
        sScaleP[r] = sb;
      }
      __syncthreads();

      // O_i = scale_a·O_i + scale_b·P̃·V_j, read from and written back to HBM.
      {
        float acc[4][D / 16] = {};
        for (int c = 0; c < kF1Bc; ++c) {
          float pv[4], vv[D / 16];
#pragma unroll
          for (int i = 0; i < 4; ++i) pv[i] = sS[(4 * tr + i) * (kF1Bc + 1) + c];
#pragma unroll
          for (int j = 0; j < D / 16; ++j) vv[j] = sV[c * D + tc + 16 * j];
#pragma unroll
          for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < D / 16; ++j) acc[i][j] = fmaf(pv[i], vv[j], acc[i][j]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = 4 * tr + i, row = q0 + r;
          if (row >= seq_q) continue;
          const float sa = sScaleO[r], sb = sScaleP[r];
#pragma unroll
          for (int j = 0; j < D / 16; ++j) {
            const int64_t idx = int64_t{row} * D + tc + 16 * j;
            O[idx] = sa * O[idx] + sb * acc[i][j];
          }
        }
      }
      __syncthreads();  // before the next Q tile overwrites sQ, sS and the factors
    }
    __syncthreads();  // before the next K/V tile overwrites sK, sV (also when every Q tile was skipped)
  }

  // Normalise: o = O / l, 0 for a row that saw no key (l == 0). The barrier above ordered every
  // thread's O, l writes before these reads.
  for (int64_t i = tid; i < int64_t{seq_q} * D; i += kF1Threads) {
    const float l = L[i / D];
    o[i] = from_float<T>(l > 0.0f ? O[i] / l : 0.0f);
  }
}

template <class T, int D>
void run_flash1(const AttentionParams& p, float* workspace, cudaStream_t stream) {
  Flash1Args a;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.o = p.o;
  const int64_t rows = int64_t{p.batch} * p.heads * p.seq_q;
  a.o_acc = workspace;
  a.row_max = workspace + rows * D;
  a.row_sum = a.row_max + rows;
  a.heads = p.heads;
  a.group = p.heads / p.kv_heads;
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.scale = p.scale;
  a.causal = p.causal;
  const size_t smem = flash1_smem_floats<D>() * sizeof(float);
  IB_CUDA_CHECK(cudaFuncSetAttribute(flash1_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  flash1_kernel<T, D><<<static_cast<unsigned>(int64_t{p.batch} * p.heads), kF1Threads, smem, stream>>>(a);
  IB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

std::string flash1_unsupported(const AttentionParams& p) {
  if (p.k_head_stride || p.v_head_stride || p.k_batch_stride || p.v_batch_stride)
    return "flash1 needs contiguous k and v (no strides)";
  if (p.window != 0) return "flash1 has no sliding window";
  return fused_shape_problem(p, "flash1");
}

size_t flash1_workspace_floats(const AttentionParams& p) {
  const size_t rows = static_cast<size_t>(p.batch) * static_cast<size_t>(p.heads) * static_cast<size_t>(p.seq_q);
  return rows * static_cast<size_t>(p.head_dim) + 2 * rows;  // o_accum, row_max, row_sum
}

void launch_flash1(const AttentionParams& p, float* workspace, cudaStream_t stream) {
  if (std::string why = flash1_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  if (p.head_dim == 64) {
    if (p.fp16)
      run_flash1<__half, 64>(p, workspace, stream);
    else
      run_flash1<__nv_bfloat16, 64>(p, workspace, stream);
  } else {
    if (p.fp16)
      run_flash1<__half, 128>(p, workspace, stream);
    else
      run_flash1<__nv_bfloat16, 128>(p, workspace, stream);
  }
}

}  // namespace ib
