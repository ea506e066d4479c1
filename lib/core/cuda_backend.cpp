// The CUDA backend: stream, CUDA-event timer, L2 flush, tracked device memory, device
// description and the shared cuBLAS handle. Host code only (compiled by the C++ compiler).
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "core/backend.h"
#include "core/cublas.h"
#include "core/cuda_memory.h"
#include "core/errors.h"
#include "core/sysinfo.h"
#include "core/units.h"
#include "numerics/cuda_check.h"

namespace ib {

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  std::string msg = fmt::format("{}:{}: {}: {} ({})", file, line, expr, cudaGetErrorName(err), cudaGetErrorString(err));
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it so the next row starts clean
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemory("the card ran out of memory: " + msg, 0, static_cast<int64_t>(total_b - free_b),
                      static_cast<int64_t>(total_b));
  }
  throw CudaError(msg);
}

void throw_cublas_error(cublasStatus_t st, const char* expr, const char* file, int line) {
  std::string msg = fmt::format("{}:{}: {}: {}", file, line, expr, cublasGetStatusString(st));
  if (st == CUBLAS_STATUS_ALLOC_FAILED) throw OutOfMemory("cuBLAS could not allocate: " + msg, 0, 0, 0);
  throw CudaError(msg);
}

void* tracked_device_allocate(size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  device_memory().reserve(static_cast<int64_t>(bytes), what);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    device_memory().release(static_cast<int64_t>(bytes));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      throw OutOfMemory(what + ": cudaMalloc of " + format_bytes(static_cast<double>(bytes)) + " failed (" +
                            format_bytes(static_cast<double>(free_b)) + " free of " + format_bytes(static_cast<double>(total_b)) +
                            ")",
                        static_cast<int64_t>(bytes), static_cast<int64_t>(total_b - free_b), static_cast<int64_t>(total_b));
    }
    throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
  }
  return p;
}

void tracked_device_free(void* p, size_t bytes) {
  if (!p) return;
  (void)cudaFree(p);  // a destructor cannot throw; a broken context reports at the next checked call
  device_memory().release(static_cast<int64_t>(bytes));
}

std::string cuda_unavailable_reason() {
  static const std::string reason = [] {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return fmt::format("no usable CUDA device ({}: {})", cudaGetErrorName(err), cudaGetErrorString(err));
    }
    if (n == 0) return std::string("no CUDA device found");
    return std::string();
  }();
  return reason;
}

namespace {

class CudaTimer : public SampleTimer {
 public:
  explicit CudaTimer(cudaStream_t s) : stream_(s) {
    IB_CUDA_CHECK(cudaEventCreate(&start_));
    IB_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~CudaTimer() override {
    (void)cudaEventDestroy(start_);
    (void)cudaEventDestroy(stop_);
  }
  void start() override { IB_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  double stop() override {
    IB_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    IB_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    IB_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms * 1e-3;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

class CudaRuntime : public BackendRuntime {
 public:
  CudaRuntime() {
    IB_CUDA_CHECK(cudaSetDevice(0));
    IB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaRuntime() override {
    if (flush_) (void)cudaFree(flush_);
    (void)cudaStreamDestroy(stream_);
  }
  Backend backend() const override { return Backend::Cuda; }
  void* stream() const override { return stream_; }
  std::unique_ptr<SampleTimer> make_timer() override { return std::make_unique<CudaTimer>(stream_); }
  void synchronize() override { IB_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  MemoryTracker& memory() override { return device_memory(); }
  void check_errors() override {
    IB_CUDA_CHECK(cudaGetLastError());
    IB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Writing a buffer twice the size of L2 evicts whatever the previous sample left there.
  void flush_cache() override {
    if (!flush_) {
      int l2 = 0;
      IB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
      flush_bytes_ = 2 * static_cast<size_t>(l2 > 0 ? l2 : (64 << 20));
      IB_CUDA_CHECK(cudaMalloc(&flush_, flush_bytes_));
    }
    IB_CUDA_CHECK(cudaMemsetAsync(flush_, ++flush_value_ & 0xff, flush_bytes_, stream_));
  }
  void profiler_start() override { IB_CUDA_CHECK(cudaProfilerStart()); }
  void profiler_stop() override { IB_CUDA_CHECK(cudaProfilerStop()); }

 private:
  cudaStream_t stream_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = 0;
  int flush_value_ = 0;
};

}  // namespace

std::unique_ptr<BackendRuntime> make_cuda_runtime() {
  std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw InputError("--backend cuda: " + why);
  return std::make_unique<CudaRuntime>();
}

int64_t cuda_memory_total_bytes() {
  if (!cuda_unavailable_reason().empty()) return 0;
  size_t free_b = 0, total_b = 0;
  IB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<int64_t>(total_b);
}

DeviceInfo describe_cuda() {
  std::string why = cuda_unavailable_reason();
  if (!why.empty()) throw InputError("--backend cuda: " + why);
  cudaDeviceProp p{};
  IB_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  auto attr = [](cudaDeviceAttr a) {
    int v = 0;
    return cudaDeviceGetAttribute(&v, a, 0) == cudaSuccess ? v : 0;
  };
  int driver = 0, runtime = 0;
  IB_CUDA_CHECK(cudaDriverGetVersion(&driver));
  IB_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  size_t free_b = 0, total_b = 0;
  IB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  DeviceInfo d;
  d.backend = Backend::Cuda;
  d.name = p.name;
  auto ver = [](int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); };
  d.properties = {
      {"name", p.name},
      {"compute capability", fmt::format("{}.{}", p.major, p.minor)},
      {"SMs", std::to_string(p.multiProcessorCount)},
      {"memory", format_bytes(static_cast<double>(total_b))},
      {"memory free", format_bytes(static_cast<double>(free_b))},
      {"memory bus", fmt::format("{} bit", p.memoryBusWidth)},
      {"L2 cache", format_bytes(p.l2CacheSize)},
      {"shared memory per block (opt-in)", format_bytes(static_cast<double>(p.sharedMemPerBlockOptin))},
      {"SM clock (max)", fmt::format("{} MHz", attr(cudaDevAttrClockRate) / 1000)},
      {"memory clock (max)", fmt::format("{} MHz", attr(cudaDevAttrMemoryClockRate) / 1000)},
      {"ECC", attr(cudaDevAttrEccEnabled) ? "on" : "off"},
      {"driver / runtime", fmt::format("{} / {}", ver(driver), ver(runtime))},
      {"PCI bus", fmt::format("{:04x}:{:02x}:{:02x}", p.pciDomainID, p.pciBusID, p.pciDeviceID)},
  };
  return d;
}

cublasHandle_t cublas_handle(cudaStream_t stream) {
  static cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    IB_CUBLAS_CHECK(cublasCreate(&h));
    return h;
  }();
  IB_CUBLAS_CHECK(cublasSetStream(handle, stream));
  return handle;
}

}  // namespace ib
