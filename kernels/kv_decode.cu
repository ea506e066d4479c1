// Decode attention over a bf16 / FP8 e4m3 / INT8 KV cache, contiguous or paged (split-K
// flash-decoding): the launcher (support, split choice, workspace, kernel choice). The kernel is in
// kv_decode_kernel.cuh, compiled per format in kv_decode_inst_<format>.cu; the merge in kv_decode_merge.cu.
#include "kv_decode.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kv_decode_internal.cuh"
#include "numerics/cuda_check.h"

namespace ib {

using namespace detail;

namespace {

FastDiv make_fast_div(int divisor) {
  FastDiv f;
  f.d = static_cast<uint32_t>(divisor);
  if (f.d > 1) {
    uint32_t l = 0;
    while ((uint32_t{1} << l) < f.d) ++l;  // ceil(log2 d)
    f.mul = static_cast<uint32_t>(((uint64_t{1} << (31 + l)) + f.d - 1) / f.d);
    f.shr = l - 1;
  }
  return f;
}

// Query heads per block for a group: the next power of two, up to the format's maximum.
int heads_per_block(KvElem e, int group) {
  const int cap = e == KvElem::BF16 ? max_group<KvElem::BF16>() : max_group<KvElem::FP8>();
  int g = 1;
  while (g < group && g < cap) g *= 2;
  return g;
}

DecodeKernel decode_kernel_for(const KvDecodeParams& p) {
  const int g = heads_per_block(p.cache.elem, p.heads / p.cache.kv_heads);
  const bool paged = p.cache.block_table != nullptr;
  switch (p.cache.elem) {
    case KvElem::BF16:
      return pick_layout<KvElem::BF16>(paged, p.cache.head_dim, g);
    case KvElem::FP8:
      return pick_layout<KvElem::FP8>(paged, p.cache.head_dim, g);
    case KvElem::INT8:
      return pick_layout<KvElem::INT8>(paged, p.cache.head_dim, g);
  }
  throw std::logic_error("kv decode: unknown element type");
}

int head_chunks(const KvDecodeParams& p) {
  const int group = p.heads / p.cache.kv_heads;
  const int g = heads_per_block(p.cache.elem, group);
  return (group + g - 1) / g;
}

void require_supported(const KvDecodeParams& p) {
  if (std::string why = kv_decode_unsupported(p); !why.empty()) throw std::invalid_argument(why);
}

}  // namespace

std::string kv_decode_unsupported(const KvDecodeParams& p) {
  const KvCacheView& c = p.cache;
  if (c.batch < 1 || p.heads < 1 || c.kv_heads < 1) return "kv decode needs batch, heads and kv_heads >= 1";
  if (p.heads % c.kv_heads != 0) return "kv decode needs heads to be a multiple of kv_heads";
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    return "kv decode supports head_dim 64, 128 and 256 (one key is a power-of-two number of 16-byte lane slices)";
  if (c.batch > 65535) return "kv decode supports at most 65535 sequences per launch";
  if (static_cast<int64_t>(c.kv_heads) * head_chunks(p) > 65535)
    return "kv decode supports at most 65535 (kv head, head chunk) blocks";
  if (c.block_table && c.block_size < 1) return "kv decode needs block_size >= 1 for a paged cache";
  if (p.splits < 0 || p.splits > kMaxSplits) return "kv decode needs splits in 0..4096";
  return {};
}

int kv_decode_splits(const KvDecodeParams& p, int sms) {
  require_supported(p);
  // One wave: as many (sequence, kv head, head chunk, split) blocks as the GPU holds at once, so
  // all splits run together and finish together; never fewer than kMinSplitTokens per split.
  int per_sm = 0;
  IB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_kernel_for(p), kThreads, 0));
  const int64_t slots = static_cast<int64_t>(std::max(sms, 1)) * std::max(per_sm, 1);
  const int64_t per_split = static_cast<int64_t>(p.cache.batch) * p.cache.kv_heads * head_chunks(p);
  const int64_t by_tokens = std::max<int64_t>(1, (p.max_length + kMinSplitTokens - 1) / kMinSplitTokens);
  return static_cast<int>(std::clamp<int64_t>(slots / per_split, 1, std::min<int64_t>(by_tokens, kMaxAutoSplits)));
}

size_t kv_decode_workspace_floats(const KvDecodeParams& p, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(p.cache.batch) * p.heads * splits * (p.cache.head_dim + 2);
}

void launch_kv_decode(const KvDecodeParams& p, cudaStream_t stream) {
  require_supported(p);
  const KvCacheView& c = p.cache;
  const int splits = launch_splits(p, kv_decode_splits, "kv decode");

  DecodeArgs a{};
  a.k = static_cast<const uint8_t*>(c.k);
  a.v = static_cast<const uint8_t*>(c.v);
  a.k_scale = c.k_scale;
  a.v_scale = c.v_scale;
  a.block_table = c.block_table;
  a.max_blocks = c.max_blocks;
  a.block_size = c.block_size;
  a.block_div = make_fast_div(c.block_table ? c.block_size : 1);
  a.capacity = c.capacity;
  set_split_args(a, p, c.batch, c.kv_heads, c.head_dim, splits);
  a.group = p.heads / c.kv_heads;
  a.hchunks = head_chunks(p);

  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(c.kv_heads * a.hchunks), static_cast<unsigned>(c.batch));
  const DecodeKernel kernel = decode_kernel_for(p);
  kernel<<<grid, kThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
  launch_merge_partials(a.ws_o, a.ws_ml, splits, c.batch, p.heads, c.head_dim, p.out, stream);
}

}  // namespace ib
