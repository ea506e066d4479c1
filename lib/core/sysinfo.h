// What the machine is: CPU model and caches, memory, and (in CUDA builds) the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/backend.h"

namespace ib {

struct DeviceInfo {
  Backend backend = Backend::Cpu;
  std::string name;                                             // "NVIDIA H200" or the CPU model
  std::vector<std::pair<std::string, std::string>> properties;  // in display order
  nlohmann::json to_json() const;
};

DeviceInfo describe_cpu();
// Throws InputError when the CUDA backend is unusable.
DeviceInfo describe_cuda();
DeviceInfo describe(Backend b);

int64_t cpu_last_level_cache_bytes();
int64_t host_memory_total_bytes();
// Memory a process can still take: /proc/meminfo's MemAvailable, or less where a cgroup (v2)
// memory.max leaves less; 0 when unknown.
int64_t host_memory_available_bytes();
// Total memory of GPU 0; 0 when the CUDA backend is unusable.
int64_t cuda_memory_total_bytes();
// "h200" from "NVIDIA H200": a short name for results/<gpu>/ folders.
std::string short_device_name(const std::string& name);

}  // namespace ib
