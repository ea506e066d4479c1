#include "core/sysinfo.h"

#include <sys/utsname.h>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/errors.h"
#include "core/units.h"

namespace ib {

namespace {
std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string cpuinfo_field(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (trim(line.substr(0, colon)) == field) return trim(line.substr(colon + 1));
  }
  return "";
}

// Cache sizes from sysfs: level -> bytes ("32K", "1024K", "32M").
int64_t cache_bytes(int level) {
  for (int idx = 0; idx < 8; ++idx) {
    std::string base = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/";
    std::string lvl = read_first_line(base + "level");
    if (lvl.empty()) break;
    if (std::stoi(lvl) != level) continue;
    if (read_first_line(base + "type") == "Instruction") continue;
    auto b = parse_bytes(read_first_line(base + "size"));
    if (b) return *b;
  }
  return 0;
}
}  // namespace

int64_t cpu_last_level_cache_bytes() {
  for (int level = 3; level >= 2; --level)
    if (int64_t b = cache_bytes(level)) return b;
  return 32LL << 20;
}

int64_t host_memory_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

int64_t host_memory_available_bytes() {
  int64_t available = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
      if (key == "MemAvailable:") {
        available = kb * 1024;
        break;
      }
  }
  // In a container the cgroup's limit is what the OOM killer enforces, not the machine's memory.
  std::ifstream max_in("/sys/fs/cgroup/memory.max"), cur_in("/sys/fs/cgroup/memory.current");
  std::string max_text;
  int64_t current = 0;
  if (max_in >> max_text && max_text != "max" && cur_in >> current) {
    const int64_t left = std::max<int64_t>(0, std::atoll(max_text.c_str()) - current);
    if (available == 0 || left < available) available = left;
  }
  return available;
}

nlohmann::json DeviceInfo::to_json() const {
  nlohmann::json j;
  j["backend"] = ib::to_string(backend);
  j["name"] = name;
  nlohmann::json p = nlohmann::json::object();
  for (const auto& [k, v] : properties) p[k] = v;
  j["properties"] = p;
  return j;
}

DeviceInfo describe_cpu() {
  DeviceInfo d;
  d.backend = Backend::Cpu;
  d.name = cpuinfo_field("model name");
  if (d.name.empty()) d.name = "unknown CPU";
  d.properties.emplace_back("model", d.name);
  d.properties.emplace_back("hardware threads", std::to_string(std::thread::hardware_concurrency()));
  d.properties.emplace_back("threads used", std::to_string(cpu_threads()));
  d.properties.emplace_back("memory", format_bytes(static_cast<double>(host_memory_total_bytes())));
  for (int level = 1; level <= 3; ++level)
    if (int64_t b = cache_bytes(level))
      d.properties.emplace_back("L" + std::to_string(level) + " cache (per cpu0)", format_bytes(static_cast<double>(b)));
  std::string flags = cpuinfo_field("flags");
  std::string simd;
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "avx512f", "amx_tile"}) {
    std::istringstream ss(flags);
    std::string w;
    while (ss >> w)
      if (w == f) {
        simd += (simd.empty() ? "" : " ") + w;
        break;
      }
  }
  if (!simd.empty()) d.properties.emplace_back("SIMD", simd);
  struct utsname u {};
  if (uname(&u) == 0) d.properties.emplace_back("kernel", std::string(u.sysname) + " " + u.release);
  return d;
}

DeviceInfo describe(Backend b) { return b == Backend::Cuda ? describe_cuda() : describe_cpu(); }

std::string short_device_name(const std::string& name) {
  std::string s = name;
  for (const char* prefix : {"NVIDIA ", "Tesla "})
    if (s.rfind(prefix, 0) == 0) s = s.substr(std::string(prefix).size());
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "unknown" : out;
}

#ifndef INFER_BENCH_HAVE_CUDA
DeviceInfo describe_cuda() { throw InputError("--backend cuda: " + cuda_unavailable_reason()); }
int64_t cuda_memory_total_bytes() { return 0; }
#endif

}  // namespace ib
