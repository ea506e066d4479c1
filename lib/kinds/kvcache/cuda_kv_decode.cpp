// CUDA variants of `kv-quant` (bf16, fp8, int8, int4, int2) and `kv-paged` (contiguous, paged): split-K
// decode attention (kernels/kv_decode_kernel.cuh, kv_decode_kivi.cuh) over a cache that the variant fills through its own
// quantize-on-append path from the counter-based inputs of decode_problem.h, so the gate checks
// the append kernels (stored bytes and scales) before it checks the attention. Compiled in every
// build: the declarations at the end are the variants' one declaration, the classes only where
// the CUDA backend is.
#include "core/registry.h"
#include "kinds/kvcache/kv_decode_keys.h"

#if INFER_BENCH_HAVE_CUDA
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/cuda_memory.h"
#include "fill.h"
#include "kinds/kvcache/decode_check.h"
#include "kv_decode.h"
#include "kvcache/decode_problem.h"
#include "numerics/cuda_check.h"
#include "numerics/dtype.h"
#include "numerics/half.h"

namespace ib::kvcache {
namespace {

cudaStream_t stream_of(BackendRuntime& rt) { return static_cast<cudaStream_t>(rt.stream()); }

// Staging for the bf16 K and V chunks the cache is appended from (both together).
constexpr size_t kStagingBytes = size_t{256} << 20;

KvElem elem_of(KvFormat f) {
  switch (f) {
    case KvFormat::BF16:
      return KvElem::BF16;
    case KvFormat::FP8:
      return KvElem::FP8;
    case KvFormat::INT8:
      return KvElem::INT8;
    case KvFormat::INT4:
    case KvFormat::INT2:
      break;
  }
  throw std::logic_error("kv decode: int4 and int2 have their own cache (KiviDecode)");
}

size_t elem_bytes(KvFormat f) { return f == KvFormat::BF16 ? 2 : 1; }

// The kernel parameters of a shape, without buffers: enough for kv_decode_unsupported.
KvDecodeParams params_of(const DecodeShape& s, int splits) {
  KvDecodeParams p;
  p.cache.elem = elem_of(s.format);
  p.cache.batch = s.batch;
  p.cache.kv_heads = s.kv_heads;
  p.cache.head_dim = s.head_dim;
  p.cache.capacity = s.paged() ? 0 : s.context;
  p.cache.block_size = s.paged() ? s.block_size : 0;
  p.cache.max_blocks = s.blocks_per_seq();
  p.heads = s.heads;
  p.max_length = s.context;  // sequence 0 always has the full context
  p.scale = static_cast<float>(s.scale());
  p.splits = splits;
  return p;
}

template <class T>
void upload(DeviceBuffer<T>& dst, const std::vector<T>& src, cudaStream_t st) {
  IB_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, st));
}

// The kernels' entry points by parameter type, for DecodeBase.
int decode_splits(const KvDecodeParams& p, int sms) { return kv_decode_splits(p, sms); }
int decode_splits(const KiviDecodeParams& p, int sms) { return kivi_decode_splits(p, sms); }
size_t decode_workspace_floats(const KvDecodeParams& p, int splits) { return kv_decode_workspace_floats(p, splits); }
size_t decode_workspace_floats(const KiviDecodeParams& p, int splits) { return kivi_decode_workspace_floats(p, splits); }
void launch_decode(const KvDecodeParams& p, cudaStream_t st) { launch_kv_decode(p, st); }
void launch_decode(const KiviDecodeParams& p, cudaStream_t st) { launch_kivi_decode(p, st); }

// What the decode-attention variants share whatever the cache: q, out, lengths, the split-K
// workspace, the gate (the stored cache as the host quantizer writes it, the output against
// float64 attention) and the metrics. A subclass allocates and fills its cache in fill_cache and
// reads one (sequence, kv head) back in fetch_head.
template <class Params>
class DecodeBase : public Variant {
 public:
  Validation validate(BackendRuntime& rt) override {
    cudaStream_t st = stream_of(rt);
    // 0xFFFF is a bf16 NaN: an output the kernels do not write stays NaN and fails the gate.
    IB_CUDA_CHECK(cudaMemsetAsync(out_.data(), 0xFF, out_.bytes(), st));
    run(rt);
    rt.synchronize();
    rt.check_errors();
    std::vector<uint16_t> out(out_.size());
    IB_CUDA_CHECK(cudaMemcpy(out.data(), out_.data(), out_.bytes(), cudaMemcpyDeviceToHost));
    const size_t d = static_cast<size_t>(s_.head_dim);
    check_ = check_decode(
        s_, in_, seed_, [&](int b, int kvh) { return fetch_head(b, kvh); },
        [&](int b, int h, int c) { return bf16_bits_to_float(out[(static_cast<size_t>(b) * s_.heads + h) * d + c]); }, 1e-2);
    return check_.gate;
  }

  void run(BackendRuntime& rt) override { launch_decode(params_, stream_of(rt)); }
  Work work() const override { return {s_.flops(), s_.io_bytes()}; }
  std::vector<Metric> metrics() const override {
    std::vector<Metric> m = decode_metrics(s_, check_);
    m.push_back({"splits", static_cast<double>(params_.splits), ""});
    return m;
  }

 protected:
  virtual void fill_cache(cudaStream_t st) = 0;
  virtual StoredHead fetch_head(int b, int kvh) const = 0;

  // How fill_cache feeds the cache the way a serving engine does: bf16 K/V of a chunk of tokens
  // of every sequence staged (stage(i)), then appended; first/count of every chunk uploaded once
  // (chunk i appends tokens [i·chunk, i·chunk + count) of each sequence). Released on return.
  struct Staging {
    int chunk = 0, chunks = 0;
    DeviceBuffer<int32_t> first, count;
    DeviceBuffer<uint16_t> k, v;
    const int32_t* first_of(int i) const { return first.data() + static_cast<size_t>(i) * batch; }
    const int32_t* count_of(int i) const { return count.data() + static_cast<size_t>(i) * batch; }
    int batch = 0;
  };
  Staging make_staging(cudaStream_t st) const {
    const int batch = s_.batch, kvh = s_.kv_heads, d = s_.head_dim, context = s_.context;
    const size_t per_token = size_t{2} * batch * kvh * d * sizeof(uint16_t);  // K and V of one token position
    Staging g;
    g.batch = batch;
    g.chunk = static_cast<int>(std::clamp<size_t>(kStagingBytes / per_token, 1, static_cast<size_t>(context)));
    g.chunks = (context + g.chunk - 1) / g.chunk;
    std::vector<int32_t> first(static_cast<size_t>(g.chunks) * batch), count(first.size());
    for (int i = 0; i < g.chunks; ++i)
      for (int b = 0; b < batch; ++b) {
        const size_t at = static_cast<size_t>(i) * batch + b;
        first[at] = i * g.chunk;
        count[at] = std::clamp(s_.length(b) - i * g.chunk, 0, g.chunk);
      }
    g.first.allocate(first.size(), "append positions");
    g.count.allocate(count.size(), "append counts");
    upload(g.first, first, st);
    upload(g.count, count, st);
    const size_t staged = static_cast<size_t>(batch) * kvh * g.chunk * d;
    g.k.allocate(staged, "staged K (bf16)");
    g.v.allocate(staged, "staged V (bf16)");
    return g;
  }
  // Chunk i's K and V (tokens i·chunk ..) of every sequence into the staging buffers.
  void stage(Staging& g, int i, cudaStream_t st) const {
    launch_kv_fill_chunk(g.k.data(), s_.batch, s_.kv_heads, s_.head_dim, g.chunk, i * g.chunk, s_.context, seed_ + 1, st);
    launch_kv_fill_chunk(g.v.data(), s_.batch, s_.kv_heads, s_.head_dim, g.chunk, i * g.chunk, s_.context, seed_ + 2, st);
  }

  // After the subclass set s_, seed_, in_ and params_ (with its cache view): q (random), out and
  // the lengths; the cache through fill_cache; then the splits and their workspace.
  void prepare_io(BackendRuntime& rt) {
    cudaStream_t st = stream_of(rt);
    const size_t q_elems = static_cast<size_t>(s_.batch) * s_.heads * s_.head_dim;
    q_.allocate(q_elems, "q");
    out_.allocate(q_elems, "out");
    launch_fill_random(q_.data(), q_elems, DType::BF16, seed_, DecodeInputs::kQScale, st);
    std::vector<int32_t> lengths(static_cast<size_t>(s_.batch));
    for (int b = 0; b < s_.batch; ++b) lengths[static_cast<size_t>(b)] = s_.length(b);
    lengths_.allocate(lengths.size(), "sequence lengths");
    upload(lengths_, lengths, st);
    params_.q = q_.data();
    params_.out = out_.data();
    params_.lengths = lengths_.data();

    fill_cache(st);
    rt.memory().reset_peak();  // the staging is gone: the row's peak is the cache, q, out and the workspace

    if (params_.splits == 0) {
      int dev = 0, sms = 0;
      IB_CUDA_CHECK(cudaGetDevice(&dev));
      IB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      params_.splits = decode_splits(params_, sms);
    }
    if (const size_t ws = decode_workspace_floats(params_, params_.splits); ws > 0) {
      workspace_.allocate(ws, "split-K partials (o, max, sum per split)");
      params_.workspace = workspace_.data();
    }
    IB_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  DecodeShape s_;
  DecodeInputs in_;
  uint64_t seed_ = 0;
  Params params_;
  DeviceBuffer<uint16_t> q_, out_;
  DeviceBuffer<int32_t> lengths_;
  DeviceBuffer<float> workspace_;
  DecodeCheck check_;
};

class CudaKvDecode : public DecodeBase<KvDecodeParams> {
 public:
  std::string unsupported(const Point& p) const override {
    const KvDecodeKeys k = keys_of(p);
    const DecodeShape s = shape_of(k);
    if (std::string why = decode_shape_problem(s); !why.empty()) return why;
    return kv_decode_unsupported(params_of(s, static_cast<int>(k.splits)));
  }

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const KvDecodeKeys k = keys_of(p);
    s_ = shape_of(k);
    seed_ = seed;
    in_ = decode_inputs(s_, seed);
    cudaStream_t st = stream_of(rt);
    params_ = params_of(s_, static_cast<int>(k.splits));
    KvCacheView& c = params_.cache;
    const size_t d = static_cast<size_t>(s_.head_dim), kvh = static_cast<size_t>(s_.kv_heads);
    const size_t batch = static_cast<size_t>(s_.batch);

    // The cache: rows of head_dim elements, one per (sequence or block slot, kv head, token).
    size_t rows = batch * kvh * static_cast<size_t>(s_.context);
    if (s_.paged()) {
      tables_ = build_block_tables(s_, seed);
      rows = static_cast<size_t>(tables_.num_blocks) * kvh * static_cast<size_t>(s_.block_size);
      table_.allocate(tables_.table.size(), "block tables");
      upload(table_, tables_.table, st);
      c.block_table = table_.data();
    }
    k_.allocate(rows * d * elem_bytes(s_.format), "K cache");
    v_.allocate(rows * d * elem_bytes(s_.format), "V cache");
    c.k = k_.data();
    c.v = v_.data();
    if (s_.format != KvFormat::BF16) {
      const size_t scales = s_.format == KvFormat::FP8 ? batch * kvh : rows;
      k_scale_.allocate(scales, "K scales");
      v_scale_.allocate(scales, "V scales");
      c.k_scale = k_scale_.data();
      c.v_scale = v_scale_.data();
    }

    prepare_io(rt);
  }

 protected:
  // The kind's keys of a point, and the shape with the format and layout this variant implies.
  virtual KvDecodeKeys keys_of(const Point& p) const = 0;
  virtual DecodeShape shape_of(const KvDecodeKeys& k) const = 0;

 private:
  // Fills the cache the way a serving engine does: bf16 K/V of a chunk of tokens of every
  // sequence are staged, then appended (quantized). fp8 first runs a calibration pass over all
  // chunks for the per-(sequence, head) amax, whose scale the append then uses. The staging is
  // released on return, before timing.
  void fill_cache(cudaStream_t st) override {
    const int batch = s_.batch, kvh = s_.kv_heads, d = s_.head_dim;
    Staging g = make_staging(st);
    if (s_.format == KvFormat::FP8) {
      const size_t heads = static_cast<size_t>(batch) * kvh;
      DeviceBuffer<float> k_amax(heads, "K amax"), v_amax(heads, "V amax");
      IB_CUDA_CHECK(cudaMemsetAsync(k_amax.data(), 0, k_amax.bytes(), st));
      IB_CUDA_CHECK(cudaMemsetAsync(v_amax.data(), 0, v_amax.bytes(), st));
      for (int i = 0; i < g.chunks; ++i) {
        stage(g, i, st);
        launch_kv_amax(k_amax.data(), v_amax.data(), g.k.data(), g.v.data(), batch, kvh, d, g.chunk, g.count_of(i), st);
      }
      std::vector<float> ks(heads), vs(heads);
      IB_CUDA_CHECK(cudaMemcpyAsync(ks.data(), k_amax.data(), k_amax.bytes(), cudaMemcpyDeviceToHost, st));
      IB_CUDA_CHECK(cudaMemcpyAsync(vs.data(), v_amax.data(), v_amax.bytes(), cudaMemcpyDeviceToHost, st));
      IB_CUDA_CHECK(cudaStreamSynchronize(st));
      for (size_t h = 0; h < heads; ++h) {
        ks[h] = fp8_scale(ks[h]);
        vs[h] = fp8_scale(vs[h]);
      }
      upload(k_scale_, ks, st);
      upload(v_scale_, vs, st);
    }
    for (int i = 0; i < g.chunks; ++i) {
      stage(g, i, st);
      launch_kv_append(params_.cache, g.k.data(), g.v.data(), g.chunk, g.first_of(i), g.count_of(i), st);
    }
    IB_CUDA_CHECK(cudaStreamSynchronize(st));  // the staging buffers are freed on return
  }

  // One (sequence, kv head) of the cache as stored, for check_decode: n = length(b) tokens of
  // elements and their scales; paged caches are gathered block by block through the table.
  StoredHead fetch_head(int b, int kvh) const override {
    const int n = s_.length(b);
    const size_t row_bytes = static_cast<size_t>(s_.head_dim) * elem_bytes(s_.format);
    const size_t seq_head = static_cast<size_t>(b) * s_.kv_heads + kvh;
    StoredHead h;
    h.k.resize(static_cast<size_t>(n) * row_bytes);
    h.v.resize(h.k.size());
    const bool int8 = s_.format == KvFormat::INT8;
    if (int8) {
      h.k_scale.resize(static_cast<size_t>(n));
      h.v_scale.resize(static_cast<size_t>(n));
    }
    // Copies `tokens` rows starting at cache row `row` into the head's token t.
    auto copy_rows = [&](size_t row, int t, int tokens) {
      const size_t bytes = static_cast<size_t>(tokens) * row_bytes, at = static_cast<size_t>(t) * row_bytes;
      IB_CUDA_CHECK(cudaMemcpy(h.k.data() + at, k_.data() + row * row_bytes, bytes, cudaMemcpyDeviceToHost));
      IB_CUDA_CHECK(cudaMemcpy(h.v.data() + at, v_.data() + row * row_bytes, bytes, cudaMemcpyDeviceToHost));
      if (int8) {
        IB_CUDA_CHECK(cudaMemcpy(h.k_scale.data() + t, k_scale_.data() + row, tokens * sizeof(float), cudaMemcpyDeviceToHost));
        IB_CUDA_CHECK(cudaMemcpy(h.v_scale.data() + t, v_scale_.data() + row, tokens * sizeof(float), cudaMemcpyDeviceToHost));
      }
    };
    if (s_.paged()) {
      const int bs = s_.block_size;
      for (int t = 0; t < n; t += bs) {
        const int32_t page = tables_.table[static_cast<size_t>(b) * tables_.max_blocks + t / bs];
        copy_rows((static_cast<size_t>(page) * s_.kv_heads + kvh) * bs, t, std::min(bs, n - t));
      }
    } else {
      copy_rows(seq_head * static_cast<size_t>(s_.context), 0, n);
    }
    if (s_.format == KvFormat::FP8) {
      h.k_scale.resize(1);
      h.v_scale.resize(1);
      IB_CUDA_CHECK(cudaMemcpy(h.k_scale.data(), k_scale_.data() + seq_head, sizeof(float), cudaMemcpyDeviceToHost));
      IB_CUDA_CHECK(cudaMemcpy(h.v_scale.data(), v_scale_.data() + seq_head, sizeof(float), cudaMemcpyDeviceToHost));
    }
    return h;
  }

  BlockTables tables_;
  DeviceBuffer<uint8_t> k_, v_;
  DeviceBuffer<float> k_scale_, v_scale_;
  DeviceBuffer<int32_t> table_;
};

// kv-quant: the format is the variant; block_size (0 = contiguous) comes from the point.
template <KvFormat F>
class QuantDecode : public CudaKvDecode {
 protected:
  KvDecodeKeys keys_of(const Point& p) const override { return kv_quant_keys().read(p); }
  DecodeShape shape_of(const KvDecodeKeys& k) const override { return decode_shape(k, F); }
};

// kv-paged: the format is kv_dtype; the variant is the layout.
class ContiguousDecode : public CudaKvDecode {
 protected:
  KvDecodeKeys keys_of(const Point& p) const override { return kv_paged_keys().read(p); }
  DecodeShape shape_of(const KvDecodeKeys& k) const override {
    DecodeShape s = decode_shape(k, k.kv_dtype);
    s.block_size = 0;
    return s;
  }
};

class PagedDecode : public CudaKvDecode {
 protected:
  KvDecodeKeys keys_of(const Point& p) const override { return kv_paged_keys().read(p); }
  DecodeShape shape_of(const KvDecodeKeys& k) const override { return decode_shape(k, k.kv_dtype); }
};

// kv-quant int4 / int2: the KIVI cache (contiguous) of kv_decode.h with B = kivi_bits(F), filled
// by launch_kivi_append in chunks of tokens (a key group can span two chunks: its first tokens
// wait in the residual).
template <KvFormat F>
class KiviDecode : public DecodeBase<KiviDecodeParams> {
  static_assert(is_kivi(F), "KiviDecode holds an int4 or int2 cache");

 public:
  std::string unsupported(const Point& p) const override {
    const KvDecodeKeys k = kv_quant_keys().read(p);
    const DecodeShape s = decode_shape(k, F);
    if (std::string why = decode_shape_problem(s); !why.empty()) return why;
    return kivi_decode_unsupported(params_of(s, static_cast<int>(k.splits)));
  }

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const KvDecodeKeys k = kv_quant_keys().read(p);
    s_ = decode_shape(k, F);
    seed_ = seed;
    in_ = decode_inputs(s_, seed);
    params_ = params_of(s_, static_cast<int>(k.splits));
    KiviCacheView& c = params_.cache;
    const size_t pairs = static_cast<size_t>(s_.batch) * s_.kv_heads, d = static_cast<size_t>(s_.head_dim);
    const size_t ctx = static_cast<size_t>(s_.context), G = static_cast<size_t>(s_.kivi_group);
    k_codes_.allocate(pairs * ctx * row_bytes(), "K codes");
    v_codes_.allocate(k_codes_.size(), "V codes");
    k_params_.allocate(pairs * key_groups() * d, "K (scale, zero) per group and channel");
    v_params_.allocate(pairs * ctx * (d / G), "V (scale, zero) per token and channel group");
    k_res_.allocate(pairs * G * d, "K residual (bf16)");
    v_res_.allocate(k_res_.size(), "V residual (bf16)");
    c.k_codes = k_codes_.data();
    c.v_codes = v_codes_.data();
    c.k_params = k_params_.data();
    c.v_params = v_params_.data();
    c.k_residual = k_res_.data();
    c.v_residual = v_res_.data();
    prepare_io(rt);
  }

 private:
  static KiviDecodeParams params_of(const DecodeShape& s, int splits) {
    KiviDecodeParams p;
    p.cache.batch = s.batch;
    p.cache.kv_heads = s.kv_heads;
    p.cache.head_dim = s.head_dim;
    p.cache.capacity = s.context;
    p.cache.group = s.kivi_group;
    p.cache.bits = kivi_bits(F);
    p.heads = s.heads;
    p.max_length = s.context;
    p.scale = static_cast<float>(s.scale());
    p.splits = splits;
    return p;
  }
  size_t key_groups() const { return static_cast<size_t>((s_.context + s_.kivi_group - 1) / s_.kivi_group); }
  size_t row_bytes() const { return static_cast<size_t>(kivi_row_bytes(s_.head_dim, kivi_bits(F))); }

  // Staged bf16 chunks of every sequence appended in order; the chunk is not a multiple of the
  // group in general, so groups complete across appends.
  void fill_cache(cudaStream_t st) override {
    Staging g = make_staging(st);
    for (int i = 0; i < g.chunks; ++i) {
      stage(g, i, st);
      launch_kivi_append(params_.cache, g.k.data(), g.v.data(), g.chunk, g.first_of(i), g.count_of(i), st);
    }
    IB_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  // The stored form of decode_problem.h: code rows of the full groups, the residual's bf16
  // rows, the (scale, zero) pairs as floats.
  StoredHead fetch_head(int b, int kvh) const override {
    const size_t pair = static_cast<size_t>(b) * s_.kv_heads + kvh, d = static_cast<size_t>(s_.head_dim);
    const size_t ctx = static_cast<size_t>(s_.context), G = static_cast<size_t>(s_.kivi_group), row = row_bytes();
    const size_t n = static_cast<size_t>(s_.length(b)), nq = static_cast<size_t>(s_.quantized_length(b));
    StoredHead h;
    h.k.resize(nq * row + (n - nq) * d * 2);
    h.v.resize(h.k.size());
    auto get = [](void* dst, const void* src, size_t bytes) {
      if (bytes > 0) IB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
    };
    get(h.k.data(), k_codes_.data() + pair * ctx * row, nq * row);
    get(h.v.data(), v_codes_.data() + pair * ctx * row, nq * row);
    get(h.k.data() + nq * row, k_res_.data() + pair * G * d, (n - nq) * d * 2);
    get(h.v.data() + nq * row, v_res_.data() + pair * G * d, (n - nq) * d * 2);
    std::vector<uint32_t> kp(nq / G * d), vp(nq * (d / G));
    get(kp.data(), k_params_.data() + pair * key_groups() * d, kp.size() * sizeof(uint32_t));
    get(vp.data(), v_params_.data() + pair * ctx * (d / G), vp.size() * sizeof(uint32_t));
    for (uint32_t x : kp) {
      h.k_scale.push_back(fp16_bits_to_float(static_cast<uint16_t>(x & 0xffffu)));
      h.k_scale.push_back(fp16_bits_to_float(static_cast<uint16_t>(x >> 16)));
    }
    for (uint32_t x : vp) {
      h.v_scale.push_back(fp16_bits_to_float(static_cast<uint16_t>(x & 0xffffu)));
      h.v_scale.push_back(fp16_bits_to_float(static_cast<uint16_t>(x >> 16)));
    }
    return h;
  }

  DeviceBuffer<uint8_t> k_codes_, v_codes_;
  DeviceBuffer<uint32_t> k_params_, v_params_;
  DeviceBuffer<uint16_t> k_res_, v_res_;
};

}  // namespace
}  // namespace ib::kvcache
#endif  // INFER_BENCH_HAVE_CUDA

namespace ib::kvcache {
namespace {

const VariantRegistration reg_kv_quant_bf16("kv-quant",
                                            {"bf16", Backend::Cuda, "bf16 cache (2 bytes/element): the baseline",
                                             quant_variant_keys(true, KvFormat::BF16)},
                                            IB_IF_CUDA(make_variant<QuantDecode<KvFormat::BF16>>()));
const VariantRegistration reg_kv_quant_fp8(
    "kv-quant",
    {"fp8", Backend::Cuda, "FP8 e4m3 cache, one scale per (sequence, kv head) for K and V, dequantized in registers",
     quant_variant_keys(true, KvFormat::FP8)},
    IB_IF_CUDA(make_variant<QuantDecode<KvFormat::FP8>>()));
const VariantRegistration reg_kv_quant_int8("kv-quant",
                                            {"int8", Backend::Cuda,
                                             "INT8 cache, one scale per (token, kv head) for K and V, dequantized in registers",
                                             quant_variant_keys(true, KvFormat::INT8)},
                                            IB_IF_CUDA(make_variant<QuantDecode<KvFormat::INT8>>()));
const VariantRegistration reg_kv_quant_int4(
    "kv-quant",
    {"int4", Backend::Cuda,
     "int4 KIVI cache: keys per channel and values per token (fp16 scale and zero per group of int4_group), the last "
     "length mod int4_group tokens bf16; contiguous only",
     quant_variant_keys(true, KvFormat::INT4)},
    IB_IF_CUDA(make_variant<KiviDecode<KvFormat::INT4>>()));
const VariantRegistration reg_kv_quant_int2(
    "kv-quant",
    {"int2", Backend::Cuda,
     "int2 KIVI cache (the paper's 2-bit setting): the int4 layout with 4 codes per byte, fp16 scale and zero per group "
     "of int2_group, the last length mod int2_group tokens bf16; contiguous only",
     quant_variant_keys(true, KvFormat::INT2)},
    IB_IF_CUDA(make_variant<KiviDecode<KvFormat::INT2>>()));
const VariantRegistration reg_kv_paged_contiguous("kv-paged",
                                                  {"contiguous",
                                                   Backend::Cuda,
                                                   "one [kv_heads][context][head_dim] buffer per sequence: the baseline",
                                                   {"batch", "heads", "kv_heads", "head_dim", "context", "ragged", "splits",
                                                    "kv_dtype"}},
                                                  IB_IF_CUDA(make_variant<ContiguousDecode>()));
const VariantRegistration reg_kv_paged_paged(
    "kv-paged", {"paged", Backend::Cuda, "blocks of block_size tokens through a block table (PagedAttention)", {}},
    IB_IF_CUDA(make_variant<PagedDecode>()));

}  // namespace
}  // namespace ib::kvcache
