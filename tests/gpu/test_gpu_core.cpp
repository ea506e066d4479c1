// GPU tests: each skips itself when no CUDA device is usable (CI builds them; the GPU machine
// runs them).
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/ceilings.h"
#include "core/cuda_check.h"
#include "core/cuda_memory.h"
#include "core/errors.h"
#include "core/half.h"
#include "core/memory.h"
#include "core/random.h"
#include "core/runner.h"
#include "fill.h"

namespace ib {
namespace {

#define REQUIRE_GPU()                                                         \
  do {                                                                        \
    if (!cuda_unavailable_reason().empty()) GTEST_SKIP() << cuda_unavailable_reason(); \
  } while (0)

TEST(Gpu, FillMatchesTheHostGenerator) {
  REQUIRE_GPU();
  const size_t n = 100003;
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::U32}) {
    DeviceBuffer<uint8_t> d(n * dtype_size(t), "fill");
    launch_fill_random(d.data(), n, t, 77, 0.5f, nullptr);
    std::vector<uint8_t> h(n * dtype_size(t));
    IB_CUDA_CHECK(cudaMemcpy(h.data(), d.data(), h.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 997) {
      if (t == DType::U32) {
        uint32_t got;
        std::memcpy(&got, &h[i * 4], 4);
        ASSERT_EQ(got, static_cast<uint32_t>(random_bits(77, i)));
      } else if (t == DType::F32) {
        float got;
        std::memcpy(&got, &h[i * 4], 4);
        ASSERT_EQ(got, 0.5f * random_uniform(77, i));
      } else {
        uint16_t got;
        std::memcpy(&got, &h[i * 2], 2);
        float v = 0.5f * random_uniform(77, i);
        ASSERT_EQ(got, t == DType::BF16 ? float_to_bf16_bits(v) : float_to_fp16_bits(v)) << to_string(t) << " " << i;
      }
    }
  }
}

TEST(Gpu, DeviceMemoryIsTrackedAndLimited) {
  REQUIRE_GPU();
  const int64_t before = device_memory().current();
  {
    DeviceBuffer<float> b(1 << 20, "tracked");
    EXPECT_EQ(device_memory().current(), before + (4 << 20));
  }
  EXPECT_EQ(device_memory().current(), before);
  device_memory().set_limit(before + (1 << 20));
  EXPECT_THROW(DeviceBuffer<float>(1 << 20, "over the limit"), OutOfMemory);
  device_memory().set_limit(0);
}

TEST(Gpu, RealAllocationFailureIsOutOfMemory) {
  REQUIRE_GPU();
  EXPECT_THROW(DeviceBuffer<uint8_t>(size_t{1} << 50, "a petabyte"), OutOfMemory);
  DeviceBuffer<uint8_t> fine(1024, "afterwards");  // the error did not stick
  EXPECT_EQ(fine.size(), 1024u);
}

TEST(Gpu, CeilingVariantsPassTheGate) {
  REQUIRE_GPU();
  RunControlOverrides quick;
  quick.min_samples = 3;
  quick.min_time = 0;
  quick.timeout = 2;
  Spec spec = ceiling_spec(Backend::Cuda, true, quick);
  auto rt = make_cuda_runtime();
  Runner runner(*rt, RunnerOptions{});
  std::vector<ExperimentResult> results;
  for (const auto& e : spec.experiments) results.push_back(runner.run(e));
  for (const auto& r : results)
    for (const auto& row : r.rows) {
      EXPECT_EQ(row.status, RowStatus::Ok) << row.variant << ": " << row.message;
      ASSERT_TRUE(row.validation);
      EXPECT_TRUE(row.validation->ok) << row.validation->metric << " " << row.validation->value;
    }
  Ceilings c = ceilings_from_results(results);
  EXPECT_GT(c.copy_bytes_per_s, 1e11);   // any datacenter GPU copies > 100 GB/s
  EXPECT_GT(c.gemm_flops_per_s, 1e13);   // and multiplies bf16 at > 10 TFLOP/s
}

TEST(Gpu, EveryGemmTypeValidates) {
  REQUIRE_GPU();
  SpecOptions opt;
  opt.backend = Backend::Cuda;
  Spec spec = parse_spec(
      "experiments:\n  - {name: g, kind: ceiling, variants: [gemm], m: [1, 77, 1024], n: 257, k: 1000,"
      " dtype: [bf16, fp16, fp32], min_samples: 2, min_time: 0, timeout: 1s}\n",
      "gpu-test", opt);
  auto rt = make_cuda_runtime();
  Runner runner(*rt, RunnerOptions{});
  ExperimentResult r = runner.run(spec.experiments[0]);
  ASSERT_EQ(r.rows.size(), 9u);
  for (const auto& row : r.rows) EXPECT_EQ(row.status, RowStatus::Ok) << row.point.label() << ": " << row.message;
}

}  // namespace
}  // namespace ib
