// What the pieces of the CPU engine (cpu_model*.cpp, one noun each) share: its weights, its
// sequences and the CpuModel class whose members they define. Not a public interface.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/memory.h"
#include "model/engine_sequences.h"
#include "model/engine_studies.h"
#include "model/model.h"
#include "model/token_tree.h"
#include "numerics/packed_gemv.h"

namespace ib::model::cpu_detail {

// The CPU engine: the model in float32 on bf16-rounded weights, the reference the CUDA engine is
// tested against and the backend of every model-driven experiment on a machine without a GPU.
// Weights are kept transposed ([in][out]) so that both the GEMM of a prefill (our SGEMM) and the
// GEMV of a decode step (an axpy over contiguous rows) stream them in order.

using Buf = HostBuffer<float>;

struct Layer {
  Buf in_norm, post_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, bo, wg, wu, wd, bg, bu, bd;
  // merge_adapter's W + scaling·B·A per projection ([in][out], as the base), allocated on the
  // first merge of an adapter targeting it; used while that module is merged.
  std::array<Buf, kLoraModules> merged;
  // CpuMatmul::Packed: the decode GEMV's copies (empty under Reference). Q|K|V and gate|up are
  // one matrix each, so a step reads its activations once per pair and splits one parallel call.
  PackedWeights qkv, o, gate_up, down;
};

// A resident adapter, transposed for the engine's matmul ([in][out] operands): at [in][rank],
// bt [rank][out] per [layer][module].
struct CpuAdapter {
  int rank = 0;
  float scaling = 0;
  std::array<bool, kLoraModules> targets{};
  std::vector<std::array<Buf, kLoraModules>> at, bt;
};

struct Sequence {
  bool live = false;
  int capacity = 0, length = 0;
  Buf cache;        // [layers][2][kv_heads][capacity][head_dim]; empty when paged
  int blocks = -1;  // paged: the sequence's id in the block manager (its table), -1 when contiguous
  // Eviction studies: evicted[p] != 0 hides position p from attention (empty until a position is
  // marked, so the common path pays nothing); the recorded attention of the last token.
  std::vector<uint8_t> evicted;
  std::vector<uint8_t> evicted_head;  // [layers][kv_heads][capacity], empty until set_kept_head hides one
  bool recording = false;
  AttentionRecord record;
  std::vector<float> head_weights;  // [heads][positions]: one layer's weights while recording
  // Format studies: K/V rounded through kv_format on write; fp8 scales [layers][2][kv_heads].
  std::optional<kvcache::KvFormat> kv_format;
  std::vector<float> fp8_scale;
  TokenTree tree;    // open while a tree verification is in progress (prefill_tree)
  int adapter = -1;  // LoRA: the resident adapter its rows use (-1: the base model)
};

// Y[rows][out] = X[rows][in] · Wt[in][out] (+ bias): up to 32 rows a GEMV whose every row's result
// is the same bit for bit whatever the other rows (cpu_model_forward.cpp), past that our SGEMM,
// or with `blas` OpenBLAS's.
void matmul(const float* x, int rows, int in, const float* wt, int out, const float* bias, float* y, bool blas = false);
void add_bias(float* y, int rows, int out, const float* bias);  // y[r] += bias

// One (layer, K or V, kv head) of a sequence's cache as attention reads it: a contiguous
// [positions][head_dim] run, or blocks of `block_size` positions through the block table.
struct KvRows {
  float* base = nullptr;  // contiguous: position 0; paged: position 0 of block 0 of this run of the pool
  const int32_t* table = nullptr;
  size_t block_stride = 0;     // floats from one block to the next
  int block_shift = 0, d = 0;  // blocks of 1 << block_shift positions (a division per key would cost more than its dot)
  float* row(int p) const {
    if (!table) return base + static_cast<size_t>(p) * static_cast<size_t>(d);
    const int in_block = p & ((1 << block_shift) - 1);
    return base + static_cast<size_t>(table[p >> block_shift]) * block_stride +
           static_cast<size_t>(in_block) * static_cast<size_t>(d);
  }
};

// The rows of a tree pass: row r is node nodes[r] (its ancestor list) at cache slot slot[r].
struct TreeRows {
  int base = 0;
  std::vector<int> slot;
  std::vector<const std::vector<int>*> nodes;
};

// A forward pass's activation buffers, kept by the engine between passes.
struct ForwardScratch {
  std::vector<float> x, xn, q, k, v, att, tmp, gate, up, fused, rope_cs;
};

class CpuModel : public Model, public KvEvictionStudy, public KvFormatStudy, public LoraAdapters {
 public:
  // cpu_model.cpp: the weights, transposed (and packed for the decode GEMV unless Reference)
  CpuModel(const ModelConfig& c, const WeightSource& w, CpuMatmul matmul);

  const ModelConfig& config() const override { return c_; }

  // cpu_model_sequences.cpp
  int new_sequence(int capacity) override;
  void release(int seq) override;
  int fork(int seq) override;
  void truncate(int seq, int length) override;
  int length(int seq) const override { return at(seq).length; }
  void copy_cache(int src, int dst, int begin, int n) override;
  int share_prefix(int src, int length, int capacity) override;
  SwappedKv swap_out(int seq) override;
  int swap_in(const SwappedKv& kv, int capacity) override;
  int capacity(int seq) const override { return at(seq).capacity; }
  void enable_paged_kv(int num_blocks, int block_size) override;
  const kvcache::BlockManager* kv_blocks() const override { return blocks_ ? &*blocks_ : nullptr; }
  int blocks_needed(int seq, int tokens) const override;

  // cpu_model_passes.cpp
  void prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) override;
  void prefill_batch_rows(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                          const int* logit_rows) override;
  void decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) override;
  void prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out) override;
  void keep_tree_path(int seq, const std::vector<int>& path) override;

  // cpu_model_kv_studies.cpp
  void set_kept(int seq, int pos, bool kept) override;
  void set_kept_head(int seq, int layer, int kv_head, int pos, bool kept) override;
  void record_attention(int seq, bool on) override { at(seq).recording = on; }
  void set_kv_format(int seq, kvcache::KvFormat format, const std::vector<float>& fp8_scales) override;
  std::vector<float> kv_amax(int seq) const override;
  std::vector<float> kv_channel_amax(int seq) const override;
  const AttentionRecord& attention_record(int seq) const override { return at(seq).record; }

  // cpu_model_lora.cpp
  int add_adapter(const LoraAdapter& a) override;
  void set_adapter(int seq, int adapter) override;
  void merge_adapter(int adapter) override;
  int merged_adapter() const override { return merged_; }
  int64_t adapter_bytes() const override { return adapter_bytes_; }

  int64_t weight_bytes() const override { return weight_bytes_ + packed_bytes_; }
  int64_t streamed_weight_bytes(int rows) const override;
  int64_t kv_bytes() const override { return seqs_.cache_bytes() + static_cast<int64_t>(pool_.bytes()); }

 private:
  Sequence& at(int seq) { return seqs_.at(seq); }
  const Sequence& at(int seq) const { return seqs_.at(seq); }
  void no_tree(int seq, const char* what) const { seqs_.no_tree(seq, what); }

  // Contiguous sequences only (the KV studies): [capacity][head_dim] of one layer's kv head.
  float* cache_k(Sequence& s, int layer, int kvh) {
    return s.cache.data() + ((static_cast<size_t>(layer) * 2 * c_.kv_heads + kvh) * s.capacity) * c_.head_dim;
  }
  float* cache_v(Sequence& s, int layer, int kvh) {
    return s.cache.data() + ((static_cast<size_t>(layer) * 2 * c_.kv_heads + c_.kv_heads + kvh) * s.capacity) * c_.head_dim;
  }
  // Either layout: `kv` 0 for K, 1 for V (cpu_model_sequences.cpp).
  KvRows kv_rows(Sequence& s, int layer, int kv, int kvh);
  // Throws std::invalid_argument when `s` is paged: `what` needs a contiguous cache.
  void contiguous_only(const Sequence& s, const char* what) const;
  // Paged: grows each sequence seqs[i] to lengths[i] slots (when longer than now), all or none
  // (KvBlocksExhausted), and makes the copy-on-write block copies. A no-op when not paged.
  void grow_blocks(const std::vector<int>& seqs, const std::vector<int>& lengths);
  // A sequence's cached K/V rows to or from host memory laid out as SwappedKv's (one side given).
  void copy_host_rows(Sequence& s, float* to_host, const float* from_host);
  // A sequence slot made live with an empty cache of `capacity` (allocated unless paged).
  int open_sequence(int capacity);

  // cpu_model_kv_studies.cpp
  void round_kv(int l, int rows, const std::vector<int>& seq_of, float* k, float* v);
  static void round_row(kvcache::KvFormat f, float* x, int d, float fp8_scale);
  int kivi_value_group() const;
  void kivi_close_group(Sequence& s, int l, int p);

  // cpu_model_lora.cpp: the projection's weights as the pass uses them (merged or base), and the
  // rows' low-rank updates y[r] += scaling·B·(A·x[r]) for rows whose sequence has an adapter.
  const float* weight(const Layer& L, LoraModule m) const;
  void check_adapters(int rows, const std::vector<int>& seq_of) const;
  void lora_add(int layer, LoraModule m, const float* x, int rows, int in, int out, const std::vector<int>& seq_of, float* y);

  // cpu_model_forward.cpp
  // Whether a pass of `rows` rows multiplies by the packed copy `w` of `modules`: packed, a GEMV
  // (≤ 32 rows, as matmul's, or any rows of int8 panels), and none of the modules merged with a LoRA adapter.
  bool packed(const PackedWeights& w, int rows, std::initializer_list<LoraModule> modules) const;
  // The attention of the rows flagged `plain` (attend_queries: the per-key loop's bits, any grouping).
  void plain_attention(int layer, int rows, const std::vector<int>& seq_of, const std::vector<int>& pos,
                       const std::vector<uint8_t>& plain, const float* q, float* att);
  void forward(const int32_t* tokens, int rows, const std::vector<int>& seq_of, const std::vector<int>& pos, int first_out,
               const StepOutput& out, const TreeRows* tree = nullptr, const std::vector<int>* out_rows = nullptr);

  ModelConfig c_;
  std::vector<double> inv_freq_;  // RoPE [head_dim / 2], theta and scaling applied
  double rope_factor_ = 1.0;      // on cos and sin (YaRN)
  Buf embed_, final_norm_, lm_head_;
  PackedWeights lm_head_packed_;  // CpuMatmul::Packed and Blas
  ForwardScratch scratch_;
  bool blas_ = false;  // CpuMatmul::Blas and Int8: prefills through OpenBLAS
  int64_t packed_bytes_ = 0;
  // False when every product has int8 panels (CpuMatmul::Int8 on block weights): the float32
  // matrices (wq … wd, lm_head_) are then not loaded.
  bool float_matrices_ = true;
  std::vector<Layer> layers_;
  EngineSequences<Sequence> seqs_;
  // Paged KV: the block manager and the pool [layers][2][kv_heads][num_blocks][block_size][head_dim].
  // A block id names the same slice in every (layer, K or V, kv head) run, as vLLM's per-layer
  // caches do; the runs keep one head's blocks adjacent, since blocks a whole token's K/V apart
  // (a power of two of bytes) would share cache sets and evict each other in attention's re-reads.
  std::optional<kvcache::BlockManager> blocks_;
  Buf pool_;
  int64_t weight_bytes_ = 0;
  std::vector<CpuAdapter> adapters_;
  int merged_ = -1;                                  // merge_adapter's adapter, -1 for the base weights
  std::array<bool, kLoraModules> merged_modules_{};  // projections whose Layer::merged is in use
  int64_t adapter_bytes_ = 0, merged_bytes_ = 0;
};

}  // namespace ib::model::cpu_detail
