// A blocked, packed, multithreaded SGEMM for the CPU backend: C = A · B, row-major, fp32.
#pragma once

namespace ib {

// A is m×k (row stride lda), B is k×n (ldb), C is m×n (ldc); C is overwritten.
void sgemm_blocked(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc);

// C += A · B on the calling thread only, with the same packed micro-kernel: for the small tile
// products of algorithms that parallelise at a coarser grain (the CPU flash attention).
void sgemm_accumulate_serial(int m, int n, int k, const float* A, int lda, const float* B, int ldb, float* C, int ldc);

}  // namespace ib
