// CPU variants of the `ceiling` kind: memcpy bandwidth and our blocked SGEMM.
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "ceiling/sgemm.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "core/random.h"
#include "core/registry.h"

namespace ib {
namespace {

class CpuMemcpy : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    words_ = static_cast<size_t>(p.integer("bytes")) / sizeof(uint32_t);
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
  std::string unsupported(const Point& p) const override {
    if (p.text("dtype") != "fp32") return "sgemm computes in fp32 only (dtype " + p.text("dtype") + ")";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    m_ = static_cast<int>(p.integer("m"));
    n_ = static_cast<int>(p.integer("n"));
    k_ = static_cast<int>(p.integer("k"));
    seed_ = seed;
    a_.allocate(static_cast<size_t>(m_) * k_, "sgemm A");
    b_.allocate(static_cast<size_t>(k_) * n_, "sgemm B");
    c_.allocate(static_cast<size_t>(m_) * n_, "sgemm C");
    for (size_t i = 0; i < a_.size(); ++i) a_[i] = random_uniform(seed, i);
    for (size_t i = 0; i < b_.size(); ++i) b_[i] = random_uniform(seed + 1, i);
  }
  // Spot-checks 256 entries (and the four corners) against a float64 dot product; the error
  // is normalised by sum |a·b| so that near-zero results do not inflate it.
  Validation validate(BackendRuntime& rt) override {
    std::fill(c_.begin(), c_.end(), std::nanf(""));
    run(rt);
    double worst = 0;
    auto check = [&](int i, int j) {
      double ref = 0, mag = 0;
      for (int p = 0; p < k_; ++p) {
        double x = static_cast<double>(a_[static_cast<size_t>(i) * k_ + p]) * b_[static_cast<size_t>(p) * n_ + j];
        ref += x;
        mag += std::fabs(x);
      }
      double got = c_[static_cast<size_t>(i) * n_ + j];
      double err = std::isfinite(got) ? std::fabs(got - ref) / (mag > 0 ? mag : 1) : INFINITY;
      worst = std::max(worst, err);
    };
    check(0, 0);
    check(0, n_ - 1);
    check(m_ - 1, 0);
    check(m_ - 1, n_ - 1);
    for (uint64_t s = 0; s < 256; ++s) {
      int i = static_cast<int>(random_bits(seed_ + 7, 2 * s) % static_cast<uint64_t>(m_));
      int j = static_cast<int>(random_bits(seed_ + 7, 2 * s + 1) % static_cast<uint64_t>(n_));
      check(i, j);
    }
    const double tol = 1e-5;
    return {worst <= tol, "max_err/sum|ab|", worst, tol, "260 entries vs float64 dot products"};
  }
  void run(BackendRuntime&) override { sgemm_blocked(m_, n_, k_, a_.data(), k_, b_.data(), n_, c_.data(), n_); }
  Work work() const override {
    const double m = m_, n = n_, k = k_;
    return {2.0 * m * n * k, 4.0 * (m * k + k * n + m * n)};
  }

 private:
  int m_ = 0, n_ = 0, k_ = 0;
  uint64_t seed_ = 0;
  HostBuffer<float> a_, b_, c_;
};

IB_REGISTER_VARIANT("ceiling", "memcpy", CpuMemcpy);
IB_REGISTER_VARIANT("ceiling", "sgemm", CpuSgemm);

}  // namespace
}  // namespace ib
