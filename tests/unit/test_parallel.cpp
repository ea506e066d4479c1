// parallel_for over the kept worker pool: every index exactly once, errors rethrown on the caller,
// nested and concurrent calls complete (serially where the pool is taken).
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "numerics/parallel.h"

namespace ib {
namespace {

void expect_each_index_once(size_t n) {
  std::vector<std::atomic<int>> hits(n);
  parallel_for(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " index " << i;
}

TEST(ParallelFor, CoversEveryIndexExactlyOnce) {
  for (size_t n : {0u, 1u, 2u, 3u, 7u, 1000u, 100003u}) expect_each_index_once(n);
}

TEST(ParallelFor, RethrowsAChunksErrorOnTheCaller) {
  EXPECT_THROW(parallel_for(1000,
                            [](size_t b, size_t e) {
                              if (b <= 999 && 999 < e) throw std::runtime_error("last chunk");
                            }),
               std::runtime_error);
  expect_each_index_once(1000);  // the pool still works afterwards
}

TEST(ParallelFor, NestedCallsRunSeriallyAndComplete) {
  std::atomic<long> sum{0};
  parallel_for(8, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i)
      parallel_for(100, [&](size_t bb, size_t ee) {
        for (size_t j = bb; j < ee; ++j) sum.fetch_add(static_cast<long>(j));
      });
  });
  EXPECT_EQ(sum.load(), 8L * 4950);
}

TEST(ParallelFor, ConcurrentCallersAndManyCallsComplete) {
  std::atomic<long> sum{0};
  auto caller = [&] {
    for (int r = 0; r < 2000; ++r) parallel_for(64, [&](size_t b, size_t e) { sum.fetch_add(static_cast<long>(e - b)); });
  };
  std::thread other(caller);
  caller();
  other.join();
  EXPECT_EQ(sum.load(), 2L * 2000 * 64);
}

}  // namespace
}  // namespace ib
