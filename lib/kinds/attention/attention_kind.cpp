// Kind `attention` (§8.1): standard attention against FlashAttention on one layer's attention,
// with PyTorch SDPA as an optional peer. The variants are declared beside their code:
// cuda_attention.cpp, cpu_attention.cpp and torch_peer.cpp.
#include "core/registry.h"
#include "kinds/attention/attention_keys.h"

namespace ib::attention {

const ParamSet<AttentionKeys>& attention_keys() {
  using P = AttentionKeys;
  static const ParamSet<AttentionKeys> set =
      ParamSet<AttentionKeys>()
          .add(&P::batch, key_spec("batch", ParamType::Int, "sequences", Value(int64_t{1}), 1.0))
          .add(&P::heads, key_spec("heads", ParamType::Int, "query heads", Value(int64_t{32}), 1.0))
          .add(&P::kv_heads, key_spec("kv_heads", ParamType::Int, "key/value heads (grouped-query attention); 0 = heads",
                                      Value(int64_t{0}), 0.0))
          .add(&P::head_dim, key_spec("head_dim", ParamType::Int, "dimension of a head", Value(int64_t{128}), 1.0, 1024.0))
          .add(&P::seq, key_spec("seq", ParamType::Int, "keys (context length)", Value(int64_t{2048}), 1.0))
          .add(&P::seq_q, key_spec("seq_q", ParamType::Int, "queries; 0 = seq (prefill). Causal masks align bottom-right",
                                   Value(int64_t{0}), 0.0))
          .add(&P::causal,
               key_spec("causal", ParamType::Bool, "causal mask (query i sees keys j <= i + seq - seq_q)", Value(true)))
          .add(&P::window, key_spec("window", ParamType::Int,
                                    "causal only: a sliding window (Mistral) — query i sees only the last `window` keys up to "
                                    "its diagonal; 0 = none "
                                    "(flash1 has none)",
                                    Value(int64_t{0}), 0.0))
          .add(&P::dtype, enum_key("dtype", "element type of Q, K, V, O (fp32 accumulation)", "bf16", {"bf16", "fp16"}),
               [](const std::string& s) { return s == "fp16" ? DType::F16 : DType::BF16; })
          .add(&P::score_table,
               key_spec("score_table", ParamType::Bool, "add the chapter's computed n×n matrix sizes to each row", Value(false)))
          .add(
              &P::python,
              key_spec("python", ParamType::String,
                       "torch peers: the interpreter that runs the compiled-in scripts/torch_sdpa_peer.py (searched in PATH); no "
                       "interpreter or no torch in it makes the peer rows unsupported",
                       Value(std::string("python3"))))
          .add(
              &P::peer_timeout,
              key_spec("peer_timeout", ParamType::Seconds,
                       "torch peers: time allowed for python's start, the inputs and the check, on top of the row's timeout; the "
                       "process is killed past it (a FAILED row)",
                       Value(120.0), 1e-3));
  return set;
}

std::vector<std::string> attention_shape_keys() {
  std::vector<std::string> keys;
  for (const auto& name : attention_keys().names())
    if (name != "python" && name != "peer_timeout") keys.push_back(name);
  return keys;
}

namespace {

KindInfo attention_kind() {
  KindInfo k;
  k.name = "attention";
  k.smallest = "heads: 2\nkv_heads: 1\nhead_dim: 32\nseq: 64\n";
  k.group = "attention";
  k.doc =
      "One layer's attention O = softmax(scale·Q·Kᵀ)·V over [batch][heads][seq][head_dim] tensors. Every "
      "variant is checked against a float64 reference (relative L2 over every row, or 64 sampled rows when large) "
      "with its output poisoned first; FLOPs = 4·head_dim per visible (query, key) pair.";
  k.keys = attention_keys().keys();
  k.memory_saving = true;
  k.roofline = true;
  return k;
}

const KindRegistration registration(attention_kind());

}  // namespace
}  // namespace ib::attention
