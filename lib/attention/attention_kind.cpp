// Kind `attention` (§8.1): standard attention against FlashAttention on one layer's attention.
#include "core/registry.h"

namespace ib::attention {
namespace {

KindInfo attention_kind() {
  KindInfo k;
  k.name = "attention";
  k.group = "attention";
  k.doc = "One layer's attention O = softmax(scale·Q·Kᵀ)·V over [batch][heads][seq][head_dim] tensors. Every "
          "variant is checked against a float64 reference (relative L2 over every row, or 64 sampled rows when large) "
          "with its output poisoned first; FLOPs = 4·head_dim per visible (query, key) pair.";
  k.keys = {
      key_spec("batch", ParamType::Int, "sequences", Value(int64_t{1}), 1.0),
      key_spec("heads", ParamType::Int, "query heads", Value(int64_t{32}), 1.0),
      key_spec("kv_heads", ParamType::Int, "key/value heads (grouped-query attention); 0 = heads", Value(int64_t{0}), 0.0),
      key_spec("head_dim", ParamType::Int, "dimension of a head", Value(int64_t{128}), 1.0, 1024.0),
      key_spec("seq", ParamType::Int, "keys (context length)", Value(int64_t{2048}), 1.0),
      key_spec("seq_q", ParamType::Int, "queries; 0 = seq (prefill). Causal masks align bottom-right", Value(int64_t{0}), 0.0),
      key_spec("causal", ParamType::Bool, "causal mask (query i sees keys j <= i + seq - seq_q)", Value(true)),
      key_spec("window", ParamType::Int,
               "causal only: a sliding window (Mistral) — query i sees only the last `window` keys up to its diagonal; 0 = none "
               "(flash1 has none)",
               Value(int64_t{0}), 0.0),
      enum_key("dtype", "element type of Q, K, V, O (fp32 accumulation)", "bf16", {"bf16", "fp16"}),
      key_spec("score_table", ParamType::Bool, "add the chapter's computed n×n matrix sizes to each row", Value(false)),
  };
  k.memory_saving = true;
  k.variants = {
      {"standard", Backend::Cuda,
       "three passes: S = scale·Q·Kᵀ (cuBLAS strided-batched GEMM, bf16/fp16 out) -> row softmax kernel writing P "
       "(causal mask applied there) -> O = P·V (cuBLAS); S and P are n×n per head in HBM"},
      {"flash1", Backend::Cuda,
       "FlashAttention-1 structure: one block per (batch, head), K/V tiles outer, Q tiles inner, running output and "
       "softmax statistics re-read and re-written in HBM for every K/V tile"},
      {"flash2", Backend::Cuda,
       "FlashAttention-2 structure: blocks over query tiles × heads × batch, Q in registers, K/V tiles double-buffered "
       "through shared memory (cp.async), mma.sync m16n8k16 tensor cores, deferred rescaling, causal tiles skipped"},
      {"reference", Backend::Cpu, "float64, one query row at a time: the correctness oracle"},
      {"cpu_standard", Backend::Cpu, "the three passes on the CPU: our SGEMM, a row softmax, our SGEMM; S and P materialised (fp32)"},
      {"cpu_flash", Backend::Cpu, "the flash algorithm on the CPU: 48×64 tiles through the SGEMM micro-kernel, online softmax, one tile of scores per thread (fp32)"},
  };
  return k;
}

const KindRegistration registration(attention_kind());

}  // namespace
}  // namespace ib::attention
