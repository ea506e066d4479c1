#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/memory.h"

namespace ib {
namespace {

TEST(MemoryTracker, CountsCurrentAndPeak) {
  MemoryTracker t("test");
  t.reserve(100, "a");
  t.reserve(50, "b");
  t.release(100);
  EXPECT_EQ(t.current(), 50);
  EXPECT_EQ(t.peak(), 150);
  t.reset_peak();
  EXPECT_EQ(t.peak(), 50);
}

TEST(MemoryTracker, LimitTurnsAllocationIntoOutOfMemory) {
  MemoryTracker t("device");
  t.set_limit(1000);
  t.reserve(600, "first");
  try {
    t.reserve(500, "attention scores");
    FAIL() << "expected OutOfMemory";
  } catch (const OutOfMemory& e) {
    EXPECT_EQ(e.requested(), 500);
    EXPECT_EQ(e.in_use(), 600);
    EXPECT_EQ(e.limit(), 1000);
    EXPECT_NE(std::string(e.what()).find("attention scores"), std::string::npos);
  }
  EXPECT_EQ(t.current(), 600);  // the refused allocation is not counted
  t.reserve(400, "fits exactly");
  EXPECT_EQ(t.current(), 1000);
}

TEST(HostBuffer, IsTrackedAndAligned) {
  const int64_t before = host_memory().current();
  {
    HostBuffer<float> b(1000, "floats");
    EXPECT_EQ(host_memory().current(), before + 4000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
    HostBuffer<float> moved = std::move(b);
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_EQ(moved.size(), 1000u);
    EXPECT_EQ(host_memory().current(), before + 4000);
  }
  EXPECT_EQ(host_memory().current(), before);
}

TEST(HostBuffer, HonoursTheHostLimit) {
  host_memory().set_limit(host_memory().current() + 1024);
  EXPECT_THROW(HostBuffer<char>(4096, "too big"), OutOfMemory);
  host_memory().set_limit(0);
  HostBuffer<char> ok(4096, "fine now");
  EXPECT_EQ(ok.size(), 4096u);
}

}  // namespace
}  // namespace ib
