// The transformer engine the subcommands drive: a Llama-family decoder (RMSNorm, RoPE, MHA/GQA,
// SwiGLU, LM head) with a KV cache per sequence. Backends: CPU (float32 arithmetic on
// bf16-rounded weights; the reference) and CUDA (bf16 weights, fp32 accumulation).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/block_manager.h"
#include "model/config.h"
#include "model/lora.h"
#include "model/sample.h"
#include "model/weights.h"
#include "numerics/kv_format.h"

namespace ib::model {

// What a forward pass hands back. `logits` (host, fp32, [rows][vocab]) and `next` (host, [rows],
// chosen on the backend with `sampling` and the step's random numbers) are each optional.
struct StepOutput {
  float* logits = nullptr;
  int32_t* next = nullptr;
  SamplingParams sampling;  // temperature 0 = greedy
  uint64_t step = 0;        // which random numbers the sampler uses (sample_uniform)
};

// A pass over paged sequences needs more KV blocks than the pool has free. Thrown before the pass
// changes anything: the caller frees blocks (a scheduler preempts a request) and tries again.
struct KvBlocksExhausted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A paged sequence's K/V moved out of the block pool (swap preemption): its cached positions' rows
// in host memory, [layer][K, V][kv head][position][head_dim], float32.
struct SwappedKv {
  int length = 0;
  std::vector<float> rows;
  int64_t bytes() const { return static_cast<int64_t>(rows.size() * sizeof(float)); }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;

  // A sequence owns a KV cache of `capacity` tokens (allocated through the memory tracker, so a
  // cache that does not fit is OutOfMemory). Ids are small non-negative integers, reused.
  virtual int new_sequence(int capacity) = 0;
  virtual void release(int seq) = 0;
  // A new sequence with a copy of `seq`'s cache (same capacity).
  virtual int fork(int seq) = 0;
  // Drops cached tokens past `length` (speculative decoding's rollback).
  virtual void truncate(int seq, int length) = 0;
  virtual int length(int seq) const = 0;
  // Prefix reuse: positions [begin, begin + n) of `dst`'s cache become those of `src` (the same
  // tokens at the same positions give the same K/V), and dst's length becomes begin + n.
  // Needs length(dst) >= begin and length(src) >= begin + n.
  virtual void copy_cache(int src, int dst, int begin, int n);
  // A prefix-cache hit: a new sequence of `capacity` tokens whose first `length` positions are
  // `src`'s. Paged, it shares src's blocks (nothing copied; see enable_paged_kv); otherwise the
  // base version copies them (new_sequence + copy_cache).
  virtual int share_prefix(int src, int length, int capacity);
  virtual int capacity(int seq) const = 0;

  // Paged KV (PagedAttention, vLLM): the sequences made from now on keep their K/V in one pool of
  // `num_blocks` blocks of `block_size` tokens (a power of two, as vLLM's), allocated once, that PagedAttention's block
  // manager hands out as they grow; attention reads through each sequence's block table, and a
  // sequence's capacity is only its limit. fork shares the parent's blocks by reference count
  // (nothing copied; the partly filled last block is copied on its first write), truncate and
  // release return blocks, so a prefix-cache hit is fork + truncate. A pass that needs more
  // blocks than are free throws KvBlocksExhausted and changes nothing. Eviction marks and KV
  // formats are not supported on a paged sequence. Call with no live sequence; the default throws
  // std::runtime_error (the engine has no paged cache).
  virtual void enable_paged_kv(int num_blocks, int block_size);
  // The block manager while paged (free blocks, reference counts, invariants); nullptr otherwise.
  virtual const kvcache::BlockManager* kv_blocks() const { return nullptr; }
  // Blocks a pass adding `tokens` after seq's cached ones takes from the pool (a copy-on-write
  // block included); 0 when the engine is not paged.
  virtual int blocks_needed(int seq, int tokens) const;
  // Swap preemption (vLLM's preemption_mode "swap"): swap_out copies a paged sequence's cached K/V
  // to host memory and releases the sequence (its blocks return to the pool); swap_in opens a
  // paged sequence of `capacity` holding them again (fresh blocks, none shared), or throws
  // KvBlocksExhausted, changing nothing, when the pool has too few free. The sequence resumes
  // where it stopped: nothing is computed again. A sequence under a KV format study, with
  // eviction marks or an open token tree is refused (std::invalid_argument); the default throws
  // std::runtime_error (the engine cannot swap).
  virtual SwappedKv swap_out(int seq);
  virtual int swap_in(const SwappedKv& kv, int capacity);

  // Runs `n` tokens after the sequence's cached ones (causal among themselves), appends their
  // K/V, and outputs the last `n_logits` positions (1 for prefill, n to verify n drafted tokens).
  virtual void prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) = 0;
  // One token for each of `batch` sequences (lengths may differ); outputs [batch] rows.
  virtual void decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) = 0;
  // counts[i] tokens after sequence seqs[i]'s cached ones, for `n` distinct sequences, in one
  // forward pass (batched speculative verification): `tokens` holds them sequence after sequence
  // and every row's logits are output, in that order; with `last_only` only each sequence's last
  // row ([n] rows: a serving step that mixes prompt chunks with decode tokens samples one token per
  // sequence and pays the LM head for those rows alone).
  void prefill_batch(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                     bool last_only = false);
  // The same with each sequence's last logit_rows[i] rows output (1 <= logit_rows[i] <=
  // counts[i]), in order: a serving step whose speculating requests verify their drafted tokens
  // (every row's logits) beside prompt chunks (their last row only). The base version runs one
  // prefill per sequence (the same results, n passes); the engines override it with one pass.
  virtual void prefill_batch_rows(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out,
                                  const int* logit_rows);

  // Tree verification (SpecInfer, Medusa, EAGLE): several candidate continuations scored in one
  // pass. Opens a token tree on `seq` after its cached tokens (or extends the open one): new token
  // i gets tree node index nodes + i (`nodes` = the tree's nodes so far) and its parent is
  // parents[i], a node index below its own, or -1 for the last committed token. A node sits at
  // position committed + depth - 1 (depth 1 for a child of -1), attends to the committed tokens,
  // its ancestors and itself, and its K/V go to the cache slot committed + node index. Outputs
  // logits for all n rows. While a tree is open only prefill_tree, keep_tree_path, truncate (which
  // closes it), length (committed + nodes) and release are allowed.
  virtual void prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out);
  // Closes the open tree keeping one root-to-node path: path[i] is the node at depth i + 1 (each
  // the child of the one before, path[0] a child of -1); their K/V move to positions committed,
  // committed + 1, ... and the sequence's length becomes committed + path.size().
  virtual void keep_tree_path(int seq, const std::vector<int>& path);

  // Bytes of weights, and of the KV caches of live sequences (paged: the whole pool).
  virtual int64_t weight_bytes() const = 0;
  // Bytes of weights a pass of `rows` tokens streams, the roofline's (the CPU engine's decode
  // reads its packed bf16 copies, its prefill the float32 ones).
  virtual int64_t streamed_weight_bytes(int rows) const {
    (void)rows;
    return weight_bytes();
  }
  virtual int64_t kv_bytes() const = 0;
};

// How the CUDA engine runs its matmuls: cuBLAS for every shape, or our weight-streaming GEMV
// (kernels/gemv.h) for the products of at most 8 rows whose shapes it takes, cuBLAS for the rest.
enum class Matmul { Cublas, Gemv };
const std::vector<std::string>& matmul_names();  // {"cublas", "gemv"}, in enum order
const char* to_string(Matmul m);
// "cublas" or "gemv"; anything else is an InputError naming the choices.
Matmul parse_matmul(const std::string& name);

struct EngineOptions {
  bool cuda_graph = true;          // CUDA: capture the decode step per batch size and replay it
  Matmul matmul = Matmul::Cublas;  // CUDA
  int max_batch = 256;             // CUDA: activation buffers are sized for this many decode rows
  int max_prefill = 8192;          // CUDA: ... and this many prefill tokens per call
};

// The CPU engine's products. Reference: the float32 [in][out] GEMV (passes of up to 32 rows) and
// our SGEMM (prefills), what every fast path is checked against. Packed: the GEMV streams each
// matrix once per step in its stored type, bf16 where exact (numerics/packed_gemv.h), the same
// bits as Reference. Blas: Packed's GEMV, and prefills through OpenBLAS (numerics/blas_sgemm.h),
// within float32 rounding of Reference.
// Int8: Blas, but block-quantized weights (GGUF Q8_0/Q4_0/Q4_1) multiply activations quantized to
// int8 (numerics/packed_gemv.h, BlockDot::Int8): llama.cpp's arithmetic, not bit for bit the reference.
enum class CpuMatmul { Reference, Packed, Blas, Int8 };
const std::vector<std::string>& cpu_matmul_names();  // {"reference", "packed", "blas", "int8"}, in enum order
const char* to_string(CpuMatmul m);
CpuMatmul parse_cpu_matmul(const std::string& name);  // InputError naming the choices otherwise

std::unique_ptr<Model> make_cpu_model(const ModelConfig& c, const WeightSource& w, CpuMatmul matmul = CpuMatmul::Blas);
// `stream` is the cudaStream_t the model enqueues on (nullptr: the default stream). Throws
// InputError when the binary has no CUDA backend.
std::unique_ptr<Model> make_cuda_model(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, void* stream);

}  // namespace ib::model
