// One cuBLAS handle per process (creating one costs tens of milliseconds), bound to a stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

namespace ib {

cublasHandle_t cublas_handle(cudaStream_t stream);

}  // namespace ib
