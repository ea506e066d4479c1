// Quantize-on-append for an int4 / int2 (KIVI) cache: completed key groups quantized per channel,
// their values per token, the rest of a group kept in the bf16 residual. Its own file: decode
// only reads the cache.
#include "kv_decode.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kv_decode_internal.cuh"
#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/kv_format.h"

namespace ib {

using namespace detail;

namespace {

// v1: grid (key groups the append touches, kv_heads, batch), one thread per channel (blockDim =
// head_dim, whole warps). Launched twice: `close` quantizes the groups the append completes (the
// keys of channel c by thread c over the group's tokens, each token's values by the lanes of its
// channel group, meeting through xor-shuffles of width G), then the tokens of an incomplete last
// group are copied to the residual (after the first launch has read the residual it replaces).
// The 8/B codes of a byte come from as many neighbouring lanes (shuffled down to the first).
struct KiviAppendArgs {
  KiviCacheView c;
  int key_groups;
  const uint16_t* k_new;  // [batch][kv_heads][n_tokens][head_dim]
  const uint16_t* v_new;
  int n_tokens;
  const int32_t* first;
  const int32_t* count;
};

// Channel ch's code into its byte of a packed row: the first lane of every 8/bits writes the byte.
__device__ __forceinline__ void put_code(uint8_t* row, int ch, int bits, uint32_t code) {
  const int per = 8 / bits;
  uint32_t byte = code;
  for (int i = 1; i < per; ++i) byte |= __shfl_down_sync(0xffffffffu, code, i) << (i * bits);
  if (ch % per == 0) row[ch / per] = static_cast<uint8_t>(byte);
}

__global__ void kivi_append_kernel(const KiviAppendArgs a, bool close) {
  const KiviCacheView& c = a.c;
  const int b = blockIdx.z, kvh = blockIdx.y, ch = threadIdx.x;
  const int D = c.head_dim, G = c.group;
  const int f = a.first[b], end = f + a.count[b];
  const int j = f / G + static_cast<int>(blockIdx.x), gt0 = j * G;
  if (a.count[b] <= 0 || gt0 >= end) return;  // block-uniform
  const size_t seq_head = static_cast<size_t>(b) * c.kv_heads + kvh;
  const bool complete = gt0 + G <= end;
  auto fresh = [&](const uint16_t* src, int t) { return src[(seq_head * a.n_tokens + (t - f)) * D + ch]; };
  if (!close) {
    if (complete) return;
    for (int t = max(f, gt0); t < end; ++t) {
      const size_t at = (seq_head * G + (t - gt0)) * D + ch;
      c.k_residual[at] = fresh(a.k_new, t);
      c.v_residual[at] = fresh(a.v_new, t);
    }
    return;
  }
  if (!complete) return;
  auto value = [&](const uint16_t* res, const uint16_t* src, int t) {
    return bf16_bits_to_float(t < f ? res[(seq_head * G + (t - gt0)) * D + ch] : fresh(src, t));
  };
  const int bits = c.bits;
  const size_t row_bytes = static_cast<size_t>(D) * bits / 8;
  // Keys: channel ch over the group's G tokens.
  float lo = value(c.k_residual, a.k_new, gt0), hi = lo;
  for (int t = gt0 + 1; t < gt0 + G; ++t) {
    const float x = value(c.k_residual, a.k_new, t);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  }
  const kvcache::KiviRange kr = kvcache::kivi_range(lo, hi, bits);
  c.k_params[(seq_head * a.key_groups + j) * D + ch] = kr.scale | (static_cast<uint32_t>(kr.zero) << 16);
  const float kscale = fp16_bits_to_float(kr.scale), kzero = fp16_bits_to_float(kr.zero);
  for (int t = gt0; t < gt0 + G; ++t) {
    const uint32_t code = kvcache::kivi_quantize(value(c.k_residual, a.k_new, t), kscale, kzero, bits);
    put_code(c.k_codes + (seq_head * c.capacity + t) * row_bytes, ch, bits, code);
  }
  // Values: token t, the G channels of ch's group.
  for (int t = gt0; t < gt0 + G; ++t) {
    const float x = value(c.v_residual, a.v_new, t);
    float vlo = x, vhi = x;
    for (int off = G / 2; off > 0; off >>= 1) {
      vlo = fminf(vlo, __shfl_xor_sync(0xffffffffu, vlo, off));
      vhi = fmaxf(vhi, __shfl_xor_sync(0xffffffffu, vhi, off));
    }
    const kvcache::KiviRange vr = kvcache::kivi_range(vlo, vhi, bits);
    const size_t row = seq_head * c.capacity + t;
    if (ch % G == 0) c.v_params[row * (D / G) + ch / G] = vr.scale | (static_cast<uint32_t>(vr.zero) << 16);
    const uint32_t code = kvcache::kivi_quantize(x, fp16_bits_to_float(vr.scale), fp16_bits_to_float(vr.zero), bits);
    put_code(c.v_codes + row * row_bytes, ch, bits, code);
  }
}

}  // namespace

void launch_kivi_append(const KiviCacheView& cache, const uint16_t* k_new, const uint16_t* v_new, int n_tokens,
                        const int32_t* first, const int32_t* count, cudaStream_t stream) {
  if (cache.batch * cache.kv_heads == 0 || n_tokens == 0) return;
  if (cache.head_dim % 32 != 0 || cache.head_dim > 1024 || (cache.group != 8 && cache.group != 16 && cache.group != 32) ||
      (cache.bits != 4 && cache.bits != 2))
    throw std::invalid_argument(kivi_name(cache.bits) +
                                " append needs head_dim a multiple of 32 (<= 1024), group 8, 16 or 32 and 4 or 2 bits");
  const KiviAppendArgs a{cache, (cache.capacity + cache.group - 1) / cache.group, k_new, v_new, n_tokens, first, count};
  const dim3 grid(static_cast<unsigned>(n_tokens / cache.group + 2), static_cast<unsigned>(cache.kv_heads),
                  static_cast<unsigned>(cache.batch));
  kivi_append_kernel<<<grid, static_cast<unsigned>(cache.head_dim), 0, stream>>>(a, true);
  IB_CUDA_CHECK_LAUNCH();
  kivi_append_kernel<<<grid, static_cast<unsigned>(cache.head_dim), 0, stream>>>(a, false);
  IB_CUDA_CHECK_LAUNCH();
}

}  // namespace ib
