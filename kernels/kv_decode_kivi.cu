// Decode attention over an int4 / int2 (KIVI) cache, contiguous (split-K): the launcher (support,
// split choice, workspace, kernel choice). The kernel is in kv_decode_kivi.cuh, compiled per code
// width in kv_decode_inst_int4.cu / kv_decode_inst_int2.cu; the merge in kv_decode_merge.cu.
#include "kv_decode.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kv_decode_internal.cuh"
#include "numerics/cuda_check.h"

namespace ib {

using namespace detail;

namespace detail {

std::string kivi_name(int bits) { return "int" + std::to_string(bits); }

}  // namespace detail

namespace {

constexpr int kKiviMaxHeads = 8;

int kivi_heads_per_block(int gqa) {
  int g = 1;
  while (g < gqa && g < kKiviMaxHeads) g *= 2;
  return g;
}

int kivi_head_chunks(const KiviDecodeParams& p) {
  const int gqa = p.heads / p.cache.kv_heads;
  const int g = kivi_heads_per_block(gqa);
  return (gqa + g - 1) / g;
}

KiviKernel kivi_kernel_for(const KiviDecodeParams& p) {
  const int g = kivi_heads_per_block(p.heads / p.cache.kv_heads);
  return p.cache.bits == 2 ? kivi_pick_dim<2>(p.cache.head_dim, g) : kivi_pick_dim<4>(p.cache.head_dim, g);
}

}  // namespace

std::string kivi_decode_unsupported(const KiviDecodeParams& p) {
  const KiviCacheView& c = p.cache;
  if (c.bits != 4 && c.bits != 2) return "KIVI decode supports 4-bit (int4) and 2-bit (int2) codes";
  const std::string name = kivi_name(c.bits);
  if (c.batch < 1 || p.heads < 1 || c.kv_heads < 1) return name + " decode needs batch, heads and kv_heads >= 1";
  if (p.heads % c.kv_heads != 0) return name + " decode needs heads to be a multiple of kv_heads";
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) return name + " decode supports head_dim 64, 128 and 256";
  if (c.group != 8 && c.group != 16 && c.group != 32)
    return name + " on CUDA supports " + name + "_group 8, 16 and 32 (a value group is a power-of-two run of a warp's lanes)";
  if (c.batch > 65535) return name + " decode supports at most 65535 sequences per launch";
  if (static_cast<int64_t>(c.kv_heads) * kivi_head_chunks(p) > 65535)
    return name + " decode supports at most 65535 (kv head, head chunk) blocks";
  if (p.splits < 0 || p.splits > kMaxSplits) return name + " decode needs splits in 0..4096";
  return {};
}

int kivi_decode_splits(const KiviDecodeParams& p, int sms) {
  if (std::string why = kivi_decode_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  int per_sm = 0;
  IB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kivi_kernel_for(p), kKiviThreads, 0));
  const int64_t slots = static_cast<int64_t>(std::max(sms, 1)) * std::max(per_sm, 1);
  const int64_t per_split = static_cast<int64_t>(p.cache.batch) * p.cache.kv_heads * kivi_head_chunks(p);
  const int64_t by_tokens = std::max<int64_t>(1, (p.max_length + kMinSplitTokens - 1) / kMinSplitTokens);
  return static_cast<int>(std::clamp<int64_t>(slots / per_split, 1, std::min<int64_t>(by_tokens, kMaxAutoSplits)));
}

size_t kivi_decode_workspace_floats(const KiviDecodeParams& p, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(p.cache.batch) * p.heads * splits * (p.cache.head_dim + 2);
}

void launch_kivi_decode(const KiviDecodeParams& p, cudaStream_t stream) {
  if (std::string why = kivi_decode_unsupported(p); !why.empty()) throw std::invalid_argument(why);
  const KiviCacheView& c = p.cache;
  const int splits = launch_splits(p, kivi_decode_splits, (kivi_name(c.bits) + " decode").c_str());
  KiviArgs a{};
  a.k_codes = c.k_codes;
  a.v_codes = c.v_codes;
  a.k_params = c.k_params;
  a.v_params = c.v_params;
  a.k_res = c.k_residual;
  a.v_res = c.v_residual;
  a.capacity = c.capacity;
  a.group = c.group;
  a.key_groups = (c.capacity + c.group - 1) / c.group;
  set_split_args(a, p, c.batch, c.kv_heads, c.head_dim, splits);
  a.gqa = p.heads / c.kv_heads;
  a.hchunks = kivi_head_chunks(p);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(c.kv_heads * a.hchunks), static_cast<unsigned>(c.batch));
  const KiviKernel kernel = kivi_kernel_for(p);
  kernel<<<grid, kKiviThreads, 0, stream>>>(a);
  IB_CUDA_CHECK_LAUNCH();
  launch_merge_partials(a.ws_o, a.ws_ml, splits, c.batch, p.heads, c.head_dim, p.out, stream);
}

}  // namespace ib
