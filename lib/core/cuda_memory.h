// Device memory through the tracking allocator: DeviceBuffer<T> is the only way variants
// allocate on the GPU, so --memory-limit and real failures become OOM rows.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace ib {

void* tracked_device_allocate(size_t bytes, const std::string& what);
void tracked_device_free(void* p, size_t bytes);

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count, const std::string& what = "device buffer") { allocate(count, what); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void allocate(size_t count, const std::string& what) {
    reset();
    ptr_ = static_cast<T*>(tracked_device_allocate(count * sizeof(T), what));
    count_ = count;
  }
  void reset() {
    if (ptr_) tracked_device_free(ptr_, count_ * sizeof(T));
    ptr_ = nullptr;
    count_ = 0;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace ib
