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
  // 0: no limit. `source` says where a limit comes from, for the OOM message ("" for a limit asked for).
  void set_limit(int64_t bytes, std::string source = "") {
    limit_ = bytes;
    limit_source_ = std::move(source);
  }
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
  std::string limit_source_;
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

MemoryTracker& host_memory();
MemoryTracker& device_memory();

// Host allocation accounted in host_memory(); 64-byte aligned.
void* tracked_host_allocate(size_t bytes, const std::string& what);
void tracked_host_free(void* p, size_t bytes);

// An owning, uninitialised array whose bytes are accounted in a memory space's tracker
// (Space::allocate / Space::release), so limits and real failures become OutOfMemory.
template <class T, class Space>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  explicit TrackedBuffer(size_t count, const std::string& what = "buffer") { allocate(count, what); }
  ~TrackedBuffer() { reset(); }
  TrackedBuffer(TrackedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;

  void allocate(size_t count, const std::string& what) {
    reset();
    ptr_ = static_cast<T*>(Space::allocate(count * sizeof(T), what));
    count_ = count;
  }
  void reset() {
    if (ptr_) Space::release(ptr_, count_ * sizeof(T));
    ptr_ = nullptr;
    count_ = 0;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  // Element access and iteration: host memory only.
  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }
  T* begin() { return ptr_; }
  T* end() { return ptr_ + count_; }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

struct HostSpace {
  static void* allocate(size_t bytes, const std::string& what) { return tracked_host_allocate(bytes, what); }
  static void release(void* p, size_t bytes) { tracked_host_free(p, bytes); }
};

// Tracked, 64-byte aligned host array.
template <class T>
using HostBuffer = TrackedBuffer<T, HostSpace>;

}  // namespace ib
