// Kind `kv-memory` (§8.3's first table): the KV cache's size from the model's shape, computed,
// not measured: bytes/token = 2 · layers · kv_heads · head_dim · bytes(element) (+ the format's
// scales), per sequence (+ fp8's per-head scales, int4/int2's bf16 residual buffer), per batch, and the
// largest batch a card holds after the weights.
#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/memory.h"
#include "core/params.h"
#include "core/registry.h"
#include "core/sysinfo.h"
#include "model/config.h"
#include "numerics/kv_format.h"

namespace ib::kvcache {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Bytes of one token's K and V over every layer in format f, scales included (fp8's per-head
// scales and int4/int2's residual buffer belong to the sequence: see seq_bytes).
double token_bytes(const model::ModelConfig& m, KvFormat f) {
  const double per_head = m.head_dim * kv_element_bytes(f) + kv_scale_bytes_per_token_head(f, m.head_dim);
  return 2.0 * m.layers * m.kv_heads * per_head;
}

double seq_bytes(const model::ModelConfig& m, KvFormat f, int64_t seq) {
  double b = token_bytes(m, f) * static_cast<double>(seq);
  if (f == KvFormat::FP8) b += 2.0 * m.layers * m.kv_heads * sizeof(float);
  b += 2.0 * m.layers * m.kv_heads * kv_residual_bytes_per_seq_head(f, m.head_dim);
  return b;
}

// The kind's keys, bound to the fields they fill (core/params.h).
struct MemoryKeys {
  std::string model;
  KvFormat kv_dtype = KvFormat::BF16;
  int64_t seq = 0, batch = 0, card_memory = 0;
};

const ParamSet<MemoryKeys>& memory_keys() {
  using P = MemoryKeys;
  static const ParamSet<MemoryKeys> set =
      ParamSet<MemoryKeys>()
          .add(&P::model, enum_key("model", "engine preset", "llama2-7b", model::preset_names()))
          .add(&P::kv_dtype, enum_key("kv_dtype", "element type of the cache", "bf16", {"bf16", "fp8", "int8", "int4", "int2"}),
               [](const std::string& s) { return *kv_format_from_string(s); })
          .add(&P::seq, key_spec("seq", ParamType::Int, "tokens per sequence", Value(int64_t{4096}), 1.0))
          .add(&P::batch, key_spec("batch", ParamType::Int, "sequences", Value(int64_t{32}), 1.0))
          .add(&P::card_memory,
               key_spec("card_memory", ParamType::Bytes,
                        "memory the batch must fit in; 0 = the run's --memory-limit, else the GPU's memory, else the host's",
                        Value(int64_t{0}), 0.0));
  return set;
}

// The memory the batch must fit in: the key, else the run's --memory-limit, else the GPU's
// total memory, else (no GPU) the host's.
double card_bytes(const MemoryKeys& keys) {
  if (const int64_t k = keys.card_memory; k > 0) return static_cast<double>(k);
  if (const int64_t limit = device_memory().limit(); limit > 0) return static_cast<double>(limit);
  if (const int64_t gpu = cuda_memory_total_bytes(); gpu > 0) return static_cast<double>(gpu);
  return static_cast<double>(host_memory_total_bytes());
}

class Formula : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime&, uint64_t) override {
    const MemoryKeys keys = memory_keys().read(p);
    const auto m = model::preset(keys.model);
    if (!m) throw InputError("kv-memory: unknown model " + keys.model);
    m_ = *m;
    format_ = keys.kv_dtype;
    seq_ = keys.seq;
    batch_ = keys.batch;
    card_ = card_bytes(keys);
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    // The formula against the engine's own count of one token's K/V elements.
    const double elems = static_cast<double>(m_.kv_elems_per_token());
    const double want =
        elems * kv_element_bytes(format_) + 2.0 * m_.layers * m_.kv_heads * kv_scale_bytes_per_token_head(format_, m_.head_dim);
    const double err = std::fabs(per_token_ - want);
    return {err == 0, "bytes", err, 0, "bytes/token vs the engine's K/V elements per token × element + scale bytes"};
  }
  void run(BackendRuntime&) override {
    per_token_ = token_bytes(m_, format_);
    per_seq_ = seq_bytes(m_, format_, seq_);
    weights_ = static_cast<double>(m_.parameters()) * 2.0;
    const double room = card_ - weights_;
    max_batch_ = room > 0 ? std::floor(room / per_seq_) : 0;
    max_tokens_ = room > 0 ? std::floor(room / per_token_) : 0;
  }
  std::vector<Metric> metrics() const override {
    return {{"KV/token (formula)", per_token_ / 1024, "KiB"},
            {"KV/seq (formula)", per_seq_ / (1 << 20), "MiB"},
            {"KV batch (formula)", per_seq_ * static_cast<double>(batch_) / kGiB, "GiB"},
            {"vs bf16 (×)", seq_bytes(m_, KvFormat::BF16, seq_) / per_seq_, ""},
            {"weights bf16", weights_ / kGiB, "GiB"},
            {"card", card_ / kGiB, "GiB"},
            {"max batch at seq", max_batch_, ""},
            {"max tokens", max_tokens_, ""}};
  }

 private:
  model::ModelConfig m_;
  KvFormat format_ = KvFormat::BF16;
  int64_t seq_ = 0, batch_ = 0;
  double card_ = 0, per_token_ = 0, per_seq_ = 0, weights_ = 0, max_batch_ = 0, max_tokens_ = 0;
};

KindInfo memory_kind() {
  KindInfo k;
  k.name = "kv-memory";
  k.smallest = "batch: 1\n";
  k.group = "kvcache";
  k.doc =
      "The KV cache's size, computed from the model's shape (not measured): bytes/token = 2 · layers · kv_heads · "
      "head_dim · bytes(element) (int4: 1/2, int2: 1/4), plus int8's per-token scales and int4's and int2's (KIVI, "
      "groups of 32) fp16 scale + zero per group (4·head_dim/32 bytes per token for K and for V) and their bf16 "
      "residual buffer of 32 tokens per sequence and head; per sequence of `seq` tokens, per "
      "batch, and the largest batch at `seq` that fits the card after the bf16 weights (activations and workspace not "
      "counted). The check compares the formula with the engine's own K/V element count. A sample is the arithmetic.";
  k.keys = memory_keys().keys();
  return k;
}

const KindRegistration memory_registration(memory_kind());
const VariantRegistration reg_kv_memory_formula("kv-memory",
                                                {"formula", Backend::Cpu, "the size formula over the preset's shape", {}, true},
                                                make_variant<Formula>());

}  // namespace
}  // namespace ib::kvcache
