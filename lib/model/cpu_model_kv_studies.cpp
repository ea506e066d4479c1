// The CPU engine's KV-cache studies: eviction marks (set_kept, set_kept_head) and KV formats
// (set_kv_format, the rounding of K/V on write, KIVI's groups, the amax calibration).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "model/cpu_model_internal.h"
#include "numerics/half.h"

namespace ib::model::cpu_detail {

void CpuModel::set_kept(int seq, int pos, bool kept) {
  Sequence& s = at(seq);
  contiguous_only(s, "set_kept");
  if (pos < 0 || pos >= s.capacity)
    throw std::invalid_argument(fmt::format("position {} of a {}-token sequence", pos, s.capacity));
  if (!kept && s.evicted.empty()) s.evicted.assign(static_cast<size_t>(s.capacity), 0);
  if (!s.evicted.empty()) s.evicted[static_cast<size_t>(pos)] = kept ? 0 : 1;
}
void CpuModel::set_kept_head(int seq, int layer, int kv_head, int pos, bool kept) {
  Sequence& s = at(seq);
  contiguous_only(s, "set_kept_head");
  if (layer < 0 || layer >= c_.layers || kv_head < 0 || kv_head >= c_.kv_heads || pos < 0 || pos >= s.capacity)
    throw std::invalid_argument(
        fmt::format("set_kept_head: layer {}, kv head {}, position {} of a {}-layer, {}-kv-head, {}-token sequence", layer,
                    kv_head, pos, c_.layers, c_.kv_heads, s.capacity));
  if (!kept && s.evicted_head.empty())
    s.evicted_head.assign(static_cast<size_t>(c_.layers) * c_.kv_heads * static_cast<size_t>(s.capacity), 0);
  if (!s.evicted_head.empty())
    s.evicted_head[(static_cast<size_t>(layer) * c_.kv_heads + static_cast<size_t>(kv_head)) * static_cast<size_t>(s.capacity) +
                   static_cast<size_t>(pos)] = kept ? 0 : 1;
}
void CpuModel::set_kv_format(int seq, kvcache::KvFormat format, const std::vector<float>& fp8_scales) {
  Sequence& s = at(seq);
  contiguous_only(s, "set_kv_format");
  if (s.length > 0) throw std::logic_error("set_kv_format: the sequence already holds tokens");
  if (kvcache::is_kivi(format) && c_.head_dim % kivi_value_group() != 0)
    throw std::invalid_argument(fmt::format("set_kv_format: {} needs head_dim ({}) a multiple of {}", kvcache::to_string(format),
                                            c_.head_dim, kivi_value_group()));
  const size_t n = static_cast<size_t>(c_.layers) * 2 * static_cast<size_t>(c_.kv_heads);
  if (format == kvcache::KvFormat::FP8 && fp8_scales.size() != n)
    throw std::invalid_argument(fmt::format("set_kv_format: fp8 needs {} scales, got {}", n, fp8_scales.size()));
  s.kv_format = format;
  s.fp8_scale = fp8_scales;
}
std::vector<float> CpuModel::kv_amax(int seq) const {
  const Sequence& s = at(seq);
  contiguous_only(s, "kv_amax");
  const size_t per = static_cast<size_t>(s.capacity) * static_cast<size_t>(c_.head_dim);
  const size_t used = static_cast<size_t>(s.length) * static_cast<size_t>(c_.head_dim);
  std::vector<float> amax(static_cast<size_t>(c_.layers) * 2 * static_cast<size_t>(c_.kv_heads), 0.0f);
  for (size_t i = 0; i < amax.size(); ++i)  // the cache is [layers][K, V][kv_heads][capacity][head_dim]
    for (size_t e = 0; e < used; ++e) amax[i] = std::max(amax[i], std::fabs(s.cache[i * per + e]));
  return amax;
}
std::vector<float> CpuModel::kv_channel_amax(int seq) const {
  const Sequence& s = at(seq);
  contiguous_only(s, "kv_channel_amax");
  const size_t D = static_cast<size_t>(c_.head_dim), per = static_cast<size_t>(s.capacity) * D;
  std::vector<float> amax(static_cast<size_t>(c_.layers) * 2 * static_cast<size_t>(c_.kv_heads) * D, 0.0f);
  for (size_t i = 0; i < amax.size() / D; ++i)  // the cache is [layers][K, V][kv_heads][capacity][head_dim]
    for (size_t t = 0; t < static_cast<size_t>(s.length); ++t)
      for (size_t d = 0; d < D; ++d) amax[i * D + d] = std::max(amax[i * D + d], std::fabs(s.cache[i * per + t * D + d]));
  return amax;
}

// Rounds the K and V rows ([rows][kv_dim], after RoPE) of sequences with a KV format through
// it, in place, before they are written to the cache.
void CpuModel::round_kv(int l, int rows, const std::vector<int>& seq_of, float* k, float* v) {
  const int d = c_.head_dim, kvd = c_.kv_dim(), kvh = c_.kv_heads;
  for (int r = 0; r < rows; ++r) {
    Sequence& s = at(seq_of[static_cast<size_t>(r)]);
    if (!s.kv_format) continue;
    const float* scales =
        s.fp8_scale.empty() ? nullptr : s.fp8_scale.data() + static_cast<size_t>(l) * 2 * static_cast<size_t>(kvh);
    for (int kh = 0; kh < kvh; ++kh) {
      round_row(*s.kv_format, k + static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d, d, scales ? scales[kh] : 0.0f);
      round_row(*s.kv_format, v + static_cast<size_t>(r) * kvd + static_cast<size_t>(kh) * d, d,
                scales ? scales[kvh + kh] : 0.0f);
    }
  }
}
void CpuModel::round_row(kvcache::KvFormat f, float* x, int d, float fp8_scale) {
  using kvcache::KvFormat;
  if (f == KvFormat::BF16 || kvcache::is_kivi(f)) {  // int4/int2: bf16 until the key group completes (kivi_close_group)
    for (int e = 0; e < d; ++e) x[e] = bf16_bits_to_float(float_to_bf16_bits(x[e]));
  } else if (f == KvFormat::FP8) {
    for (int e = 0; e < d; ++e) x[e] = kvcache::fp8_dequantize(kvcache::fp8_quantize(x[e], fp8_scale), fp8_scale);
  } else {
    float amax = 0;
    for (int e = 0; e < d; ++e) amax = std::max(amax, std::fabs(x[e]));
    const float scale = kvcache::int8_scale(amax);
    for (int e = 0; e < d; ++e) x[e] = kvcache::int8_dequantize(kvcache::int8_quantize(x[e], scale), scale);
  }
}
// int4 / int2 (KIVI, kv_format.h): when position p completes a key group of G = kKiviGroup tokens, the
// group's keys are re-quantized per channel and its values per token (groups of
// kivi_value_group() channels) in place; until then they stay bf16 (the residual).
int CpuModel::kivi_value_group() const { return std::min(kvcache::kKiviGroup, c_.head_dim); }
void CpuModel::kivi_close_group(Sequence& s, int l, int p) {
  const int G = kvcache::kKiviGroup, d = c_.head_dim, bits = kvcache::kivi_bits(*s.kv_format);
  if ((p + 1) % G != 0) return;
  const size_t first = static_cast<size_t>(p + 1 - G) * static_cast<size_t>(d);
  for (int kh = 0; kh < c_.kv_heads; ++kh) {
    kvcache::kivi_round_key_group(cache_k(s, l, kh) + first, G, d, d, bits);
    for (int t = 0; t < G; ++t)
      kvcache::kivi_round_value_row(cache_v(s, l, kh) + first + static_cast<size_t>(t) * d, d, kivi_value_group(), bits);
  }
}

}  // namespace ib::model::cpu_detail
