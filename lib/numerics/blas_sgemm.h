// The CPU engine's prefill GEMM through a packaged BLAS (OpenBLAS, Debian's libopenblas-dev):
// C = A · B, row-major fp32, as numerics/sgemm.h's, with OpenBLAS's own threads off and the
// columns split over ours (numerics/parallel.h), so one pool owns the cores: OpenBLAS's workers
// spinning beside ours slowed both. Its summation order is its own: results agree with
// sgemm_blocked within float32 rounding, not bit for bit.
#pragma once

namespace ib {

void blas_sgemm(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc);

// "OpenBLAS 0.3.21 (SkylakeX kernels)": the library and the kernels it chose for this CPU.
const char* blas_description();

}  // namespace ib
