// What an engine may offer beyond the Model interface, each an optional capability: KV-cache
// eviction studies (kv-evict-model), KV-cache format studies (kv-quant-model) and LoRA adapters
// (the lora kind, serve). The CPU engine has all three, the CUDA engine none yet. A caller asks
// the engine for one (kv_eviction(model), ...), and an engine without it is refused there, once,
// saying what it lacks: the Model interface itself holds no study hook that throws.
#pragma once

#include <cstdint>
#include <vector>

#include "model/lora.h"
#include "model/model.h"
#include "numerics/kv_format.h"

namespace ib::model {

// What Model::record_attention keeps of a sequence's latest forward pass (its last token).
struct AttentionRecord {
  std::vector<float> weights;  // [positions up to the token]: softmax weights summed over layers and heads
  std::vector<float> output;   // [layers][q_dim]: each layer's attention output (before o_proj)
  // [layers][kv_heads][positions up to the token]: the weights summed over each kv head's group of
  // query heads (per-head eviction reads its own head's).
  std::vector<float> kv_head_weights;
};

// KV-cache eviction studies. Attention in `seq` skips the cached positions marked not kept; a
// position is kept again when a forward pass writes it, so a token always sees itself. The K/V
// stay allocated: this emulates a cache that dropped them.
class KvEvictionStudy {
 public:
  virtual ~KvEvictionStudy() = default;
  virtual void set_kept(int seq, int pos, bool kept) = 0;
  // The same for one (layer, kv head) only: H2O as its paper runs it, each head keeping its own
  // set. A position is attended by a head when neither set_kept nor set_kept_head hides it.
  virtual void set_kept_head(int seq, int layer, int kv_head, int pos, bool kept) = 0;
  // While on, each forward pass of `seq` records its last token's attention (attention_record).
  virtual void record_attention(int seq, bool on) = 0;
  virtual const AttentionRecord& attention_record(int seq) const = 0;
};

// KV-cache format studies: the K/V that `seq`'s forward passes write from now on are rounded
// through `format` – the values a cache stored in it returns: bf16; fp8 e4m3 with the static
// scales `fp8_scales` [layers][K, V][kv_heads] (values past 448·scale saturate); int8 with
// per-token, per-head scales. Call before the first forward pass.
class KvFormatStudy {
 public:
  virtual ~KvFormatStudy() = default;
  virtual void set_kv_format(int seq, kvcache::KvFormat format, const std::vector<float>& fp8_scales = {}) = 0;
  // The largest |K| and |V| a sequence's cache holds per [layers][K, V][kv_heads]: the
  // calibration of fp8 scales.
  virtual std::vector<float> kv_amax(int seq) const = 0;
  // The largest |K| and |V| per channel over the sequence's cached positions, [layers][K, V]
  // [kv_heads][head_dim]: the per-channel key outliers that motivate KIVI's per-channel keys.
  virtual std::vector<float> kv_channel_amax(int seq) const = 0;
};

// LoRA serving (model/lora.h). add_adapter makes an adapter resident (its A/B allocated through
// the memory tracker; an adapter that does not fit the model is an InputError) and returns its
// id, 0, 1, ... in order. set_adapter(seq, id) gives the sequence's rows that adapter's update
// y += scaling·B·(A·x) in every pass from now on, the rows of one adapter gathered into one
// low-rank product per projection (Punica's SGMV, S-LoRA); -1, a new sequence's, is the base
// model. merge_adapter(id) writes W + scaling·B·A into the engine's projections instead, a
// single-adapter server's way (-1 restores the base weights); while an adapter is merged, a
// pass over a sequence whose adapter is another one throws std::logic_error.
class LoraAdapters {
 public:
  virtual ~LoraAdapters() = default;
  virtual int add_adapter(const LoraAdapter& a) = 0;
  virtual void set_adapter(int seq, int adapter) = 0;
  virtual void merge_adapter(int adapter) = 0;
  virtual int merged_adapter() const = 0;
  virtual int64_t adapter_bytes() const = 0;
};

// The engine's capability; std::runtime_error naming it where the engine has none.
KvEvictionStudy& kv_eviction(Model& m);
KvFormatStudy& kv_format_study(Model& m);
LoraAdapters& lora_adapters(Model& m);
// Whether the engine has LoRA adapters (a server refuses adapters up front without them).
bool has_lora_adapters(const Model& m);

}  // namespace ib::model
