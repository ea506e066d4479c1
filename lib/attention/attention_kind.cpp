// Kind `attention` (§8.1): standard attention against FlashAttention on one layer's attention,
// with PyTorch SDPA as an optional peer (torch_peer.cpp).
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
      key_spec("python", ParamType::String,
               "torch peers: the interpreter that runs the compiled-in scripts/torch_sdpa_peer.py (searched in PATH); no "
               "interpreter or no torch in it makes the peer rows unsupported",
               Value(std::string("python3"))),
      key_spec("peer_timeout", ParamType::Seconds,
               "torch peers: time allowed for python's start, the inputs and the check, on top of the row's timeout; the "
               "process is killed past it (a FAILED row)",
               Value(120.0), 1e-3),
  };
  k.memory_saving = true;
  // The shape keys every variant reads; the torch peers also read where python is.
  const std::vector<std::string> shape = {"batch", "heads", "kv_heads", "head_dim", "seq", "seq_q", "causal", "window", "dtype", "score_table"};
  std::vector<std::string> peer = shape;
  peer.insert(peer.end(), {"python", "peer_timeout"});
  const std::string torch_doc =
      "PyTorch's scaled_dot_product_attention on the same shape, in its own python process (key `python`; "
      "scripts/torch_sdpa_peer.py is compiled in): checked against torch's own float64 reference on its own inputs, then "
      "timed with CUDA events under the row's stopping rule; GQA through enable_gqa (K/V repeated before timing where the "
      "backend refuses it, said in the note), bottom-right causal through is_causal or the lower-right CausalBias, a "
      "window as a boolean mask; unsupported (saying why) without torch, without a GPU, or when the backend refuses the shape";
  k.variants = {
      {"standard", Backend::Cuda,
       "three passes: S = scale·Q·Kᵀ (cuBLAS strided-batched GEMM, bf16/fp16 out) -> row softmax kernel writing P "
       "(causal mask applied there) -> O = P·V (cuBLAS); S and P are n×n per head in HBM",
       shape},
      {"flash1", Backend::Cuda,
       "FlashAttention-1 structure: one block per (batch, head), K/V tiles outer, Q tiles inner, running output and "
       "softmax statistics re-read and re-written in HBM for every K/V tile",
       shape},
      {"flash2", Backend::Cuda,
       "FlashAttention-2 structure: blocks over query tiles × heads × batch, Q in registers, K/V tiles double-buffered "
       "through shared memory (cp.async), mma.sync m16n8k16 tensor cores, deferred rescaling, causal tiles skipped",
       shape},
      {"flash3", Backend::Cuda,
       "FlashAttention-3 structure, Hopper (sm_90) only: a producer warp loads K/V tiles with TMA into a two-stage "
       "shared-memory ring (mbarriers), two consumer warpgroups run wgmma (S = Q·Kᵀ from shared memory, O += P·V with "
       "P in registers) and the online softmax, the softmax of one tile overlapping the P·V of the previous; "
       "unsupported on other GPUs",
       shape},
      {"torch_sdpa", Backend::Cuda, "torch's own choice of SDPA backend (the note says which it picked). " + torch_doc, peer},
      {"torch_sdpa_flash", Backend::Cuda, "torch SDPA forced to its FlashAttention-2 backend (sdpa_kernel)", peer},
      {"torch_sdpa_cudnn", Backend::Cuda, "torch SDPA forced to its cuDNN backend", peer},
      {"torch_sdpa_efficient", Backend::Cuda, "torch SDPA forced to its memory-efficient (xFormers) backend", peer},
      {"torch_sdpa_math", Backend::Cuda, "torch SDPA forced to its math backend (materialises the scores, as standard does)", peer},
      {"reference", Backend::Cpu, "float64, one query row at a time: the correctness oracle", shape},
      {"cpu_standard", Backend::Cpu, "the three passes on the CPU: our SGEMM, a row softmax, our SGEMM; S and P materialised (fp32)", shape},
      {"cpu_flash", Backend::Cpu, "the flash algorithm on the CPU: 48×64 tiles through the SGEMM micro-kernel, online softmax, one tile of scores per thread (fp32)", shape,
       false, "flash2"},  // the chapter's flash2 figures are this variant's on the CPU
      {"cpu_torch_sdpa", Backend::Cpu,
       "torch SDPA on the CPU, torch's own backend choice, fp32 on the rounded inputs (as cpu_flash) with our thread count, "
       "timed with perf_counter; otherwise as torch_sdpa",
       peer},
  };
  return k;
}

const KindRegistration registration(attention_kind());

}  // namespace
}  // namespace ib::attention
