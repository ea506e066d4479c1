// The low-rank half of batched multi-adapter LoRA (Punica's BGMV, S-LoRA): for each row r of a
// batch whose sequences use different adapters, y[r] += scaling[a]·B_a·(A_a·x[r]) with a =
// adapter_of_row[r] (rows with a < 0 are left as they are), after the base model's one GEMM for
// the whole batch. Two kernels: shrink t[r] = A_a·x[r] (rank outputs per row) and expand
// y[r] += s_a·B_a·t[r]. Each row reads its own adapter's A and B: a decode batch's few rows per
// adapter read them from L2 after the first.
//
// Adapters are given as device arrays of device pointers, one entry per adapter: A_a bf16
// [rank][in], B_a bf16 [out][rank] (PEFT's layouts), scaling fp32. One launch takes one rank for
// all its adapters (a pool of mixed ranks pads A with zero rows and B with zero columns to the
// largest). x is bf16 [rows][in]; t fp32 [rows][rank]; y bf16 or fp32 [rows][out], updated in place.
// Enqueued on `stream` with no allocation or synchronisation (CUDA-graph capturable).
// Not yet run on a GPU: tests/gpu/test_gpu_lora.cpp checks both against a CPU reference.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace ib {

constexpr int kLoraMaxRank = 1024;

enum class LoraOut { Bf16Add, Fp32Add };

// Throws std::invalid_argument for rows < 1, in < 1, rank outside [1, kLoraMaxRank] or out < 1.
void launch_lora_shrink_bf16(const uint16_t* x, int rows, int in, const int32_t* adapter_of_row, const uint16_t* const* a,
                             int rank, float* t, cudaStream_t stream);
void launch_lora_expand_bf16(const float* t, int rows, int rank, const int32_t* adapter_of_row, const uint16_t* const* b,
                             const float* scaling, int out, void* y, LoraOut y_kind, cudaStream_t stream);

}  // namespace ib
