// Kinds `kv-quant` and `kv-paged` (§8.3): decode attention over a bf16, FP8, INT8, int4 or int2
// (KIVI) KV cache, contiguous or paged (int4/int2: contiguous only). The variants live in cpu_kv_decode.cpp
// and cuda_kv_decode.cpp.
#include "core/registry.h"
#include "kvcache/decode_problem.h"
#include "numerics/kv_format.h"
#include "kvcache/kv_kinds.h"

namespace ib::kvcache {

std::vector<KeySpec> decode_keys(bool paged_kind) {
  std::vector<KeySpec> k = {
      key_spec("batch", ParamType::Int, "sequences decoded together (one query token each)", Value(int64_t{1}), 1.0),
      key_spec("heads", ParamType::Int, "query heads", Value(int64_t{32}), 1.0),
      key_spec("kv_heads", ParamType::Int, "key/value heads (grouped-query attention); 0 = heads", Value(int64_t{0}), 0.0),
      key_spec("head_dim", ParamType::Int, "dimension of a head", Value(int64_t{128}), 1.0, 1024.0),
      key_spec("context", ParamType::Int, "tokens in the cache of the longest sequence", Value(int64_t{4096}), 1.0),
      key_spec("ragged", ParamType::Bool, "sequence lengths vary in (context/2, context] (sequence 0 has context)", Value(false)),
      key_spec("block_size", ParamType::Int, paged_kind ? "tokens per KV block of the paged variants"
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
  k.group = "kvcache";
  k.doc = std::string(kDecodeDoc) + " Variants differ by the cache format; `block_size` > 0 runs them over block tables.";
  k.keys = decode_keys(false);
  const std::vector<std::string> cpu_keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "block_size"};
  const std::vector<std::string> cuda_keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "block_size", "splits"};
  std::vector<std::string> cpu_int4_keys = cpu_keys, cuda_int4_keys = cuda_keys;
  cpu_int4_keys.push_back("int4_group");
  cuda_int4_keys.push_back("int4_group");
  std::vector<std::string> cpu_int2_keys = cpu_keys, cuda_int2_keys = cuda_keys;
  cpu_int2_keys.push_back("int2_group");
  cuda_int2_keys.push_back("int2_group");
  k.variants = {
      {"bf16", Backend::Cuda, "bf16 cache (2 bytes/element): the baseline", cuda_keys},
      {"fp8", Backend::Cuda, "FP8 e4m3 cache, one scale per (sequence, kv head) for K and V, dequantized in registers", cuda_keys},
      {"int8", Backend::Cuda, "INT8 cache, one scale per (token, kv head) for K and V, dequantized in registers", cuda_keys},
      {"int4", Backend::Cuda,
       "int4 KIVI cache: keys per channel and values per token (fp16 scale and zero per group of int4_group), the last "
       "length mod int4_group tokens bf16; contiguous only",
       cuda_int4_keys},
      {"int2", Backend::Cuda,
       "int2 KIVI cache (the paper's 2-bit setting): the int4 layout with 4 codes per byte, fp16 scale and zero per group "
       "of int2_group, the last length mod int2_group tokens bf16; contiguous only",
       cuda_int2_keys},
      {"cpu_bf16", Backend::Cpu, "bf16 cache on the CPU: the baseline (threads over sequence × kv head × split)", cpu_keys},
      {"cpu_fp8", Backend::Cpu, "FP8 e4m3 cache on the CPU (per-head scales)", cpu_keys},
      {"cpu_int8", Backend::Cpu, "INT8 cache on the CPU (per-token scales)", cpu_keys},
      {"cpu_int4", Backend::Cpu, "int4 KIVI cache on the CPU (keys per channel, values per token, bf16 residual; contiguous only)",
       cpu_int4_keys},
      {"cpu_int2", Backend::Cpu, "int2 KIVI cache on the CPU (2-bit codes, 4 per byte; otherwise as cpu_int4)", cpu_int2_keys},
  };
  return k;
}

KindInfo paged_kind() {
  KindInfo k;
  k.name = "kv-paged";
  k.group = "kvcache";
  k.doc = std::string(kDecodeDoc) + " PagedAttention: the paged variants read K/V through per-sequence block tables "
          "made by the block manager (blocks scattered over the pool); the contiguous ones from one buffer per sequence.";
  k.keys = decode_keys(true);
  const std::vector<std::string> cpu_keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "block_size", "kv_dtype"};
  std::vector<std::string> contiguous_keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "splits", "kv_dtype"};
  std::vector<std::string> cpu_contiguous_keys = {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "kv_dtype"};
  k.variants = {
      {"contiguous", Backend::Cuda, "one [kv_heads][context][head_dim] buffer per sequence: the baseline", contiguous_keys},
      {"paged", Backend::Cuda, "blocks of block_size tokens through a block table (PagedAttention)", {}},
      {"cpu_contiguous", Backend::Cpu, "contiguous cache on the CPU: the baseline", cpu_contiguous_keys},
      {"cpu_paged", Backend::Cpu, "paged cache on the CPU", cpu_keys},
  };
  return k;
}

const KindRegistration quant_registration(quant_kind());
const KindRegistration paged_registration(paged_kind());

}  // namespace
}  // namespace ib::kvcache
