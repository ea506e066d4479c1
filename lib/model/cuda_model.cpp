// The CUDA engine: bf16 weights and activations, fp32 residual stream, accumulation and logits.
// Matmuls are cuBLAS (the Q/K/V and gate/up projections fused into one GEMM each at load time;
// o_proj and down_proj accumulate straight into the fp32 residual with beta = 1), or with
// EngineOptions::matmul = gemv our weight-streaming GEMV (kernels/gemv.h) for products of at most
// 8 rows (decode steps, short verify passes, the LM head of a prefill's last token; there the
// gate/up GEMV applies SwiGLU itself), prefill
// attention is FlashAttention-2 reading the KV cache in place, decode attention a split-K kernel
// over each sequence's cache (kernels/model_ops_decode_attention.cu). A decode step can be captured once per batch
// size into a CUDA graph and replayed: its per-step inputs (token ids, cache pointers, positions)
// live in one fixed device block that a single copy refreshes before each replay.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "attention.h"
#include "numerics/cuda_check.h"
#include "numerics/cuda_handles.h"
#include "core/cuda_memory.h"
#include "numerics/dtype.h"
#include "core/errors.h"
#include "numerics/half.h"
#include "fill.h"
#include "gemv.h"
#include "model/model.h"
#include "model/sequence_table.h"
#include "model/token_tree.h"
#include "model_ops.h"

namespace ib::model {
namespace {

using Bf16Buffer = DeviceBuffer<uint16_t>;

struct LayerWeights {
  Bf16Buffer in_norm, post_norm;
  Bf16Buffer wqkv;  // [q_dim + 2·kv_dim][hidden]: q_proj, k_proj, v_proj rows one after the other
  Bf16Buffer bqkv;  // [q_dim + 2·kv_dim] when the model has q/k/v biases
  Bf16Buffer q_norm, k_norm;  // [head_dim] each (Qwen3)
  Bf16Buffer wo;    // [hidden][q_dim]
  Bf16Buffer bo;    // [hidden] (Llama attention_bias)
  Bf16Buffer wgu;   // [2·mlp][hidden]: gate_proj rows, then up_proj rows
  Bf16Buffer bgu;   // [2·mlp]: gate then up biases (Llama mlp_bias)
  Bf16Buffer wd;    // [hidden][mlp]
  Bf16Buffer bd;    // [hidden] (Llama mlp_bias)
};

struct Sequence {
  bool live = false;
  int capacity = 0, length = 0;
  Bf16Buffer cache;  // [layers][2 (K, V)][kv_heads][capacity][head_dim]
  TokenTree tree;  // open while a tree verification is in progress (prefill_tree)
};

// A tree pass's device inputs (forward_layers): slots to store K/V at, ancestor lists.
struct TreeInputs {
  const int32_t* slots = nullptr;
  const int32_t* anc_begin = nullptr;
  const int32_t* anc = nullptr;
  int base = 0;
};

constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // cuBLAS's recommendation for Hopper
constexpr int kFlashMinRows = 16;  // fewer query rows: the split-K kernel has more parallelism than flash2's one query tile
constexpr int kMaxSplits = 64;     // kDecMaxSplits in model_ops_decode_attention.cu
constexpr int kMaxLaunchRows = 65535;

size_t align16(size_t n) { return (n + 15) / 16 * 16; }

class CudaModel final : public Model {
 public:
  CudaModel(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, cudaStream_t stream)
      : c_(c), o_(o), stream_(stream) {
    if (c.hidden <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.layers <= 0 || c.vocab <= 0 || c.mlp <= 0)
      throw InputError(fmt::format("model {}: every dimension must be positive", c.name));
    if (c.head_dim % 8 != 0 || !decode_attention_supports(c.head_dim, c.heads, c.kv_heads))
      throw InputError(fmt::format("model {}: the CUDA engine supports head_dim 16, 32, 64, 128 and 256 with heads a multiple of "
                                   "kv_heads (got head_dim {}, {} heads, {} kv heads)",
                                   c.name, c.head_dim, c.heads, c.kv_heads));
    if (o.max_batch < 1 || o.max_batch > kMaxLaunchRows || o.max_prefill < 1 || o.max_prefill > kMaxLaunchRows)
      throw std::invalid_argument(fmt::format("max_batch and max_prefill must be in 1..{}", kMaxLaunchRows));
    int dev = 0;
    IB_CUDA_CHECK(cudaGetDevice(&dev));
    IB_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev));

    cublas_ws_.allocate(kCublasWorkspaceBytes, "cuBLAS workspace");
    {  // RoPE frequencies (theta and scaling applied on the host, as the CPU engine uses them)
      const std::vector<double> f = c.rope_inv_freq();
      inv_freq_.allocate(f.size(), "RoPE frequencies");
      IB_CUDA_CHECK(cudaMemcpyAsync(inv_freq_.data(), f.data(), f.size() * sizeof(double), cudaMemcpyHostToDevice, stream_));
      IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // f is freed at the end of this block
    }
    load_weights(w);
    allocate_activations();
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // weights in place, host staging released
  }

  ~CudaModel() override {
    // Nothing in flight may touch the buffers the members below free (cudaFree synchronises
    // too, but the graphs are destroyed first and must not be running).
    (void)cudaStreamSynchronize(stream_);
  }

  const ModelConfig& config() const override { return c_; }

  int new_sequence(int capacity) override {
    if (capacity <= 0) throw std::invalid_argument("sequence capacity must be positive");
    Bf16Buffer cache(static_cast<size_t>(c_.kv_elems_per_token()) * static_cast<size_t>(capacity), "KV cache");  // may be OutOfMemory
    const int id = seqs_.free_id();
    Sequence& s = seqs_.slot(id);
    s.cache = std::move(cache);
    s.capacity = capacity;
    s.length = 0;
    s.live = true;
    s.tree.close();
    return id;
  }

  void release(int seq) override {
    Sequence& s = at(seq);
    s.cache.reset();  // cudaFree waits for the work in flight that may still read it
    s.live = false;
    s.tree.close();
  }

  int fork(int seq) override {
    no_tree(seq, "fork");
    const int cap = at(seq).capacity;
    const int id = new_sequence(cap);
    Sequence& src = at(seq);  // new_sequence may have grown seqs_
    Sequence& dst = at(id);
    if (src.length > 0) {
      // Rows are the (layer, K/V, kv head) blocks of `capacity` positions; only the first
      // `length` positions of each hold anything.
      const size_t pitch = static_cast<size_t>(cap) * c_.head_dim * sizeof(uint16_t);
      IB_CUDA_CHECK(cudaMemcpy2DAsync(dst.cache.data(), pitch, src.cache.data(), pitch,
                                      static_cast<size_t>(src.length) * c_.head_dim * sizeof(uint16_t),
                                      static_cast<size_t>(2) * c_.layers * c_.kv_heads, cudaMemcpyDeviceToDevice, stream_));
    }
    dst.length = src.length;
    return id;
  }

  void copy_cache(int src, int dst, int begin, int n) override {
    no_tree(src, "copy_cache");
    no_tree(dst, "copy_cache");
    Sequence& s = at(src);
    Sequence& d = at(dst);
    if (begin < 0 || n < 0 || d.length < begin || s.length < begin + n || begin + n > d.capacity)
      throw std::invalid_argument(fmt::format("copy_cache [{}, {}) from a {}-token into a {}-token sequence (capacity {})", begin,
                                              begin + n, s.length, d.length, d.capacity));
    if (n > 0) {
      // One row per (layer, K/V, kv head) block; the caches' pitches differ when capacities do.
      const size_t row = static_cast<size_t>(n) * c_.head_dim * sizeof(uint16_t);
      const size_t off = static_cast<size_t>(begin) * c_.head_dim;
      IB_CUDA_CHECK(cudaMemcpy2DAsync(d.cache.data() + off, static_cast<size_t>(d.capacity) * c_.head_dim * sizeof(uint16_t),
                                      s.cache.data() + off, static_cast<size_t>(s.capacity) * c_.head_dim * sizeof(uint16_t), row,
                                      static_cast<size_t>(2) * c_.layers * c_.kv_heads, cudaMemcpyDeviceToDevice, stream_));
    }
    d.length = begin + n;
  }

  void truncate(int seq, int length) override {
    Sequence& s = at(seq);
    if (length < 0 || length > s.length) throw std::invalid_argument(fmt::format("truncate to {} of a {}-token sequence", length, s.length));
    if (s.tree.open()) {
      if (length > s.tree.base())
        throw std::invalid_argument(fmt::format("truncate to {} inside an open token tree (committed {})", length, s.tree.base()));
      s.tree.close();
    }
    s.length = length;
  }
  int length(int seq) const override { return at(seq).length; }
  int capacity(int seq) const override { return at(seq).capacity; }

  // Tree verification: the tree's rows through the layers like a prefill chunk, with K/V stored
  // at the nodes' slots, RoPE at their depths and attention through kernels/model_ops' tree
  // attention (committed positions, then the ancestors).
  void prefill_tree(int seq, const int32_t* tokens, const int32_t* parents, int n, const StepOutput& out) override {
    if (n <= 0) throw std::invalid_argument("prefill_tree of no tokens");
    if (n > o_.max_prefill) throw std::invalid_argument(fmt::format("prefill_tree of {} tokens: at most {} (max_prefill)", n, o_.max_prefill));
    check_tokens(tokens, n);
    Sequence& s = at(seq);
    const int base = s.tree.open() ? s.tree.base() : s.length, first_node = s.tree.size();
    if (base + first_node + n > s.capacity) throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq, s.capacity));
    std::vector<std::vector<int>> nodes = s.tree.extend(parents, n);
    // Host image of the device inputs: rows, slots, ancestor offsets and slots.
    std::vector<AttnRow> rows(static_cast<size_t>(n));
    std::vector<int32_t> slots(static_cast<size_t>(n)), begin(static_cast<size_t>(n) + 1, 0), anc;
    for (int i = 0; i < n; ++i) {
      const std::vector<int>& a = nodes[static_cast<size_t>(i)];
      AttnRow& r = rows[static_cast<size_t>(i)];
      r.cache = s.cache.data();
      r.capacity = s.capacity;
      r.pos = base + static_cast<int>(a.size()) - 1;
      slots[static_cast<size_t>(i)] = base + first_node + i;
      for (int x : a) anc.push_back(base + x);
      begin[static_cast<size_t>(i) + 1] = static_cast<int32_t>(anc.size());
    }
    const size_t rows_bytes = align16(sizeof(AttnRow) * rows.size()), slots_bytes = align16(sizeof(int32_t) * slots.size()),
                 begin_bytes = align16(sizeof(int32_t) * begin.size()), anc_bytes = sizeof(int32_t) * anc.size();
    const size_t bytes = rows_bytes + slots_bytes + begin_bytes + anc_bytes;
    if (tree_dev_.size() < bytes) tree_dev_.allocate(bytes, "tree verification inputs");
    std::vector<unsigned char> host(bytes, 0);
    std::memcpy(host.data(), rows.data(), sizeof(AttnRow) * rows.size());
    std::memcpy(host.data() + rows_bytes, slots.data(), sizeof(int32_t) * slots.size());
    std::memcpy(host.data() + rows_bytes + slots_bytes, begin.data(), sizeof(int32_t) * begin.size());
    std::memcpy(host.data() + rows_bytes + slots_bytes + begin_bytes, anc.data(), anc_bytes);
    IB_CUDA_CHECK(cudaMemcpyAsync(tree_dev_.data(), host.data(), bytes, cudaMemcpyHostToDevice, stream_));
    IB_CUDA_CHECK(cudaMemcpyAsync(prefill_tokens_.data(), tokens, sizeof(int32_t) * static_cast<size_t>(n), cudaMemcpyHostToDevice, stream_));
    TreeInputs tree;
    tree.slots = reinterpret_cast<const int32_t*>(tree_dev_.data() + rows_bytes);
    tree.anc_begin = reinterpret_cast<const int32_t*>(tree_dev_.data() + rows_bytes + slots_bytes);
    tree.anc = reinterpret_cast<const int32_t*>(tree_dev_.data() + rows_bytes + slots_bytes + begin_bytes);
    tree.base = base;
    const bool opened = !s.tree.open();
    s.tree.append(base, std::move(nodes));
    try {
      bind_cublas(stream_);
      forward_layers(stream_, n, prefill_tokens_.data(), reinterpret_cast<const AttnRow*>(tree_dev_.data()), nullptr, &tree);
    } catch (...) {
      // The nodes of this call were never computed: the tree is as before it.
      s.tree.rollback(first_node, opened);
      throw;
    }
    s.length = base + s.tree.size();
    if (out.logits || out.next) head_rows(out, n);
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host image above is released on return
  }

  void keep_tree_path(int seq, const std::vector<int>& path) override {
    Sequence& s = at(seq);
    s.tree.check_path(path);
    const int base = s.tree.base();
    // One 2D copy per moved position (a row per (layer, K/V, kv head) block), in path order on
    // the stream: path[i] >= i, so no position is overwritten before it is read.
    const size_t pitch = static_cast<size_t>(s.capacity) * c_.head_dim * sizeof(uint16_t);
    for (size_t i = 0; i < path.size(); ++i) {
      const size_t from = static_cast<size_t>(base + path[i]), to = static_cast<size_t>(base) + i;
      if (from == to) continue;
      IB_CUDA_CHECK(cudaMemcpy2DAsync(s.cache.data() + to * c_.head_dim, pitch, s.cache.data() + from * c_.head_dim, pitch,
                                      static_cast<size_t>(c_.head_dim) * sizeof(uint16_t), static_cast<size_t>(2) * c_.layers * c_.kv_heads,
                                      cudaMemcpyDeviceToDevice, stream_));
    }
    s.length = base + static_cast<int>(path.size());
    s.tree.close();
  }

  void prefill(int seq, const int32_t* tokens, int n, int n_logits, const StepOutput& out) override {
    if (n <= 0) throw std::invalid_argument("prefill of no tokens");
    n_logits = std::clamp(n_logits, 1, n);
    check_tokens(tokens, n);
    no_tree(seq, "prefill");
    {
      const Sequence& s = at(seq);
      if (s.length + n > s.capacity)
        throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seq, s.capacity));
    }
    const bool want = out.logits || out.next;
    const int first_out = n - n_logits;
    bind_cublas(stream_);
    for (int done = 0; done < n;) {
      // Chunks of max_prefill tokens; each attends to everything cached before it, which the
      // bottom-right causal alignment (query i sees keys <= i + seq_k − seq_q) makes exact.
      const int rows = std::min(o_.max_prefill, n - done);
      Sequence& s = at(seq);
      const int start = s.length;
      IB_CUDA_CHECK(cudaMemcpyAsync(prefill_tokens_.data(), tokens + done, sizeof(int32_t) * static_cast<size_t>(rows),
                                    cudaMemcpyHostToDevice, stream_));
      launch_fill_attn_rows(prefill_rows_.data(), rows, s.cache.data(), s.capacity, start, stream_);
      PrefillCache pc{s.cache.data(), s.capacity, start};
      forward_layers(stream_, rows, prefill_tokens_.data(), prefill_rows_.data(), &pc);
      s.length = start + rows;
      if (want) {
        // This chunk's rows among the last n_logits, through the LM head max_batch rows at a time.
        for (int r = std::max(first_out, done); r < done + rows;) {
          const int count = std::min(o_.max_batch, done + rows - r);
          lm_head(stream_, r - done, count);
          emit(out, r - first_out, count);
          r += count;
        }
      }
      done += rows;
    }
    if (want) IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // One pass over every sequence's rows: the row table gives each row its cache and position, K/V
  // are appended for all rows before attention, and the split-K kernel attends each row to its
  // own sequence up to its position. More rows than max_prefill: one prefill per sequence.
  void prefill_batch(const int* seqs, const int* counts, int n, const int32_t* tokens, const StepOutput& out) override {
    int total = 0;
    for (int i = 0; i < n; ++i) {
      if (counts[i] <= 0) throw std::invalid_argument("prefill_batch: a sequence with no tokens");
      no_tree(seqs[i], "prefill_batch");
      const Sequence& s = at(seqs[i]);
      if (s.length + counts[i] > s.capacity) throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seqs[i], s.capacity));
      for (int i2 = 0; i2 < i; ++i2)
        if (seqs[i] == seqs[i2]) throw std::invalid_argument("prefill_batch holds each sequence once");
      total += counts[i];
    }
    if (total > o_.max_prefill) return Model::prefill_batch(seqs, counts, n, tokens, out);
    check_tokens(tokens, total);
    std::vector<AttnRow> rows;
    for (int i = 0; i < n; ++i) {
      Sequence& s = at(seqs[i]);
      for (int j = 0; j < counts[i]; ++j) rows.push_back(AttnRow{s.cache.data(), s.capacity, s.length + j});
    }
    // Pageable sources: the copies have read them when cudaMemcpyAsync returns.
    IB_CUDA_CHECK(cudaMemcpyAsync(prefill_tokens_.data(), tokens, sizeof(int32_t) * static_cast<size_t>(total), cudaMemcpyHostToDevice, stream_));
    IB_CUDA_CHECK(cudaMemcpyAsync(prefill_rows_.data(), rows.data(), sizeof(AttnRow) * rows.size(), cudaMemcpyHostToDevice, stream_));
    bind_cublas(stream_);
    forward_layers(stream_, total, prefill_tokens_.data(), prefill_rows_.data(), nullptr);
    for (int i = 0; i < n; ++i) at(seqs[i]).length += counts[i];
    if (out.logits || out.next) {
      head_rows(out, total);
      IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }

  void decode(const int* seqs, const int32_t* tokens, int batch, const StepOutput& out) override {
    if (batch <= 0) throw std::invalid_argument("decode of an empty batch");
    if (batch > o_.max_batch) throw std::invalid_argument(fmt::format("decode batch {} is larger than max_batch {}", batch, o_.max_batch));
    check_tokens(tokens, batch);
    for (int r = 0; r < batch; ++r) {
      no_tree(seqs[r], "decode");
      const Sequence& s = at(seqs[r]);
      if (s.length >= s.capacity) throw std::invalid_argument(fmt::format("sequence {} is full ({} tokens)", seqs[r], s.capacity));
      for (int r2 = 0; r2 < r; ++r2)
        if (seqs[r] == seqs[r2]) throw std::invalid_argument("a decode batch holds each sequence once");
    }

    // The step block: token ids, then the attention rows. The previous step's upload must have
    // left the pinned staging before it is rewritten.
    IB_CUDA_CHECK(cudaEventSynchronize(step_uploaded_.get()));
    unsigned char* host = step_host_->data();
    std::memcpy(host, tokens, sizeof(int32_t) * static_cast<size_t>(batch));
    auto* rows = reinterpret_cast<AttnRow*>(host + step_rows_offset_);
    for (int r = 0; r < batch; ++r) {
      Sequence& s = at(seqs[r]);
      rows[r].cache = s.cache.data();
      rows[r].capacity = s.capacity;
      rows[r].pos = s.length;
    }
    IB_CUDA_CHECK(cudaMemcpyAsync(step_dev_.data(), host, step_rows_offset_ + sizeof(AttnRow) * static_cast<size_t>(batch),
                                  cudaMemcpyHostToDevice, stream_));
    IB_CUDA_CHECK(cudaEventRecord(step_uploaded_.get(), stream_));

    const int32_t* step_tokens = reinterpret_cast<const int32_t*>(step_dev_.data());
    const AttnRow* step_rows = reinterpret_cast<const AttnRow*>(step_dev_.data() + step_rows_offset_);
    auto graph = o_.cuda_graph ? graphs_.find(batch) : graphs_.end();
    if (graph != graphs_.end()) {
      IB_CUDA_CHECK(cudaGraphLaunch(graph->second->get(), stream_));
      for (int r = 0; r < batch; ++r) ++at(seqs[r]).length;
    } else {
      bind_cublas(stream_);
      forward_layers(stream_, batch, step_tokens, step_rows, nullptr);
      lm_head(stream_, 0, batch);
      for (int r = 0; r < batch; ++r) ++at(seqs[r]).length;  // this step is complete even if the capture below throws
      // The first step of a batch size runs directly (it also loads every kernel and lets
      // cuBLAS settle its choices); then the same sequence is captured for the next steps.
      if (o_.cuda_graph) capture(batch, step_tokens, step_rows);
    }

    if (out.logits || out.next) {
      emit(out, 0, batch);
      IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }

  int64_t weight_bytes() const override { return weight_bytes_; }
  int64_t kv_bytes() const override { return seqs_.cache_bytes(); }

 private:
  struct PrefillCache {
    uint16_t* cache;
    int capacity;
    int start;  // cached tokens before this chunk
  };

  Sequence& at(int seq) { return seqs_.at(seq); }
  const Sequence& at(int seq) const { return seqs_.at(seq); }
  void no_tree(int seq, const char* what) const {
    if (at(seq).tree.open()) throw std::logic_error(fmt::format("{} on sequence {} while its token tree is open", what, seq));
  }

  void check_tokens(const int32_t* tokens, int n) const {
    for (int i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c_.vocab) throw std::invalid_argument(fmt::format("token {} outside the vocabulary", tokens[i]));
  }

  // ---- weights ----

  void load_weights(const WeightSource& w) {
    const auto specs = tensor_specs(c_);
    std::vector<float> host_f;
    std::vector<uint16_t> host_b;
    auto find = [&](const std::string& name) -> const TensorSpec& {
      for (const auto& s : specs)
        if (s.name == name) return s;
      throw std::logic_error("no tensor " + name);
    };
    // Tensor `name` (expected_elems elements) into dst[0 .. expected_elems).
    auto put = [&](const std::string& name, uint16_t* dst, int64_t expected_elems) {
      const TensorSpec& s = find(name);
      if (s.elems() != expected_elems)
        throw std::logic_error(fmt::format("tensor {} has {} elements, the model needs {}", name, s.elems(), expected_elems));
      const size_t n = static_cast<size_t>(expected_elems);
      if (w.is_random()) {
        if (s.is_norm()) launch_fill_u16(dst, n, 0x3F80, stream_);  // exactly 1.0
        else launch_fill_random(dst, n, DType::BF16, w.tensor_seed(s), w.tensor_scale(s), stream_);
        return;
      }
      host_f.resize(n);
      host_b.resize(n);
      w.read(s, host_f.data());
      for (size_t i = 0; i < n; ++i) host_b[i] = float_to_bf16_bits(host_f[i]);
      IB_CUDA_CHECK(cudaMemcpyAsync(dst, host_b.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_));
      IB_CUDA_CHECK(cudaStreamSynchronize(stream_));  // host_b is reused by the next tensor
    };
    auto alloc = [&](Bf16Buffer& b, int64_t elems, const std::string& what) {
      b.allocate(static_cast<size_t>(elems), what);
      weight_bytes_ += static_cast<int64_t>(b.bytes());
    };
    const int64_t h = c_.hidden, qd = c_.q_dim(), kvd = c_.kv_dim(), mlp = c_.mlp, vocab = c_.vocab;

    alloc(embed_, vocab * h, "embedding");
    put("model.embed_tokens.weight", embed_.data(), vocab * h);
    layers_.resize(static_cast<size_t>(c_.layers));
    for (int l = 0; l < c_.layers; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l);
      LayerWeights& L = layers_[static_cast<size_t>(l)];
      alloc(L.in_norm, h, p + "input_layernorm");
      put(p + "input_layernorm.weight", L.in_norm.data(), h);
      alloc(L.post_norm, h, p + "post_attention_layernorm");
      put(p + "post_attention_layernorm.weight", L.post_norm.data(), h);
      alloc(L.wqkv, (qd + 2 * kvd) * h, p + "qkv_proj");
      put(p + "self_attn.q_proj.weight", L.wqkv.data(), qd * h);
      put(p + "self_attn.k_proj.weight", L.wqkv.data() + qd * h, kvd * h);
      put(p + "self_attn.v_proj.weight", L.wqkv.data() + (qd + kvd) * h, kvd * h);
      if (c_.qkv_bias) {
        alloc(L.bqkv, qd + 2 * kvd, p + "qkv_bias");
        put(p + "self_attn.q_proj.bias", L.bqkv.data(), qd);
        put(p + "self_attn.k_proj.bias", L.bqkv.data() + qd, kvd);
        put(p + "self_attn.v_proj.bias", L.bqkv.data() + qd + kvd, kvd);
      }
      if (c_.qk_norm) {
        alloc(L.q_norm, c_.head_dim, p + "q_norm");
        put(p + "self_attn.q_norm.weight", L.q_norm.data(), c_.head_dim);
        alloc(L.k_norm, c_.head_dim, p + "k_norm");
        put(p + "self_attn.k_norm.weight", L.k_norm.data(), c_.head_dim);
      }
      alloc(L.wo, h * qd, p + "o_proj");
      put(p + "self_attn.o_proj.weight", L.wo.data(), h * qd);
      if (c_.o_bias) {
        alloc(L.bo, h, p + "o_proj_bias");
        put(p + "self_attn.o_proj.bias", L.bo.data(), h);
      }
      alloc(L.wgu, 2 * mlp * h, p + "gate_up_proj");
      put(p + "mlp.gate_proj.weight", L.wgu.data(), mlp * h);
      put(p + "mlp.up_proj.weight", L.wgu.data() + mlp * h, mlp * h);
      alloc(L.wd, h * mlp, p + "down_proj");
      put(p + "mlp.down_proj.weight", L.wd.data(), h * mlp);
      if (c_.mlp_bias) {
        alloc(L.bgu, 2 * mlp, p + "gate_up_bias");
        put(p + "mlp.gate_proj.bias", L.bgu.data(), mlp);
        put(p + "mlp.up_proj.bias", L.bgu.data() + mlp, mlp);
        alloc(L.bd, h, p + "down_bias");
        put(p + "mlp.down_proj.bias", L.bd.data(), h);
      }
    }
    alloc(final_norm_, h, "model.norm");
    put("model.norm.weight", final_norm_.data(), h);
    if (!c_.tied_embeddings) {
      alloc(lm_head_, vocab * h, "lm_head");
      put("lm_head.weight", lm_head_.data(), vocab * h);
    }
  }

  const uint16_t* lm_head_weights() const { return c_.tied_embeddings ? embed_.data() : lm_head_.data(); }

  // ---- activations ----

  void allocate_activations() {
    const size_t R = static_cast<size_t>(std::max(o_.max_batch, o_.max_prefill));
    const size_t h = static_cast<size_t>(c_.hidden), qd = static_cast<size_t>(c_.q_dim()), mlp = static_cast<size_t>(c_.mlp);
    qkv_dim_ = c_.q_dim() + 2 * c_.kv_dim();
    x_.allocate(R * h, "residual stream");
    h_.allocate(R * h, "normalised activations");
    qkv_.allocate(R * static_cast<size_t>(qkv_dim_), "q/k/v");
    attn_.allocate(R * qd, "attention output");
    gu_.allocate(R * 2 * mlp, "gate/up");
    act_.allocate(R * mlp, "SwiGLU output");
    if (flash_head_dim()) {
      qh_.allocate(static_cast<size_t>(o_.max_prefill) * qd, "prefill q (head-major)");
      oh_.allocate(static_cast<size_t>(o_.max_prefill) * qd, "prefill attention (head-major)");
    }
    const size_t LR = static_cast<size_t>(o_.max_batch);
    logits_.allocate(LR * static_cast<size_t>(c_.vocab), "logits");
    next_dev_.allocate(LR, "sampled tokens");
    prefill_tokens_.allocate(static_cast<size_t>(o_.max_prefill), "prefill tokens");
    prefill_rows_.allocate(static_cast<size_t>(o_.max_prefill), "prefill attention rows");
    step_rows_offset_ = align16(sizeof(int32_t) * static_cast<size_t>(o_.max_batch));
    const size_t step_bytes = step_rows_offset_ + sizeof(AttnRow) * static_cast<size_t>(o_.max_batch);
    step_dev_.allocate(step_bytes, "decode step inputs");
    step_host_ = std::make_unique<PinnedBytes>(step_bytes);
    // Split-K partials: only row counts with more than one split need them, and those are the
    // small ones (rows · splits stays below twice the block target).
    size_t ws = 0;
    for (int r = 1; r <= static_cast<int>(R); ++r) {
      const int s = splits_for(r);
      if (s == 1) break;  // splits only fall as rows grow
      ws = std::max(ws, decode_attention_workspace_floats(r, c_.heads, c_.head_dim, s));
    }
    if (ws) attn_ws_.allocate(ws, "split-K attention partials");
  }

  bool flash_head_dim() const { return c_.head_dim == 64 || c_.head_dim == 128; }

  // Splits per (row, kv head) so that a decode attention launch has ~4 blocks per SM.
  int splits_for(int rows) const {
    const int64_t per = decode_attention_blocks_per_split(rows, c_.heads, c_.kv_heads);
    const int64_t target = int64_t{4} * sm_count_;
    return static_cast<int>(std::clamp<int64_t>((target + per - 1) / per, 1, kMaxSplits));
  }

  // ---- the forward pass ----

  // The handle's stream, then the workspace (cublasSetStream resets the workspace to cuBLAS's
  // own pool, which would allocate inside a stream capture).
  void bind_cublas(cudaStream_t s) {
    IB_CUBLAS_CHECK(cublasSetStream(cublas_.get(), s));
    IB_CUBLAS_CHECK(cublasSetWorkspace(cublas_.get(), cublas_ws_.data(), cublas_ws_.bytes()));
  }

  bool use_gemv(int rows, int in, int out, const uint16_t* w, const uint16_t* x) const {
    return o_.matmul == Matmul::Gemv && gemv_bf16_supports(rows, in, out, w, x);
  }

  // Y[rows][out] (= or +=, beta) X[rows][in] · W[out][in]ᵀ on stream s (cuBLAS: the stream
  // bind_cublas gave the handle). matmul = gemv: our kernel where it takes the shape (rows <= 8,
  // in % 8 == 0), cuBLAS otherwise. Column-major view for cuBLAS: Yᵀ = W·Xᵀ.
  void gemm(cudaStream_t s, const uint16_t* w, const uint16_t* x, void* y, int rows, int in, int out, cudaDataType_t y_type, float beta) {
    // The GEMV stores bf16 (beta 0) or fp32 (beta 0: =, beta 1: +=); any other beta or type is cuBLAS's.
    const bool gemv_out = (y_type == CUDA_R_16BF && beta == 0.0f) || (y_type == CUDA_R_32F && (beta == 0.0f || beta == 1.0f));
    if (gemv_out && use_gemv(rows, in, out, w, x)) {
      const GemvOut kind = y_type == CUDA_R_16BF ? GemvOut::Bf16 : beta != 0.0f ? GemvOut::Fp32Add : GemvOut::Fp32;
      launch_gemv_bf16(w, x, y, kind, rows, in, out, sm_count_, s);
      return;
    }
    const float alpha = 1.0f;
    IB_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF,
                                 in, &beta, y, y_type, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // The query rows of layer `l` (q rotated in place in qkv_) into attn_.
  void row_attention_args(RowAttentionArgs& a, const AttnRow* table, int rows, int l, float scale) {
    a.q = qkv_.data();
    a.q_row_stride = qkv_dim_;
    a.rows = table;
    a.n_rows = rows;
    a.layer = l;
    a.heads = c_.heads;
    a.kv_heads = c_.kv_heads;
    a.head_dim = c_.head_dim;
    a.window = c_.window(l);
    a.scale = scale;
    a.out = attn_.data();
  }

  // All layers for `rows` token rows: the residual stream x_ ends holding their final hidden
  // states. `table` gives each row's cache and position; `pc` (prefill: all rows in one sequence,
  // consecutive positions from pc->start) allows FlashAttention-2 when its shape fits.
  // `tree` (prefill_tree): K/V to tree->slots, attention through the tree's ancestor lists.
  void forward_layers(cudaStream_t s, int rows, const int32_t* tokens, const AttnRow* table, const PrefillCache* pc,
                      const TreeInputs* tree = nullptr) {
    const int h = c_.hidden, qd = c_.q_dim(), D = c_.head_dim, mlp = c_.mlp;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));

    AttentionParams fp;
    bool flash = false;
    if (pc && flash_head_dim() && rows >= kFlashMinRows) {
      fp.q = qh_.data();
      fp.k = pc->cache;  // layer 0; moved per layer below
      fp.v = pc->cache;
      fp.o = oh_.data();
      fp.batch = 1;
      fp.heads = c_.heads;
      fp.kv_heads = c_.kv_heads;
      fp.head_dim = D;
      fp.seq_q = rows;
      fp.seq_k = pc->start + rows;
      fp.causal = true;
      fp.window = 0;  // per layer below
      fp.scale = scale;
      fp.fp16 = false;
      fp.k_head_stride = fp.v_head_stride = int64_t{pc->capacity} * D;
      flash = flash2_unsupported(fp).empty();
    }
    const int splits = flash ? 1 : splits_for(rows);

    launch_embed(embed_.data(), tokens, rows, h, c_.vocab, x_.data(), s);
    for (int l = 0; l < c_.layers; ++l) {
      LayerWeights& L = layers_[static_cast<size_t>(l)];
      launch_add_rmsnorm(x_.data(), nullptr, L.in_norm.data(), c_.rms_eps, rows, h, h_.data(), s);
      gemm(s, L.wqkv.data(), h_.data(), qkv_.data(), rows, h, qkv_dim_, CUDA_R_16BF, 0.0f);
      const uint16_t* qkv_bias = c_.qkv_bias ? L.bqkv.data() : nullptr;
      if (c_.qk_norm)  // Qwen3: per-head RMSNorm of q and k (their biases added first), then RoPE
        launch_head_rmsnorm(qkv_.data(), qkv_bias, rows, c_.heads, c_.kv_heads, D, L.q_norm.data(), L.k_norm.data(), c_.rms_eps, s);
      launch_qkv_rope_append(qkv_.data(), qkv_bias, c_.qk_norm, table, rows, l, c_.heads, c_.kv_heads, D, inv_freq_.data(),
                             c_.rope_attention_factor(), flash ? qh_.data() : nullptr, s, tree ? tree->slots : nullptr);
      if (tree) {
        TreeAttentionArgs a;
        row_attention_args(a, table, rows, l, scale);
        a.base = tree->base;
        a.anc_begin = tree->anc_begin;
        a.anc = tree->anc;
        launch_tree_attention(a, s);
      } else if (flash) {
        fp.window = c_.window(l);
        const size_t head_elems = static_cast<size_t>(pc->capacity) * D;
        const uint16_t* k = pc->cache + static_cast<size_t>(l) * 2 * c_.kv_heads * head_elems;
        fp.k = k;
        fp.v = k + static_cast<size_t>(c_.kv_heads) * head_elems;
        launch_flash2(fp, s);
        launch_heads_to_rows(oh_.data(), rows, c_.heads, D, attn_.data(), s);
      } else {
        DecodeAttentionArgs a;
        row_attention_args(a, table, rows, l, scale);
        a.splits = splits;
        a.workspace = attn_ws_.data();
        launch_decode_attention(a, s);
      }
      gemm(s, L.wo.data(), attn_.data(), x_.data(), rows, qd, h, CUDA_R_32F, 1.0f);  // x += o_proj(attn)
      if (c_.o_bias) launch_add_bias_f32(x_.data(), L.bo.data(), rows, h, s);
      launch_add_rmsnorm(x_.data(), nullptr, L.post_norm.data(), c_.rms_eps, rows, h, h_.data(), s);
      if (!c_.mlp_bias && use_gemv(rows, h, 2 * mlp, L.wgu.data(), h_.data())) {
        launch_gemv_swiglu_bf16(L.wgu.data(), h_.data(), act_.data(), rows, h, mlp, sm_count_, s);  // gate/up + SwiGLU, one kernel
      } else {
        gemm(s, L.wgu.data(), h_.data(), gu_.data(), rows, h, 2 * mlp, CUDA_R_16BF, 0.0f);
        if (c_.mlp_bias) launch_add_bias_bf16(gu_.data(), L.bgu.data(), rows, 2 * mlp, s);
        launch_swiglu(gu_.data(), rows, mlp, act_.data(), s);
      }
      gemm(s, L.wd.data(), act_.data(), x_.data(), rows, mlp, h, CUDA_R_32F, 1.0f);  // x += down_proj(act)
      if (c_.mlp_bias) launch_add_bias_f32(x_.data(), L.bd.data(), rows, h, s);
    }
  }

  // Final norm and LM head of residual rows first .. first + count − 1 into logits_[0 .. count).
  void lm_head(cudaStream_t s, int first, int count) {
    const int h = c_.hidden;
    launch_add_rmsnorm(x_.data() + static_cast<size_t>(first) * h, nullptr, final_norm_.data(), c_.rms_eps, count, h, h_.data(), s);
    gemm(s, lm_head_weights(), h_.data(), logits_.data(), count, h, c_.vocab, CUDA_R_32F, 0.0f);
  }

  // Final norm, LM head and emit of residual rows 0 .. rows − 1 to out rows 0 .. rows − 1,
  // max_batch rows at a time (the logits buffer's size).
  void head_rows(const StepOutput& out, int rows) {
    for (int r = 0; r < rows;) {
      const int count = std::min(o_.max_batch, rows - r);
      lm_head(stream_, r, count);
      emit(out, r, count);
      r += count;
    }
  }

  // logits_[0 .. count) to out.logits rows out_row.., and/or their sampled tokens to out.next.
  void emit(const StepOutput& out, int out_row, int count) {
    const size_t vocab = static_cast<size_t>(c_.vocab);
    if (out.logits)
      IB_CUDA_CHECK(cudaMemcpyAsync(out.logits + static_cast<size_t>(out_row) * vocab, logits_.data(),
                                    sizeof(float) * vocab * static_cast<size_t>(count), cudaMemcpyDeviceToHost, stream_));
    if (out.next) {
      const SamplingParams& p = out.sampling;
      launch_sample(logits_.data(), count, c_.vocab, p.greedy() ? 0.0f : p.temperature, p.top_k, p.top_p, p.seed, out.step, out_row,
                    next_dev_.data(), stream_);
      IB_CUDA_CHECK(cudaMemcpyAsync(out.next + out_row, next_dev_.data(), sizeof(int32_t) * static_cast<size_t>(count),
                                    cudaMemcpyDeviceToHost, stream_));
    }
  }

  // Records the decode step of `batch` rows (reading the fixed step block) into a graph.
  // Captured on a private stream: the caller's stream may be the legacy default stream, which
  // cannot be captured; the graph is then launched on the caller's stream.
  void capture(int batch, const int32_t* step_tokens, const AttnRow* step_rows) {
    cudaStream_t cs = capture_stream_.get();
    bind_cublas(cs);
    IB_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    try {
      forward_layers(cs, batch, step_tokens, step_rows, nullptr);
      lm_head(cs, 0, batch);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      (void)cudaStreamEndCapture(cs, &broken);
      if (broken) (void)cudaGraphDestroy(broken);
      (void)cudaGetLastError();
      bind_cublas(stream_);
      throw;
    }
    cudaGraph_t g = nullptr;
    IB_CUDA_CHECK(cudaStreamEndCapture(cs, &g));
    OwnedGraph graph(g);
    cudaGraphExec_t e = nullptr;
    IB_CUDA_CHECK(cudaGraphInstantiate(&e, graph.get(), 0));
    graphs_.emplace(batch, std::make_unique<OwnedGraphExec>(e));
    bind_cublas(stream_);
  }

  ModelConfig c_;
  EngineOptions o_;
  cudaStream_t stream_;
  int sm_count_ = 1;
  int qkv_dim_ = 0;
  int64_t weight_bytes_ = 0;

  OwnedStream capture_stream_;
  DeviceBuffer<unsigned char> cublas_ws_;  // before the handle: destroyed after it
  OwnedCublas cublas_;
  OwnedEvent step_uploaded_;

  DeviceBuffer<double> inv_freq_;  // RoPE [head_dim / 2]
  Bf16Buffer embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;

  DeviceBuffer<float> x_, logits_, attn_ws_;
  Bf16Buffer h_, qkv_, attn_, gu_, act_, qh_, oh_;
  DeviceBuffer<int32_t> next_dev_, prefill_tokens_;
  DeviceBuffer<AttnRow> prefill_rows_;
  DeviceBuffer<unsigned char> step_dev_, tree_dev_;
  size_t step_rows_offset_ = 0;
  std::unique_ptr<PinnedBytes> step_host_;

  SequenceTable<Sequence> seqs_;
  std::map<int, std::unique_ptr<OwnedGraphExec>> graphs_;  // last: destroyed before the buffers they use
};

}  // namespace

std::unique_ptr<Model> make_cuda_model(const ModelConfig& c, const WeightSource& w, const EngineOptions& o, void* stream) {
  return std::make_unique<CudaModel>(c, w, o, static_cast<cudaStream_t>(stream));
}

}  // namespace ib::model
