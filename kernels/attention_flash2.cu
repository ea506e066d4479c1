// FlashAttention-2: tensor cores, Q in registers, K/V streamed through shared memory; and
// fused_attention_problem, the shape rules flash2 and flash3 share.
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
// FlashAttention-2
// =====================================================================================
//
// v1: FlashAttention-2's forward pass with mma.sync tensor cores (sm_80+).
//   - Grid (query tiles, heads, batch); blockIdx.x is the query tile, reversed when causal so
//     the longest tiles (the last rows see the most keys) start first and the short ones fill in
//     the tail. Consecutive blocks share a head, so its K/V stay hot in L2.
//   - 8 warps, Br = 128 query rows (16 per warp), Bc = 64 keys per tile. Each warp owns its 16
//     rows outright: Q as mma A-fragments in registers (loaded once through shared memory), the
//     output accumulator O (16 × D fp32) and the row max/sum in registers, so the only block-wide
//     sharing is the K/V tile. Br = 128 rather than 64 halves the K/V bytes per FLOP, both from
//     L2 (a 64-row version needs ~5 TB/s of L2 bandwidth at 330 TFLOP/s, d = 128) and written
//     into shared memory, whose bandwidth is the real limit of this design: with 16 rows per warp
//     every mma reads a 256-byte B fragment through ldmatrix, ~1.3× what the tensor cores of an
//     H100/H200 SM can consume at 128 B/clock. The price is one block per SM (~230 registers
//     per thread), so the block barrier keeps all 8 warps in step; hence the pipelining below.
//     kF2Warps = 4 (Br = 64, two independent blocks per SM) is the alternative to measure.
//   - K/V tiles stream through shared memory with 16-byte cp.async (zero-filled past seq_k),
//     two slots each, one block barrier per tile; see the pipeline comment in the kernel.
//   - K and V may be strided views (AttentionParams k/v head and batch strides): rows stay
//     contiguous within a head, only the head's base moves, so the transformer engine's prefill
//     reads its KV cache ([kv_heads][capacity][head_dim] per layer) in place.
//   - Software pipelining inside each warp: iteration j issues the mma for S_{j+1} = Q·K_{j+1}ᵀ
//     and the softmax of S_j in one basic block, so the tensor-core and ldmatrix work of one
//     hides the exponentials and shuffles of the other (there is no other block on the SM to
//     fill that gap). Costs a second 16×64 score tile in registers.
//   - Shared memory rows are D·2 bytes (8 or 16 chunks of 16 bytes); chunk c of row r lives at
//     chunk c ^ (r & 7). An ldmatrix phase reads one chunk column from 8 consecutive rows, which
//     the XOR spreads over the 8 distinct 16-byte bank groups (conflict-free), and a cp.async
//     phase writes 8 consecutive chunks of one row, which the XOR permutes within the row.
//   - S = Q·Kᵀ and O += P·V with mma.m16n8k16 (fp32 accumulate). P is the S accumulator converted
//     to bf16/fp16 pairs in place: the C layout of n8 tiles 2kk and 2kk+1 is exactly the A layout
//     of the k16 slice kk.
//   - Online softmax in registers, base 2: scores stay raw (unscaled) dot products, the max is
//     taken on raw scores (valid because scale > 0) and p = 2^(s·scale·log2e − m·scale·log2e) is
//     one FMA and one ex2.approx. The row max is reduced across the quad every tile (all four
//     lanes must agree on it); the row sum is kept per lane and reduced once at the end, since
//     rescaling by the max-change factor is linear. O is divided by l once, at the end. This is
//     softmax_merge (numerics/online_softmax.h) specialised to registers: the running summary
//     merged with a tile's, the factor exp(m_old − m_new) on the old side, the empty summary
//     (-inf, 0) handled so that two empty sides give zeros, never NaN.
//   - Causal: K/V tiles past the diagonal of the block's last row are never loaded. Masking
//     (-inf) runs only on tiles that need it, decided per warp: the tile reaching past seq_k and
//     the tiles crossing the warp's diagonal.
//   - Epilogue: O/l in the element type, staged through the warp's own 16 rows of the (now
//     unused) Q buffer and written as coalesced 16-byte stores, rows >= seq_q dropped.
constexpr int kF2Warps = 8;  // 4 also works (Br = 64, two blocks per SM); see the note above
constexpr int kF2Threads = kF2Warps * 32;
constexpr int kF2MinBlocks = 8 / kF2Warps;  // blocks per SM that __launch_bounds__ asks registers for
constexpr int kF2Br = 16 * kF2Warps;        // 128 query rows
constexpr int kF2Bc = 64;                   // keys per K/V tile

template <int D>
constexpr int flash2_smem_bytes() {
  return kF2Br * D * 2 + 2 /*stages*/ * 2 /*K, V*/ * kF2Bc * D * 2;  // d=128: 32 KiB + 64 KiB; d=64: 16 + 32 KiB
}

struct Flash2Args {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  int heads, kv_heads, group, seq_q, seq_k;
  int window;        // causal only: query i sees keys j > i + shift − window too (0: no window)
  float scale_log2;  // scale · log2(e)
  int64_t k_head_stride, v_head_stride, k_batch_stride, v_batch_stride;  // elements, resolved (never 0)
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// 16-byte global→shared copies (L2 only: each K/V tile is read once per block). With
// ok == false the source size is 0 and the 16 bytes are zero-filled (the source is then not
// read, but callers still pass a valid address).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async16_zfill(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a·b for one m16n8k16 tile (a: 4 registers of element pairs, b: 2, c: 4 fp32).
template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Byte offset of 16-byte chunk c of row r in a swizzled tile with D-element rows.
template <int D>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * (D * 2) + ((c ^ (r & 7)) << 4));
}

// Issues the cp.async copies of ROWS rows starting at global row row0 (of a [rows][D] matrix at
// g) into the swizzled tile at s; rows >= limit are zero-filled. Thread tid copies chunk
// tid % (D/8) of rows tid / (D/8) + i·(threads / (D/8)): a warp covers 512 contiguous bytes of
// global memory, and since the row step is a multiple of 8 the swizzle term (r & 7) is the same
// for all of a thread's rows. A tile wholly inside the matrix (all but the last) takes the
// unpredicated path, whose addresses are one base plus immediates.
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(uint32_t s, const uint16_t* __restrict__ g, int row0, int limit, int tid) {
  constexpr int kChunks = D / 8;
  constexpr int kRowStep = kF2Threads / kChunks;
  static_assert(kRowStep % 8 == 0 && ROWS % kRowStep == 0, "row step must keep r & 7 fixed and tile the rows");
  const int r = tid / kChunks, c = tid % kChunks;
  const uint32_t s0 = s + swz<D>(r, c);
  const uint16_t* src = g + (int64_t{row0 + r} * D + c * 8);
  if (row0 + ROWS <= limit) {
#pragma unroll
    for (int i = 0; i < ROWS / kRowStep; ++i) cp_async16(s0 + i * kRowStep * (D * 2), src + i * kRowStep * D);
  } else {
#pragma unroll
    for (int i = 0; i < ROWS / kRowStep; ++i) {
      const bool ok = row0 + r + i * kRowStep < limit;
      cp_async16_zfill(s0 + i * kRowStep * (D * 2), ok ? src + i * kRowStep * D : g, ok);
    }
  }
}

template <class T, int D, bool kCausal>
__global__ void __launch_bounds__(kF2Threads, kF2MinBlocks) flash2_kernel(const Flash2Args a) {
  constexpr int kRowBytes = D * 2;
  constexpr int kTileBytes = kF2Bc * kRowBytes;  // one K or V tile
  constexpr int kKSlices = D / 16;               // k16 slices of Q·Kᵀ
  constexpr int kNTiles = kF2Bc / 8;             // n8 tiles of S
  constexpr int kDTiles = D / 8;                 // n8 tiles of O
  extern __shared__ uint4 f2_smem[];
  const uint32_t sQ = smem_addr(f2_smem);      // [Br][D], swizzled; reused to stage O
  const uint32_t sK = sQ + kF2Br * kRowBytes;  // K slots 0, 1
  const uint32_t sV = sK + 2 * kTileBytes;     // V slots 0, 1

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma groupID and thread-in-group
  const int mtile = kCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int seq_q = a.seq_q, seq_k = a.seq_k;
  const int shift = seq_k - seq_q;   // causal: query i sees key j iff j <= i + shift
  const int m0 = mtile * kF2Br;      // first query row of the block
  const int wrow0 = m0 + warp * 16;  // first query row of the warp
  const int64_t qo_off = (int64_t{b} * a.heads + h) * seq_q * D;
  const int kvh = h / a.group;
  const uint16_t* q = static_cast<const uint16_t*>(a.q) + qo_off;
  const uint16_t* k = static_cast<const uint16_t*>(a.k) + (b * a.k_batch_stride + kvh * a.k_head_stride);
  const uint16_t* v = static_cast<const uint16_t*>(a.v) + (b * a.v_batch_stride + kvh * a.v_head_stride);
  uint16_t* o = static_cast<uint16_t*>(a.o) + qo_off;

  // K/V tiles to visit: all of them, or (causal) up to the one holding the last key seen by the
  // block's last valid row, last_row + shift. That key may be < 0 (seq_q > seq_k: the first rows
  // see nothing): then no tile, and the block writes zeros. With a sliding window the tiles
  // before the one holding the first row's first visible key, m0 + shift − window + 1, are
  // skipped too: tiles first_tile .. first_tile + n_tiles − 1 are visited.
  int n_tiles = (seq_k + kF2Bc - 1) / kF2Bc;
  int first_tile = 0;
  if (kCausal) {
    const int last_key = min(m0 + kF2Br, seq_q) - 1 + shift;
    n_tiles = last_key < 0 ? 0 : min(n_tiles, last_key / kF2Bc + 1);
    if (a.window > 0) {
      first_tile = max(0, m0 + shift - a.window + 1) / kF2Bc;
      n_tiles = max(0, n_tiles - first_tile);
    }
  }
  if (n_tiles == 0) {
    for (int i = tid; i < kF2Br * (D / 8); i += kF2Threads) {
      const int r = i / (D / 8), c = i % (D / 8);
      if (m0 + r < seq_q) *reinterpret_cast<uint4*>(o + int64_t{m0 + r} * D + c * 8) = make_uint4(0, 0, 0, 0);
    }
    return;  // uniform over the block, before any barrier
  }

  // Per-lane ldmatrix offsets. For chunk 2·x + bit of a row r with r & 7 == lane & 7:
  // (2x + bit) ^ (r & 7) = 2x ^ (bit ^ (lane & 7)) = 8·(x >> 2) + ((2·(x & 3)) ^ (bit ^ (lane & 7))),
  // because 2x has no bit 0 and bit ^ (lane & 7) < 8. So four per-lane offsets (x & 3) plus
  // compile-time constants (x >> 2, the tile row) cover every fragment.
  //  K (non-transposed, B of S = Q·Kᵀ, B[k][n] = K[n][k]) for keys 16·np.. and k16 slice kk:
  //    matrix i = lane >> 3: keys 16np + (lane & 7) + 8·(i >> 1), chunk 2kk + (i & 1), giving
  //    r0 = b0b1 and r1 = b2b3 of n8 tile 2np, r2, r3 those of n8 tile 2np+1 (thread holds
  //    row g = key, cols 2t, 2t+1 = k: b0b1 = B[2t..2t+1][g]).
  //  V (transposed, B of O = P·V, B[k][n] = V[k][n]) for keys 16·kk.. and d columns 16·dp..:
  //    matrix i: keys 16kk + (lane & 7) + 8·(i & 1) = 16kk + (lane & 15), chunk 2dp + (i >> 1),
  //    giving r0 = b0b1, r1 = b2b3 of d8 tile 2dp, r2, r3 those of d8 tile 2dp+1 (.trans: thread
  //    holds rows 2t, 2t+1 = keys, col g = d).
  uint32_t koff[4], voff[4];
  {
    const int kbit = ((lane >> 3) & 1) ^ (lane & 7);
    const int vbit = (lane >> 4) ^ (lane & 7);
    const int krow = (lane & 7) + ((lane >> 4) << 3);
    const int vrow = lane & 15;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      koff[x] = static_cast<uint32_t>(krow * kRowBytes + (((2 * x) ^ kbit) << 4));
      voff[x] = static_cast<uint32_t>(vrow * kRowBytes + (((2 * x) ^ vbit) << 4));
    }
  }

  uint32_t qf[kKSlices][4];  // Q A-fragments of the warp's 16 rows
  // C fragment of n8 tile n: c0, c1 = (row g, cols 8n + 2t, +1), c2, c3 = (row g + 8, same cols).
  float acc_o[kDTiles][4];
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) acc_o[n][0] = acc_o[n][1] = acc_o[n][2] = acc_o[n][3] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // raw scores, rows g and g + 8; quad-uniform
  float row_sum[2] = {0.0f, 0.0f};            // this lane's share, reduced at the end
  const float sl2 = a.scale_log2;

  // s = Q·K_slotᵀ, raw dot products.
  auto qk = [&](float(&s)[kNTiles][4], uint32_t k_slot) {
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kKSlices; ++kk) {
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_slot + koff[kk & 3] + (kk >> 2) * 128 + np * 16 * kRowBytes);
        mma16816<T>(s[2 * np], qf[kk], kb[0], kb[1]);
        mma16816<T>(s[2 * np + 1], qf[kk], kb[2], kb[3]);
      }
    }
  };

  // -inf on keys past seq_k and, when causal, past each row's diagonal or (window) at or before
  // row + shift − window; only on the tiles where some key is invalid for some row of this warp:
  // the tile reaching past seq_k, causal tiles whose last key n0 + Bc − 1 passes the limit of the
  // warp's first row, and window tiles whose first key n0 is at or before the warp's last row's
  // lower limit (all warp-uniform).
  // Element e of n8 tile n: key n0 + 8n + 2t + (e & 1), row wrow0 + g + 8·(e >> 1).
  const int window = kCausal ? a.window : 0;
  auto mask = [&](float(&s)[kNTiles][4], int n0) {
    if (n0 + kF2Bc > seq_k || (kCausal && n0 + kF2Bc - 1 > wrow0 + shift) || (window > 0 && n0 <= wrow0 + 15 + shift - window)) {
#pragma unroll
      for (int n = 0; n < kNTiles; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + 8 * n + 2 * t + (e & 1);
          const int row = wrow0 + g + 8 * (e >> 1);
          if (key >= seq_k || (kCausal && key > row + shift) || (window > 0 && key <= row + shift - window)) s[n][e] = -INFINITY;
        }
    }
  };

  // Online softmax of one (masked) score tile, then acc_o += P·V_slot.
  auto softmax_pv = [&](float(&s)[kNTiles][4], uint32_t v_slot) {
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int n = 0; n < kNTiles; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    float ms[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float alpha = online_softmax_rescale(row_max[r], row_sum[r], quad_max(mx[r]), sl2, &ms[r]);
#pragma unroll
      for (int n = 0; n < kDTiles; ++n) {
        acc_o[n][2 * r] *= alpha;
        acc_o[n][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2_approx(fmaf(s[n][e], sl2, -ms[e >> 1]));
        row_sum[e >> 1] += s[n][e];
      }
#pragma unroll
    for (int kk = 0; kk < kF2Bc / 16; ++kk) {
      // A fragment of key slice kk: a0a1 = (row g, keys 2t..) = tile 2kk c0c1, a2a3 = (row g+8)
      // = tile 2kk c2c3, a4a5 = (row g, keys 2t+8..) = tile 2kk+1 c0c1, a6a7 = tile 2kk+1 c2c3.
      uint32_t pa[4];
      pa[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_slot + voff[dp & 3] + (dp >> 2) * 128 + kk * 16 * kRowBytes);
        mma16816<T>(acc_o[2 * dp], pa, vb[0], vb[1]);
        mma16816<T>(acc_o[2 * dp + 1], pa, vb[2], vb[3]);
      }
    }
  };

  // Pipeline. Iteration j computes S_{j+1} = Q·K_{j+1}ᵀ while it runs the softmax of S_j and
  // O += P_j·V_j: the two are independent, so the tensor-core and shared-memory work of one
  // overlaps the exponentials and shuffles of the other inside each warp (the block barrier
  // keeps all 8 warps in step, so no other warp would fill that gap). Hence K runs two tiles
  // ahead of V in the loads. Tile i lives in K slot i & 1 and V slot i & 1. At the top of
  // iteration j (after the barrier) the block issues K_{j+2} into K slot j & 1, whose K_j was
  // last read for S_j before that barrier, and V_{j+1} into V slot (j+1) & 1, whose V_{j−1} was
  // last read in iteration j − 1; both are waited for at the top of iteration j + 1.
  // Tile indices below are relative to first_tile: key0 is the first visited key.
  const int key0 = first_tile * kF2Bc;
  load_tile<D, kF2Br>(sQ, q, m0, seq_q, tid);
  load_tile<D, kF2Bc>(sK, k, key0, seq_k, tid);
  cp_async_commit();  // group: Q, K_0
  load_tile<D, kF2Bc>(sV, v, key0, seq_k, tid);
  if (n_tiles > 1) load_tile<D, kF2Bc>(sK + kTileBytes, k, key0 + kF2Bc, seq_k, tid);
  cp_async_commit();  // group: V_0, K_1
  cp_async_wait<1>();
  __syncthreads();

  // A fragment of k16 slice kk: ldmatrix.x4 matrix i (addresses from lanes 8i..8i+7) must be
  // a0a1 = rows 0-7 / cols 0-7, a2a3 = rows 8-15 / cols 0-7, a4a5 = rows 0-7 / cols 8-15,
  // a6a7 = rows 8-15 / cols 8-15 of the slice: lane l gives row l & 15, chunk 2·kk + (l >> 4).
#pragma unroll
  for (int kk = 0; kk < kKSlices; ++kk) ldmatrix_x4(qf[kk], sQ + swz<D>(warp * 16 + (lane & 15), 2 * kk + (lane >> 4)));

  float s_cur[kNTiles][4];
  qk(s_cur, sK);
  for (int j = 0; j + 1 < n_tiles; ++j) {
    cp_async_wait<0>();
    __syncthreads();
    if (j + 2 < n_tiles) load_tile<D, kF2Bc>(sK + (j & 1) * kTileBytes, k, key0 + (j + 2) * kF2Bc, seq_k, tid);
    load_tile<D, kF2Bc>(sV + ((j + 1) & 1) * kTileBytes, v, key0 + (j + 1) * kF2Bc, seq_k, tid);
    cp_async_commit();
    mask(s_cur, key0 + j * kF2Bc);
    float s_next[kNTiles][4];
    qk(s_next, sK + ((j + 1) & 1) * kTileBytes);
    softmax_pv(s_cur, sV + (j & 1) * kTileBytes);
#pragma unroll
    for (int n = 0; n < kNTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s_cur[n][e] = s_next[n][e];
  }
  cp_async_wait<0>();
  __syncthreads();
  mask(s_cur, key0 + (n_tiles - 1) * kF2Bc);
  softmax_pv(s_cur, sV + ((n_tiles - 1) & 1) * kTileBytes);

  // ---- epilogue: O / l, staged through the warp's own 16 rows of sQ ----
  // Only this warp ever read those rows (its Q fragments), so a warp barrier is enough.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[r]);
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;  // l == 0: the row saw no key, output 0
  }
  unsigned char* stage = reinterpret_cast<unsigned char*>(f2_smem);
  const int ra = warp * 16 + g, rb = ra + 8;  // block-relative rows of c0c1 and c2c3
#pragma unroll
  for (int n = 0; n < kDTiles; ++n) {
    // Columns 8n + 2t, +1 are bytes 4t..4t+3 of chunk n. Per store instruction the 32 lanes
    // hit 8 rows × 4 words with chunks n ^ g: all 32 banks distinct.
    *reinterpret_cast<uint32_t*>(stage + swz<D>(ra, n) + 4 * t) = pack2<T>(acc_o[n][0] * inv[0], acc_o[n][1] * inv[0]);
    *reinterpret_cast<uint32_t*>(stage + swz<D>(rb, n) + 4 * t) = pack2<T>(acc_o[n][2] * inv[1], acc_o[n][3] * inv[1]);
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int id = lane + 32 * i;
    const int r = warp * 16 + id / kChunks, c = id % kChunks;
    const uint4 val = *reinterpret_cast<const uint4*>(stage + swz<D>(r, c));
    if (m0 + r < seq_q) *reinterpret_cast<uint4*>(o + int64_t{m0 + r} * D + c * 8) = val;
  }
}

template <class T, int D, bool kCausal>
void run_flash2(const AttentionParams& p, cudaStream_t stream) {
  Flash2Args a;
  a.q = p.q;
  a.k = p.k;
  a.v = p.v;
  a.o = p.o;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.group = p.heads / p.kv_heads;
  a.seq_q = p.seq_q;
  a.seq_k = p.seq_k;
  a.window = p.window;
  a.scale_log2 = p.scale * 1.4426950408889634f;
  const int64_t head = int64_t{p.seq_k} * D;
  a.k_head_stride = p.k_head_stride ? p.k_head_stride : head;
  a.v_head_stride = p.v_head_stride ? p.v_head_stride : head;
  a.k_batch_stride = p.k_batch_stride ? p.k_batch_stride : head * p.kv_heads;
  a.v_batch_stride = p.v_batch_stride ? p.v_batch_stride : head * p.kv_heads;
  constexpr int smem = flash2_smem_bytes<D>();
  if constexpr (smem > 48 * 1024)
    IB_CUDA_CHECK(cudaFuncSetAttribute(flash2_kernel<T, D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.seq_q + kF2Br - 1) / kF2Br), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.batch));
  flash2_kernel<T, D, kCausal><<<grid, kF2Threads, smem, stream>>>(a);
  IB_CUDA_CHECK(cudaGetLastError());
}

template <class T, int D>
void run_flash2_causal(const AttentionParams& p, cudaStream_t stream) {
  if (p.causal)
    run_flash2<T, D, true>(p, stream);
  else
    run_flash2<T, D, false>(p, stream);
}

}  // namespace

std::string fused_shape_problem(const AttentionParams& p, const char* kernel) {
  const std::string k = kernel;
  if (p.batch < 1 || p.heads < 1 || p.kv_heads < 1 || p.seq_q < 1 || p.seq_k < 1)
    return k + " needs batch, heads, kv_heads, seq_q and seq_k >= 1";
  if (p.heads % p.kv_heads != 0) return k + " needs heads to be a multiple of kv_heads";
  if (p.head_dim != 64 && p.head_dim != 128) return k + " supports head_dim 64 and 128";
  return {};
}

std::string fused_attention_problem(const AttentionParams& p, const char* kernel) {
  if (std::string why = fused_shape_problem(p, kernel); !why.empty()) return why;
  const std::string k = kernel;
  // The max is taken on raw scores and masked scores are -inf·scale: both need scale > 0.
  if (!(p.scale > 0.0f)) return k + " needs a positive softmax scale";
  if (p.window < 0 || (p.window > 0 && !p.causal)) return k + "'s sliding window needs causal attention and window >= 0";
  if (p.heads > 65535 || p.batch > 65535) return k + " supports heads and batch up to 65535 (grid y, z)";
  // 16-byte copies and stores (cudaMalloc'd buffers always qualify; null = not allocated yet).
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.o)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return k + " needs 16-byte aligned q, k, v and o";
  // Every head's rows must start 16-byte aligned too, and the strides must not overlap a head's rows.
  for (int64_t s : {p.k_head_stride, p.v_head_stride, p.k_batch_stride, p.v_batch_stride})
    if (s < 0 || s % 8 != 0) return k + " needs k/v strides that are non-negative multiples of 8 elements";
  const int64_t head = int64_t{p.seq_k} * p.head_dim;
  if ((p.k_head_stride && p.k_head_stride < head) || (p.v_head_stride && p.v_head_stride < head))
    return k + " needs k/v head strides of at least seq_k·head_dim";
  return {};
}

std::string flash2_unsupported(const AttentionParams& p) { return fused_attention_problem(p, "flash2"); }

void launch_flash2(const AttentionParams& p, cudaStream_t stream) {
  if (std::string why = flash2_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  if (p.head_dim == 64) {
    if (p.fp16)
      run_flash2_causal<__half, 64>(p, stream);
    else
      run_flash2_causal<__nv_bfloat16, 64>(p, stream);
  } else {
    if (p.fp16)
      run_flash2_causal<__half, 128>(p, stream);
    else
      run_flash2_causal<__nv_bfloat16, 128>(p, stream);
  }
}

}  // namespace ib
