#include "core/backend.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/sysinfo.h"

namespace ib {

const char* to_string(Backend b) { return b == Backend::Cuda ? "cuda" : "cpu"; }

std::optional<Backend> backend_from_string(const std::string& s) {
  if (s == "cpu") return Backend::Cpu;
  if (s == "cuda") return Backend::Cuda;
  return std::nullopt;
}

namespace {

class CpuTimer : public SampleTimer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(); }
  double stop() override { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

class CpuRuntime : public BackendRuntime {
 public:
  Backend backend() const override { return Backend::Cpu; }
  void* stream() const override { return nullptr; }
  std::unique_ptr<SampleTimer> make_timer() override { return std::make_unique<CpuTimer>(); }
  void synchronize() override {}
  MemoryTracker& memory() override { return host_memory(); }

  // Writes then reads a buffer twice the last-level cache so the next sample starts cold.
  void flush_cache() override {
    if (flush_.empty()) flush_.assign(2 * cpu_last_level_cache_bytes() / sizeof(uint64_t), 0);
    for (size_t i = 0; i < flush_.size(); i += 8) flush_[i] += i;
    uint64_t sum = 0;
    for (size_t i = 0; i < flush_.size(); i += 8) sum += flush_[i];
    sink_ = sum;
  }

 private:
  std::vector<uint64_t> flush_;
  volatile uint64_t sink_ = 0;
};

}  // namespace

std::unique_ptr<BackendRuntime> make_cpu_runtime() { return std::make_unique<CpuRuntime>(); }

std::unique_ptr<BackendRuntime> make_runtime(Backend b) { return b == Backend::Cuda ? make_cuda_runtime() : make_cpu_runtime(); }

Backend resolve_backend(const std::string& requested) {
  if (requested == "auto") return cuda_unavailable_reason().empty() ? Backend::Cuda : Backend::Cpu;
  auto b = backend_from_string(requested);
  if (!b) throw InputError("--backend '" + requested + "': expected auto, cuda or cpu");
  if (*b == Backend::Cuda) {
    std::string why = cuda_unavailable_reason();
    if (!why.empty()) throw InputError("--backend cuda: " + why);
  }
  return *b;
}

#ifndef INFER_BENCH_HAVE_CUDA
std::string cuda_unavailable_reason() { return "this infer-bench was built without CUDA (CPU-only build)"; }
std::unique_ptr<BackendRuntime> make_cuda_runtime() { throw InputError("--backend cuda: " + cuda_unavailable_reason()); }
#endif

}  // namespace ib
