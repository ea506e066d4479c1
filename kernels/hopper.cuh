// Hopper (sm_90a) building blocks of flash3 and of its staged GPU probes: the 128-byte-swizzled
// "panel" layout that TMA writes and wgmma reads, mbarriers, TMA tile loads, wgmma with
// shared-memory descriptors and register A operands, setmaxnreg. Device code exists only in the
// sm_90a compilation pass (IB_SM90A): wgmma and setmaxnreg are arch-specific instructions that
// no other target assembles. The host part (tensor maps) is plain C++ on the runtime API.
//
// Sources for every layout here: the PTX ISA, sections "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate" (register fragments, shared memory matrix layout, matrix descriptor),
// "mbarrier", "cp.async.bulk.tensor", "setmaxnreg"; CUDA driver API cuTensorMapEncodeTiled.
#pragma once

#include <cuda.h>  // CUtensorMap and the encoder's types only: no libcuda link (see tensor_map_encoder)
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "element.cuh"
#include "numerics/hd.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define IB_SM90A 1
#else
#define IB_SM90A 0
#endif

namespace ib::sm90 {

// ---- the panel layout ----
// A tile of `rows` rows × D 16-bit columns (D a multiple of 64) is stored as D/64 column panels,
// each `rows` × 128 bytes (64 columns): panel p holds columns 64p .. 64p + 63 of every row, panel
// p + 1 starts rows·128 bytes later. Inside a panel, 16-byte chunk c (columns 8c .. 8c + 7) of
// row r sits at chunk c ^ (r & 7) of the row. That is
//   - what TMA writes for a box of 64 columns × rows with CU_TENSOR_MAP_SWIZZLE_128B, and
//   - the "128B swizzle" canonical layout of wgmma descriptors (swizzle mode 1): for a K-major
//     operand (K = the contiguous column axis) 8-row × 128-byte atoms stacked down the rows
//     (SBO = 1024 bytes); for an MN-major operand (MN = the contiguous axis) the same atoms,
//     8 K-rows each (SBO = 1024), the next 64 MN columns one panel further (LBO = rows·128).
// Both apply the XOR to address bits [4, 7) with bits [7, 10), so every panel must start on a
// 1024-byte boundary (rows a multiple of 8 and a 1024-aligned tile base).
IB_HD uint32_t panel_offset(int rows, int r, int c) {
  return static_cast<uint32_t>((c / 64) * rows * 128 + r * 128 + ((((c % 64) / 8) ^ (r & 7)) << 4) + (c % 8) * 2);
}

// ---- tensor maps (host) ----
// cuTensorMapEncodeTiled is a driver API function; the runtime hands out its address, so the
// program needs no link against libcuda (the runtime is linked statically).
using TensorMapEncoder = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                                      const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                      CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline TensorMapEncoder tensor_map_encoder() {
  static const TensorMapEncoder fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &found);
#endif
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || f == nullptr) {
      (void)cudaGetLastError();
      throw std::runtime_error("cuTensorMapEncodeTiled is not available from the CUDA driver (" +
                               std::string(cudaGetErrorString(err)) + ")");
    }
    return reinterpret_cast<TensorMapEncoder>(f);
  }();
  return fn;
}

// A TMA map of a 4-D tensor [dim3][dim2][rows][cols] of 16-bit elements (cols contiguous, rows
// cols apart, dim2 and dim3 at the given element strides) whose box is 64 columns × box_rows rows
// × 1 × 1, written into shared memory in the panel layout (128-byte swizzle). Loading a tile of
// box_rows × cols takes cols / 64 boxes at column coordinates 0, 64, ...; rows past `rows` (and
// columns past `cols`) arrive as zeros.
inline CUtensorMap make_panel_tensor_map(const void* base, bool fp16, int cols, int rows, int dim2, int dim3, int64_t stride2,
                                         int64_t stride3, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(dim2),
                              static_cast<cuuint64_t>(dim3)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(cols) * 2, static_cast<cuuint64_t>(stride2) * 2,
                                 static_cast<cuuint64_t>(stride3) * 2};  // bytes, of dims 1..3
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r =
      tensor_map_encoder()(&map, fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4,
                           const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(static_cast<int>(r)) + ") for a [" +
                             std::to_string(dim3) + "][" + std::to_string(dim2) + "][" + std::to_string(rows) + "][" +
                             std::to_string(cols) + "] tensor, strides " + std::to_string(stride2) + "/" +
                             std::to_string(stride3));
  return map;
}

#if IB_SM90A

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// The dynamic shared memory from its first 1024-byte boundary on (panels need that alignment; the
// launch asks for 1023 bytes more), as a shared-memory address for TMA, wgmma and mbarriers and
// as a pointer for ordinary loads and stores.
struct AlignedSmem {
  uint32_t addr;
  unsigned char* ptr;
};
__device__ __forceinline__ AlignedSmem align_smem_1024(void* dynamic_smem) {
  const uint32_t raw = smem_u32(dynamic_smem);
  const uint32_t base = (raw + 1023u) & ~1023u;
  return {base, static_cast<unsigned char*>(dynamic_smem) + (base - raw)};
}

// ---- mbarriers (shared-memory addresses) ----
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
// Makes the initialised barriers visible to the other threads and to the TMA unit (async proxy);
// a __syncthreads() must follow before anyone uses them.
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// One arrival that also announces `bytes` of TMA transactions the phase must wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// One arrival from each thread whose `pred` is true (a predicated instruction: no branch, so
// no divergent path next to in-flight wgmmas).
__device__ __forceinline__ void mbar_arrive_if(uint32_t bar, bool pred) {
  asm volatile("{\n .reg .pred p;\n setp.ne.u32 p, %1, 0;\n @p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(bar),
               "r"(static_cast<uint32_t>(pred))
               : "memory");
}

// Gives up on a wait after this long: a wait that long is a protocol bug (a wrong parity, a
// missing arrival, a wrong byte count), not load.
constexpr uint64_t kHangNs = 4000000000ull;

// Waits until the barrier's phase with this parity has completed. The whole loop is one asm
// statement (no branch the compiler sees, no call: either would make ptxas serialise the
// wgmmas in flight around it). A wait past kHangNs (%globaltimer) executes `trap`: the launch
// fails with an error (cudaErrorLaunchFailure or similar) instead of hanging the GPU, and the
// test that launched it says so.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " .reg .u64 t0, t1;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @p bra IB_WAIT_DONE;\n"
      " mov.u64 t0, %%globaltimer;\n"
      "IB_WAIT_LOOP:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @p bra IB_WAIT_DONE;\n"
      " mov.u64 t1, %%globaltimer;\n"
      " sub.u64 t1, t1, t0;\n"
      " setp.gt.u64 p, t1, %2;\n"
      " @p trap;\n"
      " bra IB_WAIT_LOOP;\n"
      "IB_WAIT_DONE:\n"
      "}\n" ::"r"(bar),
      "r"(parity), "l"(kHangNs)
      : "memory");
}

// ---- TMA ----
// One box of a 4-D tensor map into shared memory at dst; completes `bar`'s transactions.
// Coordinates are in elements, innermost first.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Orders this thread's ordinary shared-memory accesses before later async-proxy accesses
// (wgmma operand reads, TMA) of the same memory, and the other way round.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// A barrier among `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- register budget per warpgroup (needs __launch_bounds__(threads, 1)) ----
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void warpgroup_reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- wgmma ----
// wgmma.fence before the first wgmma that reads or writes registers this thread wrote (the
// accumulators, the A fragments); commit closes a group of issued wgmmas; wait<N> returns when
// at most N groups are still running.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// The compiler does not know that a wgmma keeps using its registers after it is issued: after a
// wait, pass the registers through here so that no read of an accumulator moves above the wait
// and no register of an A fragment is reused before it.
template <int N>
__device__ __forceinline__ void fence_registers(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// Shared-memory matrix descriptor: start address, leading and stride byte offsets (all >> 4, 14
// bits each), base offset 0 (the panels are 1024-byte aligned), swizzle mode 1 = 128 bytes.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3FFFF) >> 4) << 32) | (1ull << 62);
}

// Accumulator fragment of m64nNk16 (fp32, N/2 registers per thread): warp w of the warpgroup holds
// rows 16w .. 16w + 15; lane (g = lane / 4, t = lane % 4) holds, for n8 block j, d[4j + e] =
// D[16w + g + 8·(e >> 1)][8j + 2t + (e & 1)] — the mma.m16n8 C layout, once per 8 columns.
// A fragment in registers (16-bit types, 4 registers per k16 slice): the same shape as the
// accumulator of a 64 × 16 tile (CUTLASS: ALayout_64x16 == CLayout_64x16): register i holds
// elements 2i, 2i + 1 of that pattern: (row g, k 2t..2t+1), (row g + 8, k 2t..), (row g, k 2t+8..),
// (row g + 8, k 2t+8..).
#define IB_WGMMA_D32                                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, " \
  "%26, %27, %28, %29, %30, %31}"
#define IB_WGMMA_D64                                                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, " \
  "%26, %27, "                                                                                                                \
  "%28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, "  \
  "%52, %53, "                                                                                                                \
  "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define IB_WGMMA_ACC32(d)                                                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),  \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), \
      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
      "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define IB_WGMMA_ACC64(d)                                                                                                    \
  IB_WGMMA_ACC32(d), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
      "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),   \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),   \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (64 × 128) = A·B (+ d when accumulate): A and B both from shared memory, both K-major
// (imm-trans-a = imm-trans-b = 0).
#define IB_WGMMA_SS_N128(TYPES)                                                                                                  \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n wgmma.mma_async.sync.aligned.m64n128k16.f32" TYPES " " IB_WGMMA_D64 \
               ", %64, %65, p, 1, 1, 0, 0;\n}\n"                                                                                 \
               : IB_WGMMA_ACC64(d)                                                                                               \
               : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)))
template <class T>
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  if constexpr (std::is_same_v<T, __half>)
    IB_WGMMA_SS_N128(".f16.f16");
  else
    IB_WGMMA_SS_N128(".bf16.bf16");
}
#undef IB_WGMMA_SS_N128

// d (64 × N) += A·B: A from registers (a[0..3], the A fragment of one k16 slice), B from shared
// memory MN-major (imm-trans-b = 1). scale-d is a predicate operand, set to true.
#define IB_WGMMA_RS(SHAPE, TYPES, D_LIST, ACC, A0, A1, A2, A3, DESC, ONE)                                                     \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, " ONE ", 0;\n wgmma.mma_async.sync.aligned." SHAPE ".f32" TYPES " " D_LIST \
               ", {" A0 ", " A1 ", " A2 ", " A3 "}, " DESC ", p, 1, 1, 1;\n}\n"                                               \
               : ACC(d)                                                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1))
template <class T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(N == 64 || N == 128, "wgmma_rs is instantiated for N = 64 and 128");
  if constexpr (N == 128) {
    if constexpr (std::is_same_v<T, __half>)
      IB_WGMMA_RS("m64n128k16", ".f16.f16", IB_WGMMA_D64, IB_WGMMA_ACC64, "%64", "%65", "%66", "%67", "%68", "%69");
    else
      IB_WGMMA_RS("m64n128k16", ".bf16.bf16", IB_WGMMA_D64, IB_WGMMA_ACC64, "%64", "%65", "%66", "%67", "%68", "%69");
  } else {
    if constexpr (std::is_same_v<T, __half>)
      IB_WGMMA_RS("m64n64k16", ".f16.f16", IB_WGMMA_D32, IB_WGMMA_ACC32, "%32", "%33", "%34", "%35", "%36", "%37");
    else
      IB_WGMMA_RS("m64n64k16", ".bf16.bf16", IB_WGMMA_D32, IB_WGMMA_ACC32, "%32", "%33", "%34", "%35", "%36", "%37");
  }
}
#undef IB_WGMMA_RS

// ---- the two warpgroup GEMMs of attention ----
// s (64 × 128 scores, accumulator layout) = A·Bᵀ over K = D: A = the warpgroup's 64 rows of a
// panel tile with kARows rows per panel (a points at the first of the 64 rows, a multiple of 8),
// B = the 128 rows of a panel tile with kBRows rows per panel. Both are K-major: a k16 slice is
// 32 bytes of every row, slice kk at byte 32·(kk % 4) of panel kk / 4. Issues D/16 wgmmas, the
// first overwriting s; the caller fences, commits and waits.
template <class T, int D, int kARows, int kBRows>
__device__ __forceinline__ void warpgroup_scores(float (&s)[64], uint32_t a, uint32_t b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t off = static_cast<uint32_t>(32 * (kk % 4));
    const uint64_t da = smem_desc_sw128(a + (kk / 4) * kARows * 128 + off, 16, 1024);
    const uint64_t db = smem_desc_sw128(b + (kk / 4) * kBRows * 128 + off, 16, 1024);
    wgmma_ss_n128<T>(s, da, db, kk > 0);
  }
}

// o (64 × N, accumulator layout) += P·V: P (64 × K) as A fragments in registers, one group of 4
// per k16 slice; V = K rows × N columns of a panel tile with kVRows rows per panel, MN-major
// (N contiguous): slice kk is rows 16kk .. 16kk + 15, i.e. two 8-row atoms (SBO = 1024) from
// byte 2048·kk of every panel, the next 64 columns one panel (LBO = kVRows·128 bytes) further.
template <class T, int N, int K, int kVRows>
__device__ __forceinline__ void warpgroup_pv(float (&o)[N / 2], const uint32_t (&p)[K / 16][4], uint32_t v) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) wgmma_rs<T, N>(o, p[kk], smem_desc_sw128(v + kk * 16 * 128, kVRows * 128, 1024));
}

// The accumulators of a 64 × N score tile as the A fragments of P·V (16-bit P): k16 slice kk is
// n8 blocks 2kk and 2kk + 1, and the A register order (row g, row g + 8) × (k 2t, k 2t + 8) is
// the accumulator order d[8kk + 0..3] then d[8kk + 4..7], so each register packs two neighbours.
template <class T, int N>
__device__ __forceinline__ void scores_to_a_fragments(const float (&s)[N / 2], uint32_t (&p)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    p[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
    p[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
    p[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
    p[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

#endif  // IB_SM90A

}  // namespace ib::sm90
