// One tracker per memory space (host, device): current and peak bytes, and an optional limit
// that turns an allocation past it into OutOfMemory (an OOM row, as on a smaller card).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ib {

class MemoryTracker {
 public:
  explicit MemoryTracker(std::string name) : name_(std::move(name)) {}
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  const std::string& name() const { return name_; }
  void set_limit(int64_t bytes) { limit_ = bytes; }  // 0: no limit
  int64_t limit() const { return limit_; }
  // Accounts for `bytes` before the real allocation; throws OutOfMemory past the limit.
  void reserve(int64_t bytes, const std::string& what);
  void release(int64_t bytes);
  int64_t current() const { return current_; }
  int64_t peak() const { return peak_; }
  void reset_peak() { peak_ = current_; }

 private:
  std::string name_;
  int64_t limit_ = 0;
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

MemoryTracker& host_memory();
MemoryTracker& device_memory();

// Host allocation accounted in host_memory(); 64-byte aligned.
void* tracked_host_allocate(size_t bytes, const std::string& what);
void tracked_host_free(void* p, size_t bytes);

// Tracked, 64-byte aligned, uninitialised host array. A failed allocation is OutOfMemory.
template <class T>
class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(size_t count, const std::string& what = "host buffer") { allocate(count, what); }
  ~HostBuffer() { reset(); }
  HostBuffer(HostBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void allocate(size_t count, const std::string& what) {
    reset();
    ptr_ = static_cast<T*>(tracked_host_allocate(count * sizeof(T), what));
    count_ = count;
  }
  void reset() {
    if (ptr_) tracked_host_free(ptr_, count_ * sizeof(T));
    ptr_ = nullptr;
    count_ = 0;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }
  T* begin() { return ptr_; }
  T* end() { return ptr_ + count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace ib
