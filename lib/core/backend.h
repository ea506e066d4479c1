// Backends (CPU, CUDA) and what the runner needs from them: a stream, a timer, cache
// flushing, the memory tracker and profiler hooks.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/memory.h"
#include "numerics/parallel.h"  // cpu_threads

namespace ib {

enum class Backend { Cpu, Cuda };

const char* to_string(Backend b);
std::optional<Backend> backend_from_string(const std::string& s);

// Times one sample: steady_clock on the CPU, CUDA events on the GPU.
class SampleTimer {
 public:
  virtual ~SampleTimer() = default;
  virtual void start() = 0;
  virtual double stop() = 0;  // seconds since start(); waits for the device
};

class BackendRuntime {
 public:
  virtual ~BackendRuntime() = default;
  virtual Backend backend() const = 0;
  // cudaStream_t on the GPU (as void* so host code stays CUDA-free), nullptr on the CPU.
  virtual void* stream() const = 0;
  virtual std::unique_ptr<SampleTimer> make_timer() = 0;
  virtual void synchronize() = 0;
  // Evicts caches before a cold sample: L2 on the GPU, the last-level cache on the CPU.
  // The flush buffer is allocated on first use, outside every tracker.
  virtual void flush_cache() = 0;
  virtual MemoryTracker& memory() = 0;
  // Surfaces asynchronous device errors after a run (throws); no-op on the CPU.
  virtual void check_errors() {}
  virtual void profiler_start() {}
  virtual void profiler_stop() {}
};

std::unique_ptr<BackendRuntime> make_cpu_runtime();
// Throws InputError when the binary has no CUDA backend or no device is usable.
std::unique_ptr<BackendRuntime> make_cuda_runtime();
std::unique_ptr<BackendRuntime> make_runtime(Backend b);

// Why the CUDA backend cannot be used here ("" when it can): built without CUDA,
// no driver, no device.
std::string cuda_unavailable_reason();

// "auto" -> Cuda when usable else Cpu; "cuda" when unusable -> InputError naming why.
Backend resolve_backend(const std::string& requested);

}  // namespace ib
