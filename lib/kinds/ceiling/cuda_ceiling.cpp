// CUDA variants of the `ceiling` kind: device-to-device copy bandwidth and the cuBLAS GEMM rate.
// Compiled in every build: the declarations at the end are the variants' one declaration, the
// classes only where the CUDA backend is.
#include "core/registry.h"

#if INFER_BENCH_HAVE_CUDA
#include <cmath>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/cublas.h"
#include "core/cuda_memory.h"
#include "fill.h"
#include "kinds/ceiling/ceiling_keys.h"
#include "kinds/ceiling/gemm_check.h"
#include "numerics/cuda_check.h"
#include "numerics/dtype.h"
#include "numerics/random.h"

namespace ib {
namespace {

cudaStream_t stream_of(BackendRuntime& rt) { return static_cast<cudaStream_t>(rt.stream()); }

class CudaCopy : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    seed_ = seed;
    words_ = static_cast<size_t>(ceiling_keys().read(p).bytes) / sizeof(uint32_t);
    src_.allocate(words_, "copy source");
    dst_.allocate(words_, "copy destination");
    launch_fill_random(src_.data(), words_, DType::U32, seed, 1.0f, stream_of(rt));
    IB_CUDA_CHECK(cudaMemsetAsync(dst_.data(), 0xff, words_ * sizeof(uint32_t), stream_of(rt)));
  }
  // Compares 64 chunks of 16 KiB (the first, the last and random ones) with the generator.
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    rt.synchronize();
    const size_t chunk = std::min<size_t>(4096, words_);
    std::vector<uint32_t> host(chunk);
    size_t mismatches = 0;
    for (uint64_t c = 0; c < 64; ++c) {
      size_t start = c == 0 ? 0 : c == 1 ? words_ - chunk : static_cast<size_t>(random_bits(seed_ + 3, c) % (words_ - chunk + 1));
      IB_CUDA_CHECK(cudaMemcpy(host.data(), dst_.data() + start, chunk * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < chunk; ++i) mismatches += host[i] != static_cast<uint32_t>(random_bits(seed_, start + i));
    }
    return {mismatches == 0, "mismatches", static_cast<double>(mismatches), 0, "64 chunks of 16 KiB vs the generator"};
  }
  void run(BackendRuntime& rt) override {
    IB_CUDA_CHECK(cudaMemcpyAsync(dst_.data(), src_.data(), words_ * sizeof(uint32_t), cudaMemcpyDeviceToDevice, stream_of(rt)));
  }
  Work work() const override { return {0, 2.0 * static_cast<double>(words_ * sizeof(uint32_t))}; }

 private:
  uint64_t seed_ = 0;
  size_t words_ = 0;
  DeviceBuffer<uint32_t> src_, dst_;
};

class CublasGemm : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    const CeilingKeys params = ceiling_keys().read(p);
    m_ = params.m;
    n_ = params.n;
    k_ = params.k;
    dtype_ = *dtype_from_string(params.dtype);
    seed_ = seed;
    const size_t es = dtype_size(dtype_);
    a_.allocate(static_cast<size_t>(m_ * k_) * es, "gemm A");
    b_.allocate(static_cast<size_t>(k_ * n_) * es, "gemm B");
    c_.allocate(static_cast<size_t>(m_ * n_) * es, "gemm C");
    launch_fill_random(a_.data(), static_cast<size_t>(m_ * k_), dtype_, seed, 1.0f, stream_of(rt));
    launch_fill_random(b_.data(), static_cast<size_t>(k_ * n_), dtype_, seed + 1, 1.0f, stream_of(rt));
  }
  // The inputs are regenerated on the host (same generator, same rounding); C entries are read back.
  Validation validate(BackendRuntime& rt) override {
    IB_CUDA_CHECK(cudaMemsetAsync(c_.data(), 0xff, c_.bytes(), stream_of(rt)));  // NaN in every type
    run(rt);
    rt.synchronize();
    const size_t es = dtype_size(dtype_);
    const double worst = gemm_spot_check(
        m_, n_, k_,
        [&](int64_t i, int64_t q) { return round_to(dtype_, random_uniform(seed_, static_cast<uint64_t>(i * k_ + q))); },
        [&](int64_t q, int64_t j) { return round_to(dtype_, random_uniform(seed_ + 1, static_cast<uint64_t>(q * n_ + j))); },
        [&](int64_t i, int64_t j) {
          uint32_t raw = 0;
          IB_CUDA_CHECK(cudaMemcpy(&raw, c_.data() + static_cast<size_t>(i * n_ + j) * es, es, cudaMemcpyDeviceToHost));
          return dtype_ == DType::F32    ? bits_float(raw)
                 : dtype_ == DType::BF16 ? bf16_bits_to_float(static_cast<uint16_t>(raw))
                                         : fp16_bits_to_float(static_cast<uint16_t>(raw));
        },
        seed_ + 7, 64);
    // Rounding C to the output type costs up to half an ulp of |c| <= sum |a·b|.
    const double tol = dtype_ == DType::BF16 ? 5e-3 : dtype_ == DType::F16 ? 1e-3 : 1e-5;
    return {worst <= tol, "max_err/sum|ab|", worst, tol, "68 entries vs float64 dot products"};
  }
  // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: pass B first.
  void run(BackendRuntime& rt) override {
    const cudaDataType_t t = dtype_ == DType::BF16 ? CUDA_R_16BF : dtype_ == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
    const float alpha = 1.0f, beta = 0.0f;
    IB_CUBLAS_CHECK(cublasGemmEx(cublas_handle(stream_of(rt)), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n_),
                                 static_cast<int>(m_), static_cast<int>(k_), &alpha, b_.data(), t, static_cast<int>(n_),
                                 a_.data(), t, static_cast<int>(k_), &beta, c_.data(), t, static_cast<int>(n_),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  Work work() const override {
    const double m = static_cast<double>(m_), n = static_cast<double>(n_), k = static_cast<double>(k_);
    return {2.0 * m * n * k, static_cast<double>(dtype_size(dtype_)) * (m * k + k * n + m * n)};
  }

 private:
  int64_t m_ = 0, n_ = 0, k_ = 0;
  DType dtype_ = DType::BF16;
  uint64_t seed_ = 0;
  DeviceBuffer<uint8_t> a_, b_, c_;
};

}  // namespace
}  // namespace ib
#endif  // INFER_BENCH_HAVE_CUDA

namespace ib {
namespace {

const VariantRegistration reg_ceiling_copy("ceiling", {"copy", Backend::Cuda, "cudaMemcpyAsync device to device", {"bytes"}},
                                           IB_IF_CUDA(make_variant<CudaCopy>()));
const VariantRegistration reg_ceiling_gemm(
    "ceiling",
    {"gemm", Backend::Cuda, "cuBLAS cublasGemmEx, fp32 accumulation, tensor cores for bf16/fp16", {"m", "n", "k", "dtype"}},
    IB_IF_CUDA(make_variant<CublasGemm>()));

}  // namespace
}  // namespace ib
