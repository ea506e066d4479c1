// Matrix-vector products for the few-row matmuls of a decode step (batches and short verify
// passes of 1..8 rows): Y[rows][out] (= or +=) X[rows][in] · W[out][in]ᵀ, W and X bf16 (uint16_t
// bits), fp32 accumulation, Y bf16 or fp32 – what cuda_model_forward.cpp's gemm() asks of cuBLAS. At these
// row counts a matmul does 2·rows FLOPs per weight read once: it is a stream of W at HBM
// bandwidth, which GEMM tiles built for reuse do not reach. The engine's `matmul: gemv` uses it.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace ib {

constexpr int kGemvMaxRows = 8;

// What is done with Y: bf16 store, fp32 store, or fp32 accumulate (y += X·Wᵀ, cuBLAS's beta = 1).
enum class GemvOut { Bf16, Fp32, Fp32Add };

// Whether the kernel takes the shape: 1 <= rows <= kGemvMaxRows, out >= 1, in a positive multiple
// of 8 (one 16-byte load is 8 elements) and W and X 16-byte aligned. Callers use cuBLAS otherwise.
bool gemv_bf16_supports(int rows, int in, int out, const void* w, const void* x);

// How many warps share one output's `in` (split-K: 1, 2, 4 or 8), from the shape and the SM
// count only – never from rows, so a row's result does not depend on how many rows are launched
// with it (each output's sum is taken in the same order whatever the row count).
int gemv_split(int in, int out, int sm_count);

// Enqueues the product on `stream`: no allocation, no synchronisation (CUDA-graph capturable).
// `sm_count` sizes the grid (gemv_split). Deterministic: a fixed summation order per output.
// Throws std::invalid_argument for a shape gemv_bf16_supports refuses.
void launch_gemv_bf16(const uint16_t* w, const uint16_t* x, void* y, GemvOut y_kind, int rows, int in, int out, int sm_count,
                      cudaStream_t stream);

// The gate/up GEMV with SwiGLU in its epilogue: W = [gate rows; up rows] ([2·mlp][in]), and
// act[r][j] = bf16(silu(g)·u) for g, u the bf16-rounded X[r]·W[j]ᵀ and X[r]·W[mlp + j]ᵀ. Bit for
// bit launch_gemv_bf16 (Bf16, out = 2·mlp) followed by launch_swiglu, in one kernel and without
// the gate/up buffer. Takes what gemv_bf16_supports(rows, in, 2·mlp, w, x) accepts.
void launch_gemv_swiglu_bf16(const uint16_t* w, const uint16_t* x, uint16_t* act, int rows, int in, int mlp, int sm_count,
                             cudaStream_t stream);

}  // namespace ib
