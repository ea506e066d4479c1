// CPU variants of the `ceiling` kind: memcpy bandwidth, our blocked SGEMM and OpenBLAS's.
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/memory.h"
#include "core/registry.h"
#include "kinds/ceiling/ceiling_keys.h"
#include "kinds/ceiling/gemm_check.h"
#include "numerics/blas_sgemm.h"
#include "numerics/parallel.h"
#include "numerics/random.h"
#include "numerics/sgemm.h"

namespace ib {
namespace {

class CpuMemcpy : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    words_ = static_cast<size_t>(ceiling_keys().read(p).bytes) / sizeof(uint32_t);
    src_.allocate(words_, "memcpy source");
    dst_.allocate(words_, "memcpy destination");
    parallel_for(words_, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) src_[i] = static_cast<uint32_t>(random_bits(seed, i));
      std::memset(dst_.data() + b, 0xff, (e - b) * sizeof(uint32_t));
    });
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    size_t mismatches = 0;
    for (size_t i = 0; i < words_; ++i) mismatches += src_[i] != dst_[i];
    return {mismatches == 0, "mismatches", static_cast<double>(mismatches), 0, "every word compared with the source"};
  }
  void run(BackendRuntime&) override {
    parallel_for(words_, [&](size_t b, size_t e) { std::memcpy(dst_.data() + b, src_.data() + b, (e - b) * sizeof(uint32_t)); });
  }
  Work work() const override { return {0, 2.0 * static_cast<double>(words_ * sizeof(uint32_t))}; }

 private:
  size_t words_ = 0;
  HostBuffer<uint32_t> src_, dst_;
};

class CpuSgemm : public Variant {
 public:
  explicit CpuSgemm(bool blas) : blas_(blas) {}
  std::string unsupported(const Point& p) const override {
    const std::string dtype = ceiling_keys().read(p).dtype;
    if (dtype != "fp32") return "sgemm computes in fp32 only (dtype " + dtype + ")";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const CeilingKeys params = ceiling_keys().read(p);
    m_ = params.m;
    n_ = params.n;
    k_ = params.k;
    seed_ = seed;
    a_.allocate(static_cast<size_t>(m_) * k_, "sgemm A");
    b_.allocate(static_cast<size_t>(k_) * n_, "sgemm B");
    c_.allocate(static_cast<size_t>(m_) * n_, "sgemm C");
    for (size_t i = 0; i < a_.size(); ++i) a_[i] = random_uniform(seed, i);
    for (size_t i = 0; i < b_.size(); ++i) b_[i] = random_uniform(seed + 1, i);
  }
  Validation validate(BackendRuntime& rt) override {
    std::fill(c_.begin(), c_.end(), std::nanf(""));
    run(rt);
    const double worst = gemm_spot_check(
        m_, n_, k_, [&](int64_t i, int64_t p) { return a_[static_cast<size_t>(i * k_ + p)]; },
        [&](int64_t p, int64_t j) { return b_[static_cast<size_t>(p * n_ + j)]; },
        [&](int64_t i, int64_t j) { return c_[static_cast<size_t>(i * n_ + j)]; }, seed_ + 7, 256);
    const double tol = 1e-5;
    return {worst <= tol, "max_err/sum|ab|", worst, tol, "260 entries vs float64 dot products"};
  }
  void run(BackendRuntime&) override {
    const int m = static_cast<int>(m_), n = static_cast<int>(n_), k = static_cast<int>(k_);
    if (blas_)
      blas_sgemm(m, n, k, a_.data(), k, b_.data(), n, c_.data(), n);
    else
      sgemm_blocked(m, n, k, a_.data(), k, b_.data(), n, c_.data(), n);
  }
  std::string note() const override { return blas_ ? blas_description() : std::string(); }
  Work work() const override {
    const double m = static_cast<double>(m_), n = static_cast<double>(n_), k = static_cast<double>(k_);
    return {2.0 * m * n * k, 4.0 * (m * k + k * n + m * n)};
  }

 private:
  bool blas_;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  uint64_t seed_ = 0;
  HostBuffer<float> a_, b_, c_;
};

const VariantRegistration reg_ceiling_memcpy("ceiling", {"memcpy", Backend::Cpu, "memcpy split over the CPU threads", {"bytes"}},
                                             make_variant<CpuMemcpy>());
const VariantRegistration reg_ceiling_sgemm("ceiling",
                                            {"sgemm",
                                             Backend::Cpu,
                                             "our blocked, packed (6×16 AVX2/FMA register tile), multithreaded SGEMM; fp32 only",
                                             {"m", "n", "k", "dtype"}},
                                            make_variant<CpuSgemm>(false));
const VariantRegistration reg_ceiling_blas_sgemm(
    "ceiling",
    {"blas_sgemm",
     Backend::Cpu,
     "OpenBLAS's SGEMM (Debian's libopenblas, its kernels for this CPU) split over the CPU threads by 64-column slices, as "
     "the engine's prefill calls it: the CPU's GEMM ceiling; fp32 only",
     {"m", "n", "k", "dtype"}},
    make_variant<CpuSgemm>(true));

}  // namespace
}  // namespace ib
