// A fixed number of values each built on its first use, from any thread: what lets a grammar
// compile a rule's DFA (and a distance table its row) only when a parse first enters it, while
// the grammar itself stays shared and const. A value, once built, never moves or changes, so a
// reference to it stays valid for the slots' lifetime; reading a built one is one acquire load.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace ib::constrain {

template <class T>
class LazySlots {
 public:
  explicit LazySlots(size_t n = 0)
      : ready_(std::make_unique<std::atomic<const T*>[]>(n)), owned_(n), mu_(std::make_unique<std::mutex>()) {
    for (size_t i = 0; i < n; ++i) ready_[i].store(nullptr, std::memory_order_relaxed);
  }
  LazySlots(LazySlots&&) noexcept = default;
  LazySlots& operator=(LazySlots&&) noexcept = default;

  size_t size() const { return owned_.size(); }
  // Slot i, built by make() (returning a T) if it is not yet; one builder at a time. An exception
  // from make() leaves the slot unbuilt.
  template <class Make>
  const T& get(size_t i, Make&& make) const {
    if (const T* p = ready_[i].load(std::memory_order_acquire)) return *p;
    std::lock_guard<std::mutex> lock(*mu_);
    if (const T* p = ready_[i].load(std::memory_order_relaxed)) return *p;
    owned_[i] = std::make_unique<T>(make());
    ready_[i].store(owned_[i].get(), std::memory_order_release);
    ++built_;
    return *owned_[i];
  }
  // Slot i if built, else nullptr.
  const T* peek(size_t i) const { return ready_[i].load(std::memory_order_acquire); }
  size_t built() const {
    std::lock_guard<std::mutex> lock(*mu_);
    return built_;
  }

 private:
  std::unique_ptr<std::atomic<const T*>[]> ready_;
  mutable std::vector<std::unique_ptr<T>> owned_;
  std::unique_ptr<std::mutex> mu_;
  mutable size_t built_ = 0;
};

}  // namespace ib::constrain
