// CUDA variants of `constrain-overhead`: the LM head (cuBLAS bf16 GEMV to fp32 logits) followed
// by a greedy choice, with and without the step's token bitmask (uploaded every step). Compiled in every build: the
// declarations at the end are the variants' one declaration, the classes only where the CUDA
// backend is.
#include "core/registry.h"

#if INFER_BENCH_HAVE_CUDA
#include <cmath>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "constrain/masked_argmax.h"
#include "constrain/token_index.h"
#include "constrain_mask.h"
#include "core/cublas.h"
#include "core/cuda_memory.h"
#include "fill.h"
#include "kinds/constrain/constrain_keys.h"
#include "numerics/cuda_check.h"
#include "numerics/dtype.h"
#include "numerics/random.h"

namespace ib::constrain {
namespace {

cudaStream_t stream_of(BackendRuntime& rt) { return static_cast<cudaStream_t>(rt.stream()); }

class CudaLmHead : public Variant {
 public:
  explicit CudaLmHead(bool masked) : masked_(masked) {}
  std::string unsupported(const Point& p) const override {
    LmHeadShape sh;
    return lm_head_shape(overhead_keys().read(p).model, &sh) ? "" : "unknown model";
  }
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const OverheadKeys k = overhead_keys().read(p);
    lm_head_shape(k.model, &shape_);
    seed_ = seed;
    const size_t h = static_cast<size_t>(shape_.hidden), v = static_cast<size_t>(shape_.vocab), words = (v + 31) / 32;
    w_.allocate(h * v * 2, "LM head weights (bf16)");
    x_.allocate(h * 2, "hidden state (bf16)");
    logits_.allocate(v, "logits");
    token_.allocate(1, "chosen token");
    mask_dev_.allocate(words, "token mask");
    launch_fill_random(w_.data(), h * v, DType::BF16, seed, 0.05f, stream_of(rt));
    launch_fill_random(x_.data(), h, DType::BF16, seed + 1, 1.0f, stream_of(rt));
    void* pinned = nullptr;
    IB_CUDA_CHECK(cudaMallocHost(&pinned, words * sizeof(uint32_t)));
    mask_host_ = static_cast<uint32_t*>(pinned);
    const double density = k.mask_density;
    for (size_t w = 0; w < words; ++w) mask_host_[w] = 0;
    for (size_t t = 0; t < v; ++t)
      if (static_cast<double>(random_bits(seed + 2, t) % 1000000) < density * 1e6) mask_host_[t >> 5] |= 1u << (t & 31);
  }
  ~CudaLmHead() override {
    if (mask_host_) (void)cudaFreeHost(mask_host_);
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    rt.synchronize();
    int32_t got = -1;
    IB_CUDA_CHECK(cudaMemcpy(&got, token_.data(), sizeof got, cudaMemcpyDeviceToHost));
    // Reference: float64 logits of the regenerated bf16 inputs, argmax among allowed tokens.
    const int64_t h = shape_.hidden;
    std::vector<double> x(static_cast<size_t>(h));
    for (int64_t i = 0; i < h; ++i)
      x[static_cast<size_t>(i)] = round_to(DType::BF16, random_uniform(seed_ + 1, static_cast<uint64_t>(i)));
    auto logit = [&](int32_t t) {
      double acc = 0;
      for (int64_t i = 0; i < h; ++i)
        acc += static_cast<double>(round_to(DType::BF16, 0.05f * random_uniform(seed_, static_cast<uint64_t>(t * h + i)))) *
               x[static_cast<size_t>(i)];
      return acc;
    };
    int32_t want = -1;
    double want_v = -INFINITY;
    for (int32_t t = 0; t < shape_.vocab; ++t) {
      if (masked_ && !mask_allows(mask_host_, t)) continue;
      const double v = logit(t);
      if (want < 0 || v > want_v) {
        want = t;
        want_v = v;
      }
    }
    const bool allowed = got >= 0 && got < shape_.vocab && (!masked_ || mask_allows(mask_host_, got));
    const double gap = allowed ? std::fabs(logit(got) - want_v) : INFINITY;
    return {allowed && gap <= 1e-3, "logit_gap", gap, 1e-3, fmt::format("picked {}, float64 picks {}", got, want)};
  }
  // One decode step's tail: logits = W·x, [bitmask upload], greedy choice, token back to the host.
  void run(BackendRuntime& rt) override {
    cudaStream_t s = stream_of(rt);
    const float alpha = 1.0f, beta = 0.0f;
    // Row-major W [vocab × hidden] is column-major Wᵀ: logits = (Wᵀ)ᵀ·x.
    IB_CUBLAS_CHECK(cublasGemmEx(cublas_handle(s), CUBLAS_OP_T, CUBLAS_OP_N, shape_.vocab, 1, shape_.hidden, &alpha, w_.data(),
                                 CUDA_R_16BF, shape_.hidden, x_.data(), CUDA_R_16BF, shape_.hidden, &beta, logits_.data(),
                                 CUDA_R_32F, shape_.vocab, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    const size_t words = (static_cast<size_t>(shape_.vocab) + 31) / 32;
    if (masked_)
      IB_CUDA_CHECK(cudaMemcpyAsync(mask_dev_.data(), mask_host_, words * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
    launch_masked_argmax(logits_.data(), masked_ ? mask_dev_.data() : nullptr, shape_.vocab, 1, token_.data(), s);
    IB_CUDA_CHECK(cudaMemcpyAsync(&host_token_, token_.data(), sizeof host_token_, cudaMemcpyDeviceToHost, s));
  }
  Work work() const override {
    const double h = shape_.hidden, v = shape_.vocab;
    return {2 * h * v, 2 * h * v + 2 * h + 4 * v};
  }

 private:
  bool masked_;
  LmHeadShape shape_{};
  uint64_t seed_ = 0;
  DeviceBuffer<uint8_t> w_, x_;
  DeviceBuffer<float> logits_;
  DeviceBuffer<int32_t> token_;
  DeviceBuffer<uint32_t> mask_dev_;
  uint32_t* mask_host_ = nullptr;  // pinned: the per-step upload is a real async copy
  int32_t host_token_ = -1;
};

}  // namespace
}  // namespace ib::constrain
#endif  // INFER_BENCH_HAVE_CUDA

namespace ib::constrain {
namespace {

const VariantListRegistration cuda_overhead_variants(
    "constrain-overhead",
    {{{"lm_head_argmax", Backend::Cuda, "cuBLAS bf16 GEMV to fp32 logits, then a device argmax", {}},
      IB_IF_CUDA(make_variant<CudaLmHead>(false))},
     {{"lm_head_masked_argmax", Backend::Cuda, "the same, with the step's bitmask uploaded and applied in the argmax kernel", {}},
      IB_IF_CUDA(make_variant<CudaLmHead>(true))}});

}  // namespace
}  // namespace ib::constrain
