// Filling a bf16 / FP8 e4m3 / INT8 KV cache: staging of the counter-based inputs, FP8 calibration
// (amax) and quantize-on-append, contiguous or paged. Its own file: decode only reads the cache.
#include "kv_decode.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/kv_format.h"
#include "numerics/random.h"

namespace ib {

namespace {

// =====================================================================================
// filling the cache
// =====================================================================================

// v1: grid-stride, one thread per element of dst [batch·kv_heads][chunk][head_dim].
__global__ void kv_fill_chunk_kernel(uint16_t* __restrict__ dst, size_t count, int head_dim, int chunk, int t0, int context,
                                     uint64_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const size_t row = i / head_dim;  // (sequence · kv_heads + kv head) · chunk + token
    const size_t c = i % head_dim;
    const size_t bh = row / chunk, t = t0 + row % chunk;
    dst[i] = float_to_bf16_bits(random_uniform(seed, (bh * context + t) * head_dim + c));
  }
}

// v1: blockIdx.x = sequence · kv_heads + kv head; the blocks of y stride over its count[b]
// tokens; a block reduces max |x| of K and of V and raises the running amax once each.
constexpr int kAmaxThreads = 256;

__global__ void __launch_bounds__(kAmaxThreads)
    kv_amax_kernel(float* k_amax, float* v_amax, const uint16_t* __restrict__ k_new, const uint16_t* __restrict__ v_new,
                   int kv_heads, int head_dim, int n_tokens, const int32_t* __restrict__ count) {
  __shared__ float s_k[kAmaxThreads / 32], s_v[kAmaxThreads / 32];
  const size_t bh = blockIdx.x;
  const int b = static_cast<int>(bh / kv_heads);
  const size_t elems = static_cast<size_t>(count[b]) * head_dim;  // the first count[b] tokens of the head
  const size_t base = bh * n_tokens * head_dim;
  float mk = 0.0f, mv = 0.0f;
  const size_t stride = static_cast<size_t>(gridDim.y) * blockDim.x;
  for (size_t i = blockIdx.y * static_cast<size_t>(blockDim.x) + threadIdx.x; i < elems; i += stride) {
    mk = fmaxf(mk, fabsf(bf16_bits_to_float(k_new[base + i])));
    mv = fmaxf(mv, fabsf(bf16_bits_to_float(v_new[base + i])));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    mk = fmaxf(mk, __shfl_xor_sync(0xffffffffu, mk, off));
    mv = fmaxf(mv, __shfl_xor_sync(0xffffffffu, mv, off));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    s_k[warp] = mk;
    s_v[warp] = mv;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kAmaxThreads / 32; ++w) {
      mk = fmaxf(mk, s_k[w]);
      mv = fmaxf(mv, s_v[w]);
    }
    // Magnitudes are >= 0, where the order of the float bits is the order of the values.
    atomicMax(reinterpret_cast<unsigned int*>(k_amax + bh), __float_as_uint(mk));
    atomicMax(reinterpret_cast<unsigned int*>(v_amax + bh), __float_as_uint(mv));
  }
}

// Quantizes one token-head row of head_dim values into the cache with the rules of
// kv_format.h (the same functions the host quantizer runs, so the bytes are identical).
template <KvElem E>
__device__ void store_row(const KvCacheView& c, const uint16_t* __restrict__ src, uint8_t* dst, float* scales, size_t seq_head,
                          size_t row, int lane) {
  const int D = c.head_dim;
  if constexpr (E == KvElem::BF16) {
    uint16_t* d16 = reinterpret_cast<uint16_t*>(dst) + row * D;
    for (int i = lane; i < D; i += 32) d16[i] = src[i];
  } else if constexpr (E == KvElem::FP8) {
    const float scale = scales[seq_head];
    for (int i = lane; i < D; i += 32) dst[row * D + i] = kvcache::fp8_quantize(bf16_bits_to_float(src[i]), scale);
  } else {
    float amax = 0.0f;
    for (int i = lane; i < D; i += 32) amax = fmaxf(amax, fabsf(bf16_bits_to_float(src[i])));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float scale = kvcache::int8_scale(amax);
    if (lane == 0) scales[row] = scale;
    for (int i = lane; i < D; i += 32)
      dst[row * D + i] = static_cast<uint8_t>(kvcache::int8_quantize(bf16_bits_to_float(src[i]), scale));
  }
}

// v1: one warp per (sequence, kv head, new token): the warp finds the token's cache row (through
// the block table when paged) and writes its K and V there.
constexpr int kAppendWarps = 8;

struct AppendArgs {
  KvCacheView c;
  const uint16_t* k_new;  // [batch][kv_heads][n_tokens][head_dim]
  const uint16_t* v_new;
  int n_tokens;
  const int32_t* first;  // [batch]
  const int32_t* count;  // [batch]
};

template <KvElem E>
__global__ void __launch_bounds__(kAppendWarps * 32) kv_append_kernel(const AppendArgs a) {
  const KvCacheView& c = a.c;
  const int lane = threadIdx.x & 31;
  const size_t r = static_cast<size_t>(blockIdx.x) * kAppendWarps + (threadIdx.x >> 5);
  if (r >= static_cast<size_t>(c.batch) * c.kv_heads * a.n_tokens) return;  // the whole warp
  const size_t seq_head = r / a.n_tokens;
  const int i = static_cast<int>(r % a.n_tokens);
  const int b = static_cast<int>(seq_head / c.kv_heads), kvh = static_cast<int>(seq_head % c.kv_heads);
  if (i >= a.count[b]) return;  // the whole warp
  const int t = a.first[b] + i;
  size_t row;
  if (c.block_table) {
    const int32_t page = c.block_table[static_cast<size_t>(b) * c.max_blocks + t / c.block_size];
    row = (static_cast<size_t>(page) * c.kv_heads + kvh) * c.block_size + t % c.block_size;
  } else {
    row = seq_head * c.capacity + t;
  }
  const size_t src = r * c.head_dim;
  store_row<E>(c, a.k_new + src, static_cast<uint8_t*>(c.k), c.k_scale, seq_head, row, lane);
  store_row<E>(c, a.v_new + src, static_cast<uint8_t*>(c.v), c.v_scale, seq_head, row, lane);
}

unsigned grid_for(size_t work, int per_block) {
  const size_t wanted = (work + per_block - 1) / per_block;
  return static_cast<unsigned>(std::min<size_t>(std::max<size_t>(wanted, 1), 65535));
}

}  // namespace

void launch_kv_fill_chunk(uint16_t* dst, int batch, int kv_heads, int head_dim, int chunk, int t0, int context, uint64_t seed,
                          cudaStream_t stream) {
  const size_t count = static_cast<size_t>(batch) * kv_heads * chunk * head_dim;
  if (count == 0) return;
  kv_fill_chunk_kernel<<<grid_for(count, 256), 256, 0, stream>>>(dst, count, head_dim, chunk, t0, context, seed);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_kv_append(const KvCacheView& cache, const uint16_t* k_new, const uint16_t* v_new, int n_tokens, const int32_t* first,
                      const int32_t* count, cudaStream_t stream) {
  const size_t rows = static_cast<size_t>(cache.batch) * cache.kv_heads * n_tokens;
  if (rows == 0) return;
  const size_t blocks = (rows + kAppendWarps - 1) / kAppendWarps;
  if (blocks > 0x7fffffffu) throw std::invalid_argument("kv append: too many rows for one launch");
  const unsigned grid = static_cast<unsigned>(blocks);
  const AppendArgs a{cache, k_new, v_new, n_tokens, first, count};
  switch (cache.elem) {
    case KvElem::BF16:
      kv_append_kernel<KvElem::BF16><<<grid, kAppendWarps * 32, 0, stream>>>(a);
      break;
    case KvElem::FP8:
      kv_append_kernel<KvElem::FP8><<<grid, kAppendWarps * 32, 0, stream>>>(a);
      break;
    case KvElem::INT8:
      kv_append_kernel<KvElem::INT8><<<grid, kAppendWarps * 32, 0, stream>>>(a);
      break;
  }
  IB_CUDA_CHECK_LAUNCH();
}

void launch_kv_amax(float* k_amax, float* v_amax, const uint16_t* k_new, const uint16_t* v_new, int batch, int kv_heads,
                    int head_dim, int n_tokens, const int32_t* count, cudaStream_t stream) {
  if (batch * kv_heads == 0 || n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(batch * kv_heads), grid_for(static_cast<size_t>(n_tokens) * head_dim, 4 * kAmaxThreads));
  kv_amax_kernel<<<grid, kAmaxThreads, 0, stream>>>(k_amax, v_amax, k_new, v_new, kv_heads, head_dim, n_tokens, count);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
