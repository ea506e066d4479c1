// CUDA variants of `attention`: standard (cuBLAS + our softmax kernel), flash1 and flash2 (our
// fused kernels, kernels/attention_flash1.cu, attention_flash2.cu), flash3 (Hopper only, kernels/attention_flash3.cu).
// Inputs are filled on the device with the same counter-based values the CPU reference regenerates.
// Compiled in every build: the declarations at the end are the variants' one declaration, the
// classes only where the CUDA backend is.
#include "core/registry.h"
#include "kinds/attention/problem.h"

#if INFER_BENCH_HAVE_CUDA
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "attention.h"
#include "core/cublas.h"
#include "core/cuda_memory.h"
#include "fill.h"
#include "kinds/attention/cuda_params.h"
#include "kinds/attention/problem.h"
#include "kinds/attention/variant_common.h"
#include "numerics/cuda_check.h"
#include "numerics/half.h"

namespace ib::attention {
namespace {

cudaStream_t stream_of(BackendRuntime& rt) { return static_cast<cudaStream_t>(rt.stream()); }

class CudaAttention : public Variant {
 public:
  std::string unsupported(const Point& p) const override {
    const AttentionShape s = attention_shape(p);
    if (std::string why = shape_problem(s); !why.empty()) return why;
    return kernel_unsupported(params_of(s));
  }
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const AttentionKeys params = attention_keys().read(p);
    s_ = attention_shape(params);
    in_ = {seed, s_.dtype};
    seed_ = seed;
    score_table_ = params.score_table;
    const size_t es = dtype_size(s_.dtype);
    q_.allocate(static_cast<size_t>(s_.q_elems()) * es, "Q");
    k_.allocate(static_cast<size_t>(s_.kv_elems()) * es, "K");
    v_.allocate(static_cast<size_t>(s_.kv_elems()) * es, "V");
    o_.allocate(static_cast<size_t>(s_.q_elems()) * es, "O");
    cudaStream_t st = stream_of(rt);
    launch_fill_random(q_.data(), static_cast<size_t>(s_.q_elems()), s_.dtype, seed, AttentionInputs::kQScale, st);
    launch_fill_random(k_.data(), static_cast<size_t>(s_.kv_elems()), s_.dtype, seed + 1, AttentionInputs::kKScale, st);
    launch_fill_random(v_.data(), static_cast<size_t>(s_.kv_elems()), s_.dtype, seed + 2, AttentionInputs::kVScale, st);
    params_ = params_of(s_);
    params_.q = q_.data();
    params_.k = k_.data();
    params_.v = v_.data();
    params_.o = o_.data();
    mem_ = &rt.memory();
    io_bytes_ = mem_->current();
    allocate_workspace();
  }
  Validation validate(BackendRuntime& rt) override {
    // 0xFFFF is a NaN in bf16 and in fp16: an element the kernel does not write stays NaN.
    IB_CUDA_CHECK(cudaMemsetAsync(o_.data(), 0xFF, o_.size(), stream_of(rt)));
    run(rt);
    rt.synchronize();
    rt.check_errors();
    std::vector<uint16_t> host(static_cast<size_t>(s_.q_elems()));
    IB_CUDA_CHECK(cudaMemcpy(host.data(), o_.data(), o_.size(), cudaMemcpyDeviceToHost));
    const int d = s_.head_dim;
    const bool f16 = s_.dtype == DType::F16;
    return check_output(
        s_, in_, seed_,
        [&](int64_t r, int c) {
          const uint16_t bits = host[static_cast<size_t>(r * d + c)];
          return f16 ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
        },
        output_tolerance(s_.dtype));
  }
  Work work() const override { return {s_.flops(), s_.io_bytes()}; }
  std::vector<Metric> metrics() const override {
    std::vector<Metric> m = {{"extra mem", static_cast<double>(mem_->peak() - io_bytes_) / (1 << 20), "MiB"}};
    if (score_table_) append_score_table(s_, m);
    return m;
  }

 protected:
  virtual std::string kernel_unsupported(const AttentionParams&) const { return {}; }
  virtual void allocate_workspace() {}
  static AttentionParams params_of(const AttentionShape& s) { return attention_params(s); }

  AttentionShape s_;
  AttentionInputs in_;
  uint64_t seed_ = 0;
  bool score_table_ = false;
  AttentionParams params_;
  DeviceBuffer<uint8_t> q_, k_, v_, o_;
  MemoryTracker* mem_ = nullptr;
  int64_t io_bytes_ = 0;
};

// ---- standard: the chapter's three passes, as a competent engineer writes them without fusion ----
class Standard : public CudaAttention {
 public:
  void run(BackendRuntime& rt) override {
    cudaStream_t st = stream_of(rt);
    const cudaDataType_t t = s_.dtype == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
    const int g = s_.group(), d = s_.head_dim, nq = s_.seq_q, nk = s_.seq_k, m = g * nq;
    const int batches = s_.batch * s_.kv_heads;  // one GEMM per (batch, kv head): its g query heads are contiguous
    const float alpha = static_cast<float>(s_.scale()), one = 1.0f, zero = 0.0f;
    // Row-major S (m × n_k) = Q (m × d) · Kᵀ is column-major Sᵀ = K·Qᵀ: A = K (stored d × n_k
    // column-major, transposed), B = Q (d × m column-major).
    IB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_handle(st), CUBLAS_OP_T, CUBLAS_OP_N, nk, m, d, &alpha, k_.data(), t, d,
                                               int64_t{nk} * d, q_.data(), t, d, int64_t{m} * d, &zero, scores_.data(), t, nk,
                                               int64_t{m} * nk, batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    launch_attention_softmax(scores_.data(), probs_.data(), s_.rows(), nq, nk, s_.causal, s_.causal ? s_.window : 0,
                             s_.dtype == DType::F16, st);
    // Row-major O (m × d) = P (m × n_k) · V (n_k × d) is column-major Oᵀ = Vᵀ·Pᵀ.
    IB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_handle(st), CUBLAS_OP_N, CUBLAS_OP_N, d, m, nk, &one, v_.data(), t, d,
                                               int64_t{nk} * d, probs_.data(), t, nk, int64_t{m} * nk, &zero, o_.data(), t, d,
                                               int64_t{m} * d, batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  Work work() const override {
    // Useful FLOPs as for every variant (the GEMMs also compute the masked half); S and P
    // each written once and read once.
    const double nn = static_cast<double>(s_.rows()) * s_.seq_k;
    return {s_.flops(), s_.io_bytes() + 4.0 * nn * static_cast<double>(dtype_size(s_.dtype))};
  }

 protected:
  void allocate_workspace() override {
    const size_t bytes = static_cast<size_t>(s_.rows()) * static_cast<size_t>(s_.seq_k) * dtype_size(s_.dtype);
    scores_.allocate(bytes, "S = scale·Q·Kᵀ (n_q × n_k per head)");
    probs_.allocate(bytes, "P = softmax(S) (n_q × n_k per head)");
  }

 private:
  DeviceBuffer<uint8_t> scores_, probs_;
};

class Flash1 : public CudaAttention {
 public:
  void run(BackendRuntime& rt) override { launch_flash1(params_, workspace_.data(), stream_of(rt)); }

 protected:
  std::string kernel_unsupported(const AttentionParams& p) const override { return flash1_unsupported(p); }
  void allocate_workspace() override {
    workspace_.allocate(flash1_workspace_floats(params_), "flash1 running output and softmax statistics (fp32)");
  }

 private:
  DeviceBuffer<float> workspace_;
};

// A fused kernel without workspace: its launcher and the reason it refuses a problem.
template <void (*Launch)(const AttentionParams&, cudaStream_t), std::string (*Unsupported)(const AttentionParams&)>
class FusedAttention : public CudaAttention {
 public:
  void run(BackendRuntime& rt) override { Launch(params_, stream_of(rt)); }

 protected:
  std::string kernel_unsupported(const AttentionParams& p) const override { return Unsupported(p); }
};
using Flash2 = FusedAttention<launch_flash2, flash2_unsupported>;
using Flash3 = FusedAttention<launch_flash3, flash3_unsupported>;  // Hopper only: unsupported elsewhere

}  // namespace
}  // namespace ib::attention
#endif  // INFER_BENCH_HAVE_CUDA

namespace ib::attention {
namespace {

const VariantRegistration reg_attention_standard(
    "attention",
    {"standard", Backend::Cuda,
     "three passes: S = scale·Q·Kᵀ (cuBLAS strided-batched GEMM, bf16/fp16 out) -> row softmax kernel writing P "
     "(causal mask applied there) -> O = P·V (cuBLAS); S and P are n×n per head in HBM",
     attention_shape_keys()},
    IB_IF_CUDA(make_variant<Standard>()));
const VariantRegistration reg_attention_flash1(
    "attention",
    {"flash1", Backend::Cuda,
     "FlashAttention-1 structure: one block per (batch, head), K/V tiles outer, Q tiles inner, running output and "
     "softmax statistics re-read and re-written in HBM for every K/V tile",
     attention_shape_keys()},
    IB_IF_CUDA(make_variant<Flash1>()));
const VariantRegistration reg_attention_flash2(
    "attention",
    {"flash2", Backend::Cuda,
     "FlashAttention-2 structure: blocks over query tiles × heads × batch, Q in registers, K/V tiles double-buffered "
     "through shared memory (cp.async), mma.sync m16n8k16 tensor cores, deferred rescaling, causal tiles skipped",
     attention_shape_keys()},
    IB_IF_CUDA(make_variant<Flash2>()));
const VariantRegistration reg_attention_flash3(
    "attention",
    {"flash3", Backend::Cuda,
     "FlashAttention-3 structure, Hopper (sm_90) only: a producer warp loads K/V tiles with TMA into a two-stage "
     "shared-memory ring (mbarriers), two consumer warpgroups run wgmma (S = Q·Kᵀ from shared memory, O += P·V with "
     "P in registers) and the online softmax, the softmax of one tile overlapping the P·V of the previous; "
     "unsupported on other GPUs",
     attention_shape_keys()},
    IB_IF_CUDA(make_variant<Flash3>()));

}  // namespace
}  // namespace ib::attention
