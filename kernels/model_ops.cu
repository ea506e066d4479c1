// The element-wise kernels of the CUDA transformer engine: fill, embedding, residual add +
// RMSNorm, biases, the rows of a prefill chunk, layout change and SwiGLU. RoPE, attention and
// sampling have files of their own (model_ops_*.cu); everything here is memory- or launch-bound.
#include "model_ops.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "model_ops_internal.cuh"
#include "numerics/cuda_check.h"
#include "swiglu.cuh"

namespace ib {

using namespace detail;

namespace {

// =====================================================================================
// fill, embedding, RMSNorm, biases, prefill rows
// =====================================================================================

// v1: grid-stride store of one 16-bit pattern (load time only).
__global__ void fill_u16_kernel(uint16_t* dst, size_t count, uint16_t bits) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = bits;
}

// v1: one block of 256 threads per token row, a strided copy with widening to fp32. A decode
// step moves hidden × 6 bytes per row: nothing to optimise next to the weight reads.
__global__ void __launch_bounds__(256) embed_kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ tokens,
                                                    int hidden, int vocab, float* __restrict__ x) {
  const int r = blockIdx.x;
  const int32_t tok = tokens[r];
  const bool ok = tok >= 0 && tok < vocab;
  const uint16_t* src = table + static_cast<size_t>(ok ? tok : 0) * hidden;
  float* dst = x + static_cast<size_t>(r) * hidden;
  for (int d = threadIdx.x; d < hidden; d += blockDim.x) dst[d] = ok ? bf2f(src[d]) : 0.0f;
}

// v1: one block of 256 threads per row. Pass 1 adds the residual branch (if any), writes the sum
// back and accumulates Σx² per thread; a fixed-tree block reduction; pass 2 re-reads the row
// (the thread's own writes, from L1/L2) and writes bf16(x · inv_rms · w). Rows are ≤ 16 KiB of
// fp32, so the second read is cheap; the kernel is launch-bound at decode batch sizes.
constexpr int kNormThreads = 256;
__global__ void __launch_bounds__(kNormThreads)
    add_rmsnorm_kernel(float* __restrict__ x, const uint16_t* __restrict__ delta, const uint16_t* __restrict__ w, float eps,
                       int hidden, uint16_t* __restrict__ out) {
  __shared__ float red[32];
  const size_t off = static_cast<size_t>(blockIdx.x) * hidden;
  float* xr = x + off;
  float ss = 0.0f;
  for (int d = threadIdx.x; d < hidden; d += kNormThreads) {
    float v = xr[d];
    if (delta) {
      v += bf2f(delta[off + d]);
      xr[d] = v;
    }
    ss = fmaf(v, v, ss);
  }
  const float total = block_sum<kNormThreads>(ss, red);
  const float inv = 1.0f / sqrtf(total / static_cast<float>(hidden) + eps);
  for (int d = threadIdx.x; d < hidden; d += kNormThreads) out[off + d] = f2bf(xr[d] * inv * bf2f(w[d]));
}

// v1: grid-stride; y[r][i] += bias[i] (fp32 rows: the residual stream after o_proj / down_proj).
__global__ void add_bias_f32_kernel(float* __restrict__ y, const uint16_t* __restrict__ bias, int rows, int n) {
  const size_t total = static_cast<size_t>(rows) * n;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] += bf2f(bias[i % n]);
}

// v1: grid-stride; y[r][i] = bf16(y[r][i] + bias[i]) (bf16 rows: gate/up before SwiGLU).
__global__ void add_bias_bf16_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ bias, int rows, int n) {
  const size_t total = static_cast<size_t>(rows) * n;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    y[i] = f2bf(bf2f(y[i]) + bf2f(bias[i % n]));
}

// v1: one thread per row of a prefill chunk, so the chunk's attention rows never cross the bus.
__global__ void fill_attn_rows_kernel(AttnRow* rows, int n, uint16_t* cache, int capacity, int first_pos) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    AttnRow r;
    r.cache = cache;
    r.capacity = capacity;
    r.pos = first_pos + i;
    rows[i] = r;
  }
}

// =====================================================================================
// layout, SwiGLU
// =====================================================================================

// v1: grid-stride over 16-byte chunks (8 elements; D % 8 == 0, so a chunk never crosses a head).
__global__ void heads_to_rows_kernel(const uint4* __restrict__ src, int n_rows, int heads, int chunks_per_head,
                                     uint4* __restrict__ dst) {
  const size_t total = static_cast<size_t>(n_rows) * heads * chunks_per_head;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t c = i % chunks_per_head;
    const size_t h = (i / chunks_per_head) % heads;
    const size_t r = i / (static_cast<size_t>(chunks_per_head) * heads);
    dst[i] = src[(h * n_rows + r) * chunks_per_head + c];  // i = (r·heads + h)·chunks + c
  }
}

// v1: grid-stride, one output element per thread; fp32 math, one rounding.
__global__ void swiglu_kernel(const uint16_t* __restrict__ gu, int rows, int mlp, uint16_t* __restrict__ out) {
  const size_t total = static_cast<size_t>(rows) * mlp;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / mlp, j = i % mlp;
    const float g = bf2f(gu[r * 2 * mlp + j]);
    const float u = bf2f(gu[r * 2 * mlp + mlp + j]);
    out[i] = swiglu_bf16(g, u);
  }
}

unsigned grid_for(size_t total, int threads) {
  const size_t want = (total + threads - 1) / threads;
  return static_cast<unsigned>(want < 65536 ? (want > 0 ? want : 1) : 65536);
}

}  // namespace

// =====================================================================================
// launchers
// =====================================================================================

void launch_fill_u16(uint16_t* dst, size_t count, uint16_t bits, cudaStream_t stream) {
  if (count == 0) return;
  fill_u16_kernel<<<grid_for(count, 256), 256, 0, stream>>>(dst, count, bits);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_embed(const uint16_t* table, const int32_t* tokens, int rows, int hidden, int vocab, float* x, cudaStream_t stream) {
  if (rows <= 0) return;
  embed_kernel<<<static_cast<unsigned>(rows), 256, 0, stream>>>(table, tokens, hidden, vocab, x);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_add_rmsnorm(float* x, const uint16_t* delta, const uint16_t* w, float eps, int rows, int hidden, uint16_t* out,
                        cudaStream_t stream) {
  if (rows <= 0) return;
  add_rmsnorm_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(x, delta, w, eps, hidden, out);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_add_bias_f32(float* y, const uint16_t* bias, int rows, int n, cudaStream_t stream) {
  if (rows <= 0) return;
  add_bias_f32_kernel<<<grid_for(static_cast<size_t>(rows) * n, 256), 256, 0, stream>>>(y, bias, rows, n);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_add_bias_bf16(uint16_t* y, const uint16_t* bias, int rows, int n, cudaStream_t stream) {
  if (rows <= 0) return;
  add_bias_bf16_kernel<<<grid_for(static_cast<size_t>(rows) * n, 256), 256, 0, stream>>>(y, bias, rows, n);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_fill_attn_rows(AttnRow* rows, int n, uint16_t* cache, int capacity, int first_pos, cudaStream_t stream) {
  if (n <= 0) return;
  fill_attn_rows_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(rows, n, cache, capacity, first_pos);
  IB_CUDA_CHECK_LAUNCH();
}

void launch_heads_to_rows(const uint16_t* src, int n_rows, int heads, int head_dim, uint16_t* dst, cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (head_dim % 8 != 0) throw std::invalid_argument("heads_to_rows: head_dim must be a multiple of 8");
  const int chunks = head_dim / 8;
  const size_t total = static_cast<size_t>(n_rows) * heads * chunks;
  heads_to_rows_kernel<<<grid_for(total, 256), 256, 0, stream>>>(reinterpret_cast<const uint4*>(src), n_rows, heads, chunks,
                                                                 reinterpret_cast<uint4*>(dst));
  IB_CUDA_CHECK_LAUNCH();
}

void launch_swiglu(const uint16_t* gate_up, int rows, int mlp, uint16_t* out, cudaStream_t stream) {
  if (rows <= 0) return;
  const size_t total = static_cast<size_t>(rows) * mlp;
  swiglu_kernel<<<grid_for(total, 256), 256, 0, stream>>>(gate_up, rows, mlp, out);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
