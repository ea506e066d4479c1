// Device memory through the tracking allocator: DeviceBuffer<T> is the only way variants
// allocate on the GPU, so --memory-limit and real failures become OOM rows.
#pragma once

#include <cstddef>
#include <string>

#include "core/memory.h"

namespace ib {

void* tracked_device_allocate(size_t bytes, const std::string& what);
void tracked_device_free(void* p, size_t bytes);

struct DeviceSpace {
  static void* allocate(size_t bytes, const std::string& what) { return tracked_device_allocate(bytes, what); }
  static void release(void* p, size_t bytes) { tracked_device_free(p, bytes); }
};

template <class T>
using DeviceBuffer = TrackedBuffer<T, DeviceSpace>;

}  // namespace ib
