// A non-blocking CUDA stream owned by a test (RAII).
#pragma once

#include <cuda_runtime_api.h>

#include "numerics/cuda_check.h"

namespace ib::testing {

class TestStream {
 public:
  TestStream() { IB_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~TestStream() { (void)cudaStreamDestroy(s_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace ib::testing
