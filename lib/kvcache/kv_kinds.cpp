// Kinds `kv-quant` and `kv-paged` (§8.3): decode attention over a bf16, FP8, INT8, int4 or int2
// (KIVI) KV cache, contiguous or paged (int4/int2: contiguous only). The variants are declared beside
// their code: cuda_kv_decode.cpp and cpu_kv_decode.cpp.
#include "core/registry.h"
#include "kvcache/decode_problem.h"
#include "numerics/kv_format.h"
#include "kvcache/kv_kinds.h"

namespace ib::kvcache {

std::vector<std::string> quant_variant_keys(bool cuda, KvFormat format) {
  std::vector<std::string> keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "block_size"};
  if (cuda) keys.push_back("splits");
  if (is_kivi(format)) keys.push_back(kivi_group_key(format));
  return keys;
}

std::vector<KeySpec> decode_keys(bool paged_kind) {
  std::vector<KeySpec> k = {
      key_spec("batch", ParamType::Int, "sequences decoded together (one query token each)", Value(int64_t{1}), 1.0),
      key_spec("heads", ParamType::Int, "query heads", Value(int64_t{32}), 1.0),
      key_spec("kv_heads", ParamType::Int, "key/value heads (grouped-query attention); 0 = heads", Value(int64_t{0}), 0.0),
      key_spec("head_dim", ParamType::Int, "dimension of a head", Value(int64_t{128}), 1.0, 1024.0),
      key_spec("context", ParamType::Int, "tokens in the cache of the longest sequence", Value(int64_t{4096}), 1.0),
      key_spec("ragged", ParamType::Bool, "sequence lengths vary in (context/2, context] (sequence 0 has context)", Value(false)),
      key_spec("block_size", ParamType::Int,
               paged_kind ? "tokens per KV block of the paged variants"
                          : "0: contiguous cache; > 0: paged with blocks of this many tokens",
               Value(int64_t{paged_kind ? 16 : 0}), paged_kind ? 1.0 : 0.0, 4096.0),
      key_spec("splits", ParamType::Int, "CUDA: blocks per (sequence, kv head) of the split-K kernel; 0 = enough to fill the GPU",
               Value(int64_t{0}), 0.0, 1024.0),
  };
  if (paged_kind) k.push_back(enum_key("kv_dtype", "element type of the cache", "bf16", {"bf16", "fp8", "int8"}));
  if (!paged_kind)
    for (KvFormat f : {KvFormat::INT4, KvFormat::INT2})
      k.push_back(key_spec(kivi_group_key(f), ParamType::Int,
                           std::string(to_string(f)) +
                               " (KIVI): G, tokens per key group (per-channel scales) and channels per value group (per-token "
                               "scales); the last length mod G tokens stay bf16",
                           Value(int64_t{kKiviGroup}), 2.0, 1024.0));
  return k;
}

namespace {

const char* kDecodeDoc =
    "Decode attention: one query token per sequence over its KV cache (split-K / flash-decoding), the memory-bound step "
    "of generation. The cache is filled by the variant's own quantize-on-append path from the same bf16 values; the gate "
    "checks the stored bytes against the host quantizer, then the output against float64 attention over the dequantized "
    "cache (rel L2 ≤ 1e-2); the format's cost in accuracy is reported against float64 attention over the original bf16 "
    "values. GB/s = K/V bytes (elements + scales) + q + out per step; FLOPs = 4·head_dim per (query head, key).";

KindInfo quant_kind() {
  KindInfo k;
  k.name = "kv-quant";
  k.smallest = "heads: 2\nhead_dim: 32\ncontext: 64\n";
  k.group = "kvcache";
  k.doc = std::string(kDecodeDoc) + " Variants differ by the cache format; `block_size` > 0 runs them over block tables.";
  k.keys = decode_keys(false);
  return k;
}

KindInfo paged_kind() {
  KindInfo k;
  k.name = "kv-paged";
  k.smallest = "heads: 2\nhead_dim: 32\ncontext: 64\n";
  k.group = "kvcache";
  k.doc = std::string(kDecodeDoc) +
          " PagedAttention: the paged variants read K/V through per-sequence block tables "
          "made by the block manager (blocks scattered over the pool); the contiguous ones from one buffer per sequence.";
  k.keys = decode_keys(true);
  return k;
}

const KindRegistration quant_registration(quant_kind());
const KindRegistration paged_registration(paged_kind());

}  // namespace
}  // namespace ib::kvcache
