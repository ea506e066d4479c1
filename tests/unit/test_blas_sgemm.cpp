// The OpenBLAS prefill GEMM against our SGEMM on shapes whose columns do not fill its 64-column
// slices, with row strides wider than the matrices, on one and on several threads; and the
// kernels OpenBLAS chose are named (and are not its SSE3 fallback on a CPU with AVX2).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "numerics/blas_sgemm.h"
#include "numerics/random.h"
#include "numerics/sgemm.h"

namespace ib {
namespace {

TEST(BlasSgemm, MatchesOurSgemmWithinRounding) {
  for (auto [m, n, k] : {std::tuple{37, 130, 70}, {64, 64, 64}, {100, 1000, 384}, {5, 3, 2}}) {
    const int lda = k + 3, ldb = n + 5, ldc = n + 1;
    std::vector<float> A(static_cast<size_t>(m) * lda), B(static_cast<size_t>(k) * ldb);
    for (size_t i = 0; i < A.size(); ++i) A[i] = random_uniform(1, i);
    for (size_t i = 0; i < B.size(); ++i) B[i] = random_uniform(2, i);
    std::vector<float> want(static_cast<size_t>(m) * ldc, 7.0f), got(want);
    sgemm_blocked(m, n, k, A.data(), lda, B.data(), ldb, want.data(), ldc);
    blas_sgemm(m, n, k, A.data(), lda, B.data(), ldb, got.data(), ldc);
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < ldc; ++c) {
        const size_t i = static_cast<size_t>(r) * ldc + c;
        if (c >= n) {
          ASSERT_EQ(got[i], 7.0f) << "wrote past column n at row " << r;  // the padding is left alone
          continue;
        }
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << m << "x" << n << "x" << k << " at " << r << "," << c;
      }
  }
}

TEST(BlasSgemm, NamesItsKernels) {
  const std::string d = blas_description();
  EXPECT_NE(d.find("OpenBLAS"), std::string::npos) << d;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_EQ(d.find("Prescott"), std::string::npos) << d;
  }
}

}  // namespace
}  // namespace ib
