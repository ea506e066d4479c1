// Host vectors to and from tracked device buffers, for GPU tests that launch kernels directly.
// Both synchronise the whole device: the tests launch on non-blocking streams, which are not
// ordered with these legacy-stream copies (a pageable upload may also return before it lands).
#pragma once

#include <vector>

#include <cuda_runtime_api.h>

#include "core/cuda_memory.h"
#include "numerics/cuda_check.h"

namespace ib::testing {

template <class T>
DeviceBuffer<T> to_device(const std::vector<T>& v) {
  DeviceBuffer<T> d(v.size(), "test");
  IB_CUDA_CHECK(cudaMemcpy(d.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  IB_CUDA_CHECK(cudaDeviceSynchronize());
  return d;
}

template <class T>
std::vector<T> to_host(const DeviceBuffer<T>& d) {
  std::vector<T> v(d.size());
  IB_CUDA_CHECK(cudaDeviceSynchronize());
  IB_CUDA_CHECK(cudaMemcpy(v.data(), d.data(), d.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace ib::testing
