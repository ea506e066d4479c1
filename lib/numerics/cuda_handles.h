// RAII owners of CUDA runtime and cuBLAS objects (stream, event, cuBLAS handle, pinned host
// memory, graph, graph executable): each created checked, destroyed once, never copied. Device
// memory has its own owner, DeviceBuffer (core/cuda_memory.h), which the memory limit tracks.
#pragma once

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "numerics/cuda_check.h"

namespace ib {

class OwnedStream {
 public:
  OwnedStream() { IB_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    if (s_) (void)cudaStreamDestroy(s_);
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class OwnedEvent {
 public:
  OwnedEvent() { IB_CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~OwnedEvent() {
    if (e_) (void)cudaEventDestroy(e_);
  }
  OwnedEvent(const OwnedEvent&) = delete;
  OwnedEvent& operator=(const OwnedEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// A private cuBLAS handle: the engine binds its own workspace to it (so stream capture never
// allocates), which must not leak into the process-wide handle of core/cublas.h that other code
// shares, nor outlive the engine's workspace buffer.
class OwnedCublas {
 public:
  OwnedCublas() { IB_CUBLAS_CHECK(cublasCreate(&h_)); }
  ~OwnedCublas() {
    if (h_) (void)cublasDestroy(h_);
  }
  OwnedCublas(const OwnedCublas&) = delete;
  OwnedCublas& operator=(const OwnedCublas&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

// Pinned host memory for the per-step upload (a real asynchronous copy).
class PinnedBytes {
 public:
  explicit PinnedBytes(size_t bytes) { IB_CUDA_CHECK(cudaMallocHost(&p_, bytes)); }
  ~PinnedBytes() {
    if (p_) (void)cudaFreeHost(p_);
  }
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  unsigned char* data() { return static_cast<unsigned char*>(p_); }

 private:
  void* p_ = nullptr;
};

class OwnedGraph {
 public:
  explicit OwnedGraph(cudaGraph_t g) : g_(g) {}
  ~OwnedGraph() {
    if (g_) (void)cudaGraphDestroy(g_);
  }
  OwnedGraph(const OwnedGraph&) = delete;
  OwnedGraph& operator=(const OwnedGraph&) = delete;
  cudaGraph_t get() const { return g_; }

 private:
  cudaGraph_t g_ = nullptr;
};

class OwnedGraphExec {
 public:
  explicit OwnedGraphExec(cudaGraphExec_t e) : e_(e) {}
  ~OwnedGraphExec() {
    if (e_) (void)cudaGraphExecDestroy(e_);
  }
  OwnedGraphExec(const OwnedGraphExec&) = delete;
  OwnedGraphExec& operator=(const OwnedGraphExec&) = delete;
  cudaGraphExec_t get() const { return e_; }

 private:
  cudaGraphExec_t e_ = nullptr;
};

}  // namespace ib
