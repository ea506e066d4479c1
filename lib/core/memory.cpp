#include "core/memory.h"

#include <cstdlib>
#include <new>

#include "core/errors.h"
#include "core/units.h"

namespace ib {

void MemoryTracker::reserve(int64_t bytes, const std::string& what) {
  if (limit_ > 0 && current_ + bytes > limit_) {
    throw OutOfMemory(what + ": " + format_bytes(static_cast<double>(bytes)) + " more would pass the " + name_ +
                          " memory limit of " + format_bytes(static_cast<double>(limit_)) +
                          (limit_source_.empty() ? "" : ", " + limit_source_) + " (" +
                          format_bytes(static_cast<double>(current_)) + " in use)",
                      bytes, current_, limit_);
  }
  current_ += bytes;
  if (current_ > peak_) peak_ = current_;
}

void MemoryTracker::release(int64_t bytes) { current_ -= bytes; }

MemoryTracker& host_memory() {
  static MemoryTracker t("host");
  return t;
}

MemoryTracker& device_memory() {
  static MemoryTracker t("device");
  return t;
}

void* tracked_host_allocate(size_t bytes, const std::string& what) {
  if (bytes == 0) return nullptr;
  host_memory().reserve(static_cast<int64_t>(bytes), what);
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {
    host_memory().release(static_cast<int64_t>(bytes));
    throw OutOfMemory(what + ": host allocation of " + format_bytes(static_cast<double>(bytes)) + " failed",
                      static_cast<int64_t>(bytes), host_memory().current(), host_memory().limit());
  }
  return p;
}

void tracked_host_free(void* p, size_t bytes) {
  if (!p) return;
  std::free(p);
  host_memory().release(static_cast<int64_t>(bytes));
}

}  // namespace ib
