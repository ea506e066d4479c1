// The staged probes of kernels/hopper_probe.h: the wgmma GEMMs of flash3 on operands written by
// plain stores, and its TMA tile loads read back by plain loads. They call the same functions
// as the flash3 kernel (hopper.cuh), so what they prove holds for it.
#include "hopper_probe.h"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "attention.h"
#include "hopper.cuh"
#include "numerics/cuda_check.h"

namespace ib {

namespace {

constexpr int kProbeRows = 128;  // rows of every shared tile: the Q tile, a K or V tile

template <int D>
constexpr int wgmma_probe_smem() {
  return 3 * kProbeRows * D * 2 + 1024;  // A (a Q tile), B (a K tile), V; alignment slack
}

#if IB_SM90A
// Block-wide copy of a [128][D] row-major global tile into shared panels (plain 2-byte stores).
template <int D>
__device__ void store_panels(unsigned char* tile, const uint16_t* g) {
  for (int i = threadIdx.x; i < kProbeRows * D; i += blockDim.x)
    *reinterpret_cast<uint16_t*>(tile + sm90::panel_offset(kProbeRows, i / D, i % D)) = g[i];
}

// A 64 × N accumulator tile out to c[64][N] by the documented fragment layout.
template <int N>
__device__ void write_accumulators(const float (&acc)[N / 2], float* c) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < N / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[(16 * w + g + 8 * (e >> 1)) * N + 8 * j + 2 * t + (e & 1)] = acc[4 * j + e];
}
#endif

template <class T, int D>
__global__ void __launch_bounds__(128)
    wgmma_probe_kernel(int which, int a_row0, const uint16_t* a, const uint16_t* b, const uint16_t* v, float* c) {
#if IB_SM90A
  using namespace sm90;
  extern __shared__ uint4 probe_smem[];
  const AlignedSmem smem = align_smem_1024(probe_smem);
  unsigned char* const base_ptr = smem.ptr;
  constexpr uint32_t kTile = kProbeRows * D * 2;
  const uint32_t sA = smem.addr, sB = sA + kTile, sV = sA + 2 * kTile;
  const auto mode = static_cast<WgmmaProbe>(which);

  if (mode != WgmmaProbe::Pv) {
    store_panels<D>(base_ptr, a);
    store_panels<D>(base_ptr + kTile, b);
  }
  if (mode != WgmmaProbe::Scores) store_panels<D>(base_ptr + 2 * kTile, v);
  fence_proxy_async();  // plain stores, then the wgmmas' async-proxy reads
  __syncthreads();

  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float s[64];
  uint32_t p[kProbeRows / 16][4];
  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

  if (mode == WgmmaProbe::Pv) {
    // P straight from a[64][128] by the A-fragment layout: register i of slice kk holds
    // (row, k) = (16w + g + 8·(i & 1), 16kk + 2t + 8·(i >> 1)) and the next k.
    auto pair = [&](int row, int k) {
      return static_cast<uint32_t>(a[row * kProbeRows + k]) | (static_cast<uint32_t>(a[row * kProbeRows + k + 1]) << 16);
    };
#pragma unroll
    for (int kk = 0; kk < kProbeRows / 16; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) p[kk][i] = pair(16 * w + g + 8 * (i & 1), 16 * kk + 2 * t + 8 * (i >> 1));
  } else {
    wgmma_fence();
    warpgroup_scores<T, D, kProbeRows, kProbeRows>(s, sA + a_row0 * 128, sB);
    wgmma_commit();
    wgmma_wait<0>();
    fence_registers(s);
    if (mode == WgmmaProbe::Scores) {
      write_accumulators<kProbeRows>(s, c);
      return;
    }
    scores_to_a_fragments<T, kProbeRows>(s, p);
  }
  wgmma_fence();
  warpgroup_pv<T, D, kProbeRows, kProbeRows>(o, p, sV);
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(o);
  fence_registers(p);
  write_accumulators<D>(o, c);
#elif defined(__CUDA_ARCH__)
  (void)which, (void)a_row0, (void)a, (void)b, (void)v, (void)c;
  __trap();
#else
  (void)which, (void)a_row0, (void)a, (void)b, (void)v, (void)c;
#endif
}

struct TmaProbeArgs {
  TmaProbeTile tiles[kTmaProbeMaxTiles];
  int n_tiles;
};

template <int D>
__global__ void __launch_bounds__(128)
    tma_probe_kernel(const __grid_constant__ CUtensorMap map, const TmaProbeArgs args, uint16_t* out) {
#if IB_SM90A
  using namespace sm90;
  extern __shared__ uint4 probe_smem[];
  const AlignedSmem smem = align_smem_1024(probe_smem);
  const uint32_t base = smem.addr;
  const unsigned char* const base_ptr = smem.ptr;
  constexpr uint32_t kTile = kProbeRows * D * 2;
  const uint32_t bar = base + kTile;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    fence_barrier_init();
  }
  __syncthreads();
  for (int i = 0; i < args.n_tiles; ++i) {
    const TmaProbeTile tile = args.tiles[i];
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(bar, kTile);
#pragma unroll
      for (int p = 0; p < D / 64; ++p)
        tma_load_4d(base + p * kProbeRows * 128, &map, bar, 64 * p, tile.row0, tile.head, tile.batch);
    }
    mbar_wait(bar, static_cast<uint32_t>(i) & 1);
    for (int e = threadIdx.x; e < kProbeRows * D; e += blockDim.x)
      out[int64_t{i} * kProbeRows * D + e] =
          *reinterpret_cast<const uint16_t*>(base_ptr + panel_offset(kProbeRows, e / D, e % D));
    __syncthreads();  // every read of this tile before the next TMA overwrites it
  }
#elif defined(__CUDA_ARCH__)
  (void)map, (void)args, (void)out;
  __trap();
#else
  (void)map, (void)args, (void)out;
#endif
}

template <class T, int D>
void run_wgmma_probe(WgmmaProbe which, int a_row0, const void* a, const void* b, const void* v, float* c, cudaStream_t stream) {
  constexpr int smem = wgmma_probe_smem<D>();
  IB_CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  wgmma_probe_kernel<T, D><<<1, 128, smem, stream>>>(static_cast<int>(which), a_row0, static_cast<const uint16_t*>(a),
                                                     static_cast<const uint16_t*>(b), static_cast<const uint16_t*>(v), c);
  IB_CUDA_CHECK(cudaGetLastError());
}

template <int D>
void run_tma_probe(const CUtensorMap& map, const TmaProbeArgs& args, uint16_t* out, cudaStream_t stream) {
  constexpr int smem = kProbeRows * D * 2 + 8 + 1024;
  IB_CUDA_CHECK(cudaFuncSetAttribute(tma_probe_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  tma_probe_kernel<D><<<1, 128, smem, stream>>>(map, args, out);
  IB_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

std::string hopper_probe_unsupported() {
  AttentionParams p;  // a shape flash3 takes: what remains is the build and the device
  return flash3_unsupported(p);
}

void launch_wgmma_probe(WgmmaProbe which, int head_dim, bool fp16, int a_row0, const void* a, const void* b, const void* v,
                        float* c, cudaStream_t stream) {
  if (std::string why = hopper_probe_unsupported(); !why.empty()) throw std::invalid_argument(why);
  if ((head_dim != 64 && head_dim != 128) || (a_row0 != 0 && a_row0 != 64))
    throw std::invalid_argument("wgmma probe: head_dim 64 or 128, a_row0 0 or 64");
  if (head_dim == 64) {
    if (fp16)
      run_wgmma_probe<__half, 64>(which, a_row0, a, b, v, c, stream);
    else
      run_wgmma_probe<__nv_bfloat16, 64>(which, a_row0, a, b, v, c, stream);
  } else {
    if (fp16)
      run_wgmma_probe<__half, 128>(which, a_row0, a, b, v, c, stream);
    else
      run_wgmma_probe<__nv_bfloat16, 128>(which, a_row0, a, b, v, c, stream);
  }
}

void launch_tma_probe(const void* src, bool fp16, int head_dim, int rows, int heads, int batch, int64_t head_stride,
                      int64_t batch_stride, const TmaProbeTile* tiles, int n_tiles, uint16_t* out, cudaStream_t stream) {
  if (std::string why = hopper_probe_unsupported(); !why.empty()) throw std::invalid_argument(why);
  if ((head_dim != 64 && head_dim != 128) || n_tiles < 1 || n_tiles > kTmaProbeMaxTiles)
    throw std::invalid_argument("TMA probe: head_dim 64 or 128, 1 to 4 tiles");
  TmaProbeArgs args{};
  for (int i = 0; i < n_tiles; ++i) args.tiles[i] = tiles[i];
  args.n_tiles = n_tiles;
  const CUtensorMap map =
      sm90::make_panel_tensor_map(src, fp16, head_dim, rows, heads, batch, head_stride, batch_stride, kProbeRows);
  if (head_dim == 64)
    run_tma_probe<64>(map, args, out, stream);
  else
    run_tma_probe<128>(map, args, out, stream);
}

}  // namespace ib
