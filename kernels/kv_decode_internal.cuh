// What the split-K decode files share: launch constants, the kernels' arguments, the log-sum-exp
// merge of two softmax summaries and the per-format kernel pickers, declared here and defined with
// their kernels (kv_decode_kernel.cuh, kv_decode_kivi.cuh), one format per instance file.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

#include "kv_decode.h"
#include "numerics/cuda_check.h"

namespace ib::detail {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMinSplitTokens = 256;  // fewer tokens per split and the merge costs more than it balances
constexpr int kMaxAutoSplits = 256;
constexpr int kMaxSplits = 4096;  // the merge kernel keeps one weight per split in shared memory
constexpr float kLog2e = 1.4426950408889634f;

// q and acc take 2·G·(16 / element bytes) registers per lane: 8 heads of bf16 or 4 of the
// 1-byte formats fit without spilling; larger groups run in several head chunks.
template <KvElem E>
constexpr int max_group() {
  return E == KvElem::BF16 ? 8 : 4;
}

// n / d and n % d for n < 2^31 and a divisor fixed per launch (the block size of a paged cache):
// a multiply-high and a shift instead of a ~20-instruction integer division per key.
struct FastDiv {
  uint32_t d = 1, mul = 0, shr = 0;
};

struct DecodeArgs {
  const uint8_t* k;
  const uint8_t* v;
  const float* k_scale;
  const float* v_scale;
  const int32_t* block_table;  // paged: [batch][max_blocks]
  int max_blocks, block_size;
  FastDiv block_div;
  int capacity;  // contiguous: tokens per (sequence, kv head)
  const uint16_t* q;
  uint16_t* out;
  const int32_t* lengths;
  int heads, kv_heads, group, hchunks, splits;
  float q_scale;  // softmax scale · log2 e: scores in base 2
  float* ws_o;    // [batch][heads][splits][D]
  float* ws_ml;   // [batch][heads][splits][2]
};

using DecodeKernel = void (*)(DecodeArgs);
// The kernel for a format (E), layout, head_dim and heads per block; defined in
// kv_decode_kernel.cuh and instantiated once per format in kv_decode_inst_<format>.cu.
template <KvElem E>
DecodeKernel pick_layout(bool paged, int d, int g);

// Merges (mo, lo, acco) into (m, l, acc), base-2 softmax summaries; an empty side (m = -inf)
// gets factor 0 and two empty sides stay empty.
template <int N>
__device__ __forceinline__ void merge_summary(float& m, float& l, float (&acc)[N], float mo, float lo, const float (&acco)[N]) {
  const float mx = fmaxf(m, mo);
  const float ref = mx == -INFINITY ? 0.0f : mx;
  const float fa = exp2f(m - ref), fb = exp2f(mo - ref);
  l = l * fa + lo * fb;
#pragma unroll
  for (int e = 0; e < N; ++e) acc[e] = acc[e] * fa + acco[e] * fb;
  m = mx;
}

// ---- int4 / int2 (KIVI) ----

constexpr int kKiviWarps = 4;
constexpr int kKiviThreads = kKiviWarps * 32;

// "int4" / "int2": the format a KIVI cache of `bits` holds, for messages.
std::string kivi_name(int bits);

struct KiviArgs {
  const uint8_t* k_codes;
  const uint8_t* v_codes;
  const uint32_t* k_params;
  const uint32_t* v_params;
  const uint16_t* k_res;
  const uint16_t* v_res;
  int capacity, group, key_groups;  // key_groups: ceil(capacity / group)
  const uint16_t* q;
  uint16_t* out;
  const int32_t* lengths;
  int heads, kv_heads, gqa, hchunks, splits;
  float q_scale;  // softmax scale · log2 e
  float* ws_o;
  float* ws_ml;
};

using KiviKernel = void (*)(KiviArgs);
// The kernel for B bits, head_dim and heads per block; defined in kv_decode_kivi.cuh and
// instantiated once per code width in kv_decode_inst_int<B>.cu.
template <int B>
KiviKernel kivi_pick_dim(int head_dim, int g);

// ---- what the split-K launches (bf16/fp8/int8 and int4) share ----

// The splits a launch uses: p.splits, or `choose(p, SM count)` when it is 0.
template <class P, class Choose>
int launch_splits(const P& p, Choose choose, const char* what) {
  int splits = p.splits;
  if (splits == 0) {
    int dev = 0, sms = 0;
    IB_CUDA_CHECK(cudaGetDevice(&dev));
    IB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    splits = choose(p, sms);
  }
  if (splits > 1 && !p.workspace) throw std::invalid_argument(std::string(what) + " with splits > 1 needs a workspace");
  return splits;
}

// The query, output and split-K fields of a kernel's arguments.
template <class Args, class P>
void set_split_args(Args& a, const P& p, int batch, int kv_heads, int head_dim, int splits) {
  a.q = p.q;
  a.out = p.out;
  a.lengths = p.lengths;
  a.heads = p.heads;
  a.kv_heads = kv_heads;
  a.splits = splits;
  a.q_scale = p.scale * kLog2e;
  if (splits > 1) {
    a.ws_o = p.workspace;
    a.ws_ml = p.workspace + static_cast<size_t>(batch) * p.heads * splits * head_dim;
  }
}

// The partials of `splits` blocks per (sequence, head) merged into out (nothing when splits = 1).
void launch_merge_partials(const float* ws_o, const float* ws_ml, int splits, int batch, int heads, int head_dim, uint16_t* out,
                           cudaStream_t stream);

}  // namespace ib::detail
