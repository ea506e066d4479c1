// Every CUDA runtime and cuBLAS call goes through these checks: a failure throws with the
// call, file and line; an allocation failure becomes OutOfMemory (an OOM row).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace ib {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace ib

#define IB_CUDA_CHECK(expr)                                                                           \
  do {                                                                                                \
    cudaError_t ib_cuda_err_ = (expr);                                                                \
    if (ib_cuda_err_ != cudaSuccess) ::ib::throw_cuda_error(ib_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define IB_CUBLAS_CHECK(expr)                                                                                       \
  do {                                                                                                              \
    cublasStatus_t ib_cublas_st_ = (expr);                                                                          \
    if (ib_cublas_st_ != CUBLAS_STATUS_SUCCESS) ::ib::throw_cublas_error(ib_cublas_st_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define IB_CUDA_CHECK_LAUNCH() IB_CUDA_CHECK(cudaGetLastError())
