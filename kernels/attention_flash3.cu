// FlashAttention-3's structure on Hopper (sm_90a): TMA bulk tensor copies into a shared-memory
// ring, wgmma, producer/consumer warp specialisation. Built for sm_90a only (its own library,
// kernels/CMakeLists.txt); flash3_unsupported refuses any other device.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "attention.h"
#include "element.cuh"
#include "flash_common.cuh"
#include "hopper.cuh"
#include "numerics/cuda_check.h"
#include "numerics/flash_tiles.h"

namespace ib {

namespace {

// =====================================================================================
// FlashAttention-3 (forward)
// =====================================================================================
//
// v1: the FA3 paper's warp-specialised pipeline, kept small enough to check by reading.
//   - Grid (query tiles, heads, batch) as flash2, the query tiles reversed when causal (longest
//     first). One block of 384 threads = 3 warpgroups per SM (~161 KiB of shared memory):
//       warpgroup 0, the producer: one thread issues every TMA copy; the warpgroup gives its
//         registers away (setmaxnreg 24) and its other 127 threads exit at once;
//       warpgroups 1 and 2, the consumers: 64 query rows each (Br = 128), 240 registers each.
//   - Shared memory, every tile in the panel layout (hopper.cuh: 64-column panels of 128-byte
//     rows, 128-byte swizzle, 1024-byte aligned), written only by TMA:
//       Q: 128 rows × D, loaded once;
//       K and V: a ring of kF3Stages = 2 slots of 128 keys × D each (32 KiB per K or V tile at
//         D = 128), so the producer loads tile j + 1 while the consumers work on tile j.
//     Each load is D/64 TMA boxes of 64 columns × 128 rows from a 4-D tensor map
//     [batch][heads][seq][D] (K and V with their head and batch strides, so KV-cache views work
//     as in flash2); rows past seq_q / seq_k arrive as zeros, never from the next head.
//   - Handshakes (mbarriers): q_full; per slot k_full and v_full (the producer's arrive plus the
//     TMA byte count), k_empty and v_empty (one arrival per consumer warp, 8 in all, once the
//     wgmma that read the slot's K, resp. V, is done: K frees a whole P·V earlier than V, so the
//     producer can fetch K_{j+2} while P·V_j still reads V). Phase parity of slot use u (tile
//     j = 2u + slot) is u & 1.
//     Every wait gives up after 4 s with a trap, a launch error instead of a hang (hopper.cuh: mbar_wait).
//   - Consumer warpgroup math per key tile j (S is 64 × 128 fp32 in registers, 64 per thread):
//       S = Q·K_jᵀ: D/16 wgmma m64n128k16, A = the warpgroup's 64 Q rows and B = K_j, both
//         K-major from shared memory (descriptors, no ldmatrix);
//       mask (only tiles that need it, decided per warp as in flash2), online softmax in base 2
//         on raw scores exactly as flash2 (row max across the quad, per-lane row sums reduced
//         once at the end, -inf rows give zeros never NaN), P = bf16/fp16 in registers: the
//         accumulator layout of S is the A-fragment layout of the next wgmma (hopper.cuh:
//         scores_to_a_fragments), so P never touches shared memory;
//       O += P·V_j: 128/16 wgmma m64nDk16 with A = P from registers and B = V_j from shared
//         memory, MN-major (V is stored [key][d], d contiguous; imm-trans-b = 1).
//   - Intra-warpgroup overlap (FA3 §3.2): iteration j issues S_j = Q·K_jᵀ, then O += P_{j−1}·V_{j−1},
//     waits for S_j only and runs its softmax while the P·V wgmma still runs; it then waits for
//     P·V, frees slot j − 1, rescales O by exp(m_{j−1} − m_j) and forms P_j. Costs no extra S
//     registers (S_j is the only score tile alive), only P_{j−1} kept across the softmax.
//     Flash3Schedule::Serial (tests only) does the two GEMMs of a tile one after the other.
//   - Not done (yet): inter-warpgroup ping-pong scheduling, a persistent grid, FP8, TMA stores.
//   - Epilogue: O / l in the element type, staged through the warpgroup's own 64 rows of the Q
//     tile (after a warpgroup barrier: every wgmma that read them is done) and written with
//     16-byte stores, rows >= seq_q dropped.
constexpr int kF3Br = 128;       // query rows per block: 2 consumer warpgroups × 64
constexpr int kF3Bc = 128;       // keys per K/V tile
constexpr int kF3Stages = 2;     // K/V ring slots
constexpr int kF3Threads = 384;  // producer warpgroup + 2 consumer warpgroups
constexpr int kF3ConsumerWarps = 8;
constexpr int kF3ProducerRegs = 24;  // 128·24 + 256·240 = 64512 = 384·168, the launch budget
constexpr int kF3ConsumerRegs = 240;

template <int D>
constexpr int flash3_smem_bytes() {
  // Q, the K and V slots, 9 mbarriers (rounded up), and up to 1023 bytes to align the base.
  return kF3Br * D * 2 + 2 * kF3Stages * kF3Bc * D * 2 + 128 + 1024;
}

struct Flash3Args {
  void* o;
  int heads, group, seq_q, seq_k;
  int window;        // causal only (0: none)
  float scale_log2;  // scale · log2(e)
};

#if IB_SM90A
// mbarrier addresses: q_full, then per slot k_full, v_full, k_empty, v_empty.
struct Flash3Barriers {
  uint32_t base;
  __device__ uint32_t q_full() const { return base; }
  __device__ uint32_t k_full(int s) const { return base + 8 * (1 + s); }
  __device__ uint32_t v_full(int s) const { return base + 8 * (1 + kF3Stages + s); }
  __device__ uint32_t k_empty(int s) const { return base + 8 * (1 + 2 * kF3Stages + s); }
  __device__ uint32_t v_empty(int s) const { return base + 8 * (1 + 3 * kF3Stages + s); }
};
#endif

template <class T, int D, bool kCausal, bool kOverlap>
__global__ void __launch_bounds__(kF3Threads, 1)
    flash3_kernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, const Flash3Args a) {
#if IB_SM90A
  using namespace sm90;
  constexpr int kPanels = D / 64;
  constexpr uint32_t kQBytes = kF3Br * D * 2;
  constexpr uint32_t kTileBytes = kF3Bc * D * 2;  // one K or V slot
  constexpr int kDBlocks = D / 8;                 // n8 blocks of O
  extern __shared__ uint4 f3_smem[];
  const AlignedSmem smem = align_smem_1024(f3_smem);
  unsigned char* const base_ptr = smem.ptr;
  const uint32_t sQ = smem.addr;
  const uint32_t sK = sQ + kQBytes;                 // slot s at sK + s·kTileBytes
  const uint32_t sV = sK + kF3Stages * kTileBytes;  // slot s at sV + s·kTileBytes
  const Flash3Barriers bar{sV + kF3Stages * kTileBytes};

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int mtile = kCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : static_cast<int>(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int seq_q = a.seq_q, seq_k = a.seq_k;
  const int m0 = mtile * kF3Br;
  const int window = kCausal ? a.window : 0;
  const KeyTileRange tiles = flash_key_tiles(m0, kF3Br, seq_q, seq_k, kCausal, window, kF3Bc);
  uint16_t* const o = static_cast<uint16_t*>(a.o) + (int64_t{b} * a.heads + h) * seq_q * D;

  if (tiles.count == 0) {  // no row of the block sees a key (causal, seq_q > seq_k): zeros
    for (int i = tid; i < kF3Br * kDBlocks; i += kF3Threads) {
      const int r = i / kDBlocks, c = i % kDBlocks;
      if (m0 + r < seq_q) *reinterpret_cast<uint4*>(o + int64_t{m0 + r} * D + c * 8) = make_uint4(0, 0, 0, 0);
    }
    return;  // uniform over the block, before any barrier
  }

  if (tid == 0) {
    mbar_init(bar.q_full(), 1);
    for (int s = 0; s < kF3Stages; ++s) {
      mbar_init(bar.k_full(s), 1);
      mbar_init(bar.v_full(s), 1);
      mbar_init(bar.k_empty(s), kF3ConsumerWarps);
      mbar_init(bar.v_empty(s), kF3ConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();  // the last block-wide barrier: the producer's idle threads leave below

  // ---------------- producer warpgroup ----------------
  if (warp < 4) {
    warpgroup_reg_dealloc<kF3ProducerRegs>();
    if (tid == 0) {
      const int kvh = h / a.group;
      mbar_arrive_expect_tx(bar.q_full(), kQBytes);
#pragma unroll
      for (int p = 0; p < kPanels; ++p) tma_load_4d(sQ + p * kF3Br * 128, &tm_q, bar.q_full(), 64 * p, m0, h, b);
      for (int i = 0; i < tiles.count; ++i) {
        const int s = i % kF3Stages;
        const uint32_t use = static_cast<uint32_t>(i / kF3Stages);
        const int n0 = (tiles.first + i) * kF3Bc;
        // K slot s last held tile i − kF3Stages (its use − 1): wait until the 8 consumer warps
        // released it (right after their S wgmma), then the same for V (after their P·V wgmma).
        if (i >= kF3Stages) mbar_wait(bar.k_empty(s), (use - 1) & 1);
        mbar_arrive_expect_tx(bar.k_full(s), kTileBytes);
#pragma unroll
        for (int p = 0; p < kPanels; ++p)
          tma_load_4d(sK + s * kTileBytes + p * kF3Bc * 128, &tm_k, bar.k_full(s), 64 * p, n0, kvh, b);
        if (i >= kF3Stages) mbar_wait(bar.v_empty(s), (use - 1) & 1);
        mbar_arrive_expect_tx(bar.v_full(s), kTileBytes);
#pragma unroll
        for (int p = 0; p < kPanels; ++p)
          tma_load_4d(sV + s * kTileBytes + p * kF3Bc * 128, &tm_v, bar.v_full(s), 64 * p, n0, kvh, b);
      }
    }
    return;
  }

  // ---------------- consumer warpgroups ----------------
  warpgroup_reg_alloc<kF3ConsumerRegs>();
  const int cw = warp / 4 - 1;  // consumer warpgroup 0 or 1: rows 64·cw .. of the block
  const int wi = warp % 4;      // warp within the warpgroup: rows 16·wi .. of those
  const int g = lane / 4, t = lane % 4;
  const int wrow0 = m0 + 64 * cw + 16 * wi;    // first query row of this warp
  const int shift = seq_k - seq_q;             // causal: query i sees key j iff j <= i + shift
  const uint32_t q_rows = sQ + 64 * cw * 128;  // the warpgroup's 64 rows in every Q panel
  const int key0 = tiles.first * kF3Bc;
  const float sl2 = a.scale_log2;

  float s_acc[64];                 // S of the current tile: element e of n8 block j is row g + 8(e >> 1), key 8j + 2t + (e & 1)
  uint32_t p_frag[kF3Bc / 16][4];  // P of the tile whose P·V is next, as A fragments
  float o_acc[D / 2];              // O, same layout over D columns
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o_acc[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};  // raw scores of rows g and g + 8; quad-uniform
  float row_sum[2] = {0.0f, 0.0f};            // this lane's share, reduced at the end
  float alpha[2] = {0.0f, 0.0f};              // factor on O from the last softmax step

  auto issue_scores = [&](int slot) { warpgroup_scores<T, D, kF3Br, kF3Bc>(s_acc, q_rows, sK + slot * kTileBytes); };
  auto issue_pv = [&](int slot) { warpgroup_pv<T, D, kF3Bc, kF3Bc>(o_acc, p_frag, sV + slot * kTileBytes); };

  // -inf on keys past seq_k and, when causal, past each row's diagonal or (window) at or before
  // row + shift − window; only on tiles where some key is invalid for some row of this warp
  // (warp-uniform test, as flash2).
  auto mask = [&](int n0) {
    if (tile_needs_mask(n0, kF3Bc, wrow0, 16, seq_k, kCausal, shift, window)) {
#pragma unroll
      for (int j = 0; j < kF3Bc / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + 8 * j + 2 * t + (e & 1);
          const int row = wrow0 + g + 8 * (e >> 1);
          if (key_hidden(key, row, seq_k, kCausal, shift, window)) s_acc[4 * j + e] = -INFINITY;
        }
    }
  };

  // Online softmax step on s_acc (flash_common.cuh, as flash2): new row max (raw scores), alpha =
  // exp(m_old − m_new), row sums rescaled and extended, s_acc = exp(s − m_new) in place. O is not touched (a P·V wgmma may
  // still be accumulating into it): rescale_o applies alpha afterwards.
  auto softmax_step = [&]() {
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < kF3Bc / 8; ++j) {
      mx[0] = fmaxf(mx[0], fmaxf(s_acc[4 * j], s_acc[4 * j + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(s_acc[4 * j + 2], s_acc[4 * j + 3]));
    }
    float ms[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) alpha[r] = online_softmax_rescale(row_max[r], row_sum[r], quad_max(mx[r]), sl2, &ms[r]);
#pragma unroll
    for (int j = 0; j < kF3Bc / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s_acc[4 * j + e] = exp2_approx(fmaf(s_acc[4 * j + e], sl2, -ms[e >> 1]));
        row_sum[e >> 1] += s_acc[4 * j + e];
      }
  };
  auto rescale_o = [&]() {
#pragma unroll
    for (int j = 0; j < kDBlocks; ++j) {
      o_acc[4 * j] *= alpha[0];
      o_acc[4 * j + 1] *= alpha[0];
      o_acc[4 * j + 2] *= alpha[1];
      o_acc[4 * j + 3] *= alpha[1];
    }
  };
  // One arrival per warp on a slot's empty barrier, after the warp's wait for the wgmma that read it.
  auto release = [&](uint32_t empty_bar) { mbar_arrive_if(empty_bar, lane == 0); };

  mbar_wait(bar.q_full(), 0);
  if constexpr (kOverlap) {
    // Tile 0: scores, softmax, P_0.
    mbar_wait(bar.k_full(0), 0);
    wgmma_fence();
    issue_scores(0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(s_acc);
    release(bar.k_empty(0));
    mask(key0);
    softmax_step();
    rescale_o();
    scores_to_a_fragments<T, kF3Bc>(s_acc, p_frag);
    for (int i = 1; i < tiles.count; ++i) {
      const int s = i % kF3Stages, sp = (i - 1) % kF3Stages;
      mbar_wait(bar.k_full(s), static_cast<uint32_t>(i / kF3Stages) & 1);
      wgmma_fence();  // s_acc (read by the softmax), p_frag and o_acc (written) before the wgmmas use them
      issue_scores(s);
      wgmma_commit();
      mbar_wait(bar.v_full(sp), static_cast<uint32_t>((i - 1) / kF3Stages) & 1);
      wgmma_fence();  // again after the wait loop, else ptxas inserts one itself (C7519)
      issue_pv(sp);
      wgmma_commit();
      wgmma_wait<1>();  // S_i done (K slot s is free); P_{i−1}·V_{i−1} may still run
      fence_registers(s_acc);
      release(bar.k_empty(s));
      mask(key0 + i * kF3Bc);
      softmax_step();
      wgmma_wait<0>();  // P_{i−1}·V_{i−1} done: V slot sp is free, O and P may change
      fence_registers(o_acc);
      fence_registers(p_frag);
      release(bar.v_empty(sp));
      rescale_o();
      scores_to_a_fragments<T, kF3Bc>(s_acc, p_frag);
    }
    const int sl = (tiles.count - 1) % kF3Stages;
    mbar_wait(bar.v_full(sl), static_cast<uint32_t>((tiles.count - 1) / kF3Stages) & 1);
    wgmma_fence();
    issue_pv(sl);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(o_acc);
    fence_registers(p_frag);
    release(bar.v_empty(sl));
  } else {
    for (int i = 0; i < tiles.count; ++i) {
      const int s = i % kF3Stages;
      const uint32_t parity = static_cast<uint32_t>(i / kF3Stages) & 1;
      mbar_wait(bar.k_full(s), parity);
      wgmma_fence();
      issue_scores(s);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(s_acc);
      release(bar.k_empty(s));
      mask(key0 + i * kF3Bc);
      softmax_step();
      rescale_o();
      scores_to_a_fragments<T, kF3Bc>(s_acc, p_frag);
      mbar_wait(bar.v_full(s), parity);
      wgmma_fence();
      issue_pv(s);
      wgmma_commit();
      wgmma_wait<0>();
      fence_registers(o_acc);
      fence_registers(p_frag);
      release(bar.v_empty(s));
    }
  }

  // ---- epilogue: O / l, staged through this warpgroup's 64 rows of the Q tile ----
  // Every warp of the warpgroup is past its last wgmma (which read those rows) after this barrier.
  named_barrier_sync(1 + cw, 128);
  fence_proxy_async();  // the async-proxy reads of Q before our ordinary writes to the same bytes
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_sum(row_sum[r]);
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;  // l == 0: the row saw no key, output 0
  }
  const int ra = 64 * cw + 16 * wi + g;  // block-relative rows of elements e = 0, 1 (and + 8: e = 2, 3)
#pragma unroll
  for (int j = 0; j < kDBlocks; ++j) {
    // Columns 8j + 2t, +1: 4 bytes in chunk j of the row. Per store the 32 lanes cover 8 rows
    // (r & 7 = g) × 4 words of chunk j ^ g: 32 distinct banks.
    *reinterpret_cast<uint32_t*>(base_ptr + panel_offset(kF3Br, ra, 8 * j + 2 * t)) =
        pack2<T>(o_acc[4 * j] * inv[0], o_acc[4 * j + 1] * inv[0]);
    *reinterpret_cast<uint32_t*>(base_ptr + panel_offset(kF3Br, ra + 8, 8 * j + 2 * t)) =
        pack2<T>(o_acc[4 * j + 2] * inv[1], o_acc[4 * j + 3] * inv[1]);
  }
  __syncwarp();  // each warp reads back only its own 16 rows
#pragma unroll
  for (int i = 0; i < 16 * kDBlocks / 32; ++i) {
    const int id = lane + 32 * i;
    const int r = 64 * cw + 16 * wi + id / kDBlocks, c = id % kDBlocks;
    const uint4 val = *reinterpret_cast<const uint4*>(base_ptr + panel_offset(kF3Br, r, 8 * c));
    if (m0 + r < seq_q) *reinterpret_cast<uint4*>(o + int64_t{m0 + r} * D + c * 8) = val;
  }
#elif defined(__CUDA_ARCH__)
  __trap();  // built for a target without wgmma: never launched (flash3_unsupported)
#endif
}

template <class T, int D, bool kCausal, bool kOverlap>
void run_flash3(const AttentionParams& p, cudaStream_t stream) {
  const int64_t head = int64_t{p.seq_k} * D;
  const int64_t k_head = p.k_head_stride ? p.k_head_stride : head, v_head = p.v_head_stride ? p.v_head_stride : head;
  const int64_t k_batch = p.k_batch_stride ? p.k_batch_stride : head * p.kv_heads;
  const int64_t v_batch = p.v_batch_stride ? p.v_batch_stride : head * p.kv_heads;
  const CUtensorMap tm_q = sm90::make_panel_tensor_map(p.q, p.fp16, D, p.seq_q, p.heads, p.batch, int64_t{p.seq_q} * D,
                                                       int64_t{p.heads} * p.seq_q * D, kF3Br);
  const CUtensorMap tm_k = sm90::make_panel_tensor_map(p.k, p.fp16, D, p.seq_k, p.kv_heads, p.batch, k_head, k_batch, kF3Bc);
  const CUtensorMap tm_v = sm90::make_panel_tensor_map(p.v, p.fp16, D, p.seq_k, p.kv_heads, p.batch, v_head, v_batch, kF3Bc);
  const Flash3Args a{p.o, p.heads, p.heads / p.kv_heads, p.seq_q, p.seq_k, p.window, p.scale * 1.4426950408889634f /* log2(e) */};
  constexpr int smem = flash3_smem_bytes<D>();
  auto* kernel = flash3_kernel<T, D, kCausal, kOverlap>;
  IB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((p.seq_q + kF3Br - 1) / kF3Br), static_cast<unsigned>(p.heads),
                  static_cast<unsigned>(p.batch));
  kernel<<<grid, kF3Threads, smem, stream>>>(tm_q, tm_k, tm_v, a);
  IB_CUDA_CHECK(cudaGetLastError());
}

template <class T, int D, bool kOverlap>
void run_flash3_causal(const AttentionParams& p, cudaStream_t stream) {
  if (p.causal)
    run_flash3<T, D, true, kOverlap>(p, stream);
  else
    run_flash3<T, D, false, kOverlap>(p, stream);
}

template <bool kOverlap>
void run_flash3_bf16(const AttentionParams& p, cudaStream_t stream) {
  if (p.head_dim == 64)
    run_flash3_causal<__nv_bfloat16, 64, kOverlap>(p, stream);
  else
    run_flash3_causal<__nv_bfloat16, 128, kOverlap>(p, stream);
}

}  // namespace

std::string flash3_unsupported(const AttentionParams& p) {
#ifndef IB_FLASH3_SM90A
  (void)p;
  return "flash3 was not built for sm_90a (needs nvcc 12.3 or newer)";
#else
  if (std::string why = fused_attention_problem(p, "flash3"); !why.empty()) return why;
  // The kernels exist only as sm_90a machine code, which runs on compute capability 9.0 alone.
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return "flash3 needs an sm_90 GPU (Hopper): no usable CUDA device";
  }
  if (major != 9 || minor != 0)
    return "flash3 needs an sm_90 GPU (Hopper); this one is sm_" + std::to_string(major) + std::to_string(minor);
  return {};
#endif
}

void launch_flash3(const AttentionParams& p, cudaStream_t stream) {
  launch_flash3_schedule(p, stream, Flash3Schedule::Overlapped);
}

void launch_flash3_schedule(const AttentionParams& p, cudaStream_t stream, Flash3Schedule schedule) {
  if (std::string why = flash3_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  if (schedule == Flash3Schedule::Serial) {
    if (p.fp16) throw std::invalid_argument("flash3's serial schedule (a test aid) is built for bf16 only");
    run_flash3_bf16<false>(p, stream);
  } else if (p.fp16) {
    if (p.head_dim == 64)
      run_flash3_causal<__half, 64, true>(p, stream);
    else
      run_flash3_causal<__half, 128, true>(p, stream);
  } else {
    run_flash3_bf16<true>(p, stream);
  }
}

}  // namespace ib
