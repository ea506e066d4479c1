// Kinds `kv-quant` and `kv-paged` (§8.3): decode attention over a bf16, FP8, INT8, int4 or int2
// (KIVI) KV cache, contiguous or paged (int4/int2: contiguous only). Their keys: kv_decode_keys.h;
// the variants are declared beside their code: cpu_kv_decode.cpp and cuda_kv_decode.cpp; the
// problem, its inputs and its gate are the library's (kvcache/decode_problem.h).
#include "core/registry.h"
#include "kinds/kvcache/kv_decode_keys.h"

namespace ib::kvcache {
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
  k.roofline = true;
  k.doc = std::string(kDecodeDoc) + " Variants differ by the cache format; `block_size` > 0 runs them over block tables.";
  k.keys = kv_quant_keys().keys();
  return k;
}

KindInfo paged_kind() {
  KindInfo k;
  k.name = "kv-paged";
  k.smallest = "heads: 2\nhead_dim: 32\ncontext: 64\n";
  k.group = "kvcache";
  k.roofline = true;
  k.doc = std::string(kDecodeDoc) +
          " PagedAttention: the paged variants read K/V through per-sequence block tables "
          "made by the block manager (blocks scattered over the pool); the contiguous ones from one buffer per sequence.";
  k.keys = kv_paged_keys().keys();
  return k;
}

const KindRegistration quant_registration(quant_kind());
const KindRegistration paged_registration(paged_kind());

}  // namespace
}  // namespace ib::kvcache
