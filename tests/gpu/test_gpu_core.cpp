// GPU tests: each skips itself when no CUDA device is usable (CI builds them; the GPU machine
// runs them).
#include <cstring>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "require_gpu.h"

#include "core/backend.h"
#include "core/ceilings.h"
#include "core/cuda_memory.h"
#include "core/errors.h"
#include "core/memory.h"
#include "core/runner.h"
#include "fill.h"
#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/random.h"

namespace ib {
namespace {

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
  EXPECT_GT(c.copy_bytes_per_s, 1e11);  // any datacenter GPU copies > 100 GB/s
  EXPECT_GT(c.gemm_flops_per_s, 1e13);  // and multiplies bf16 at > 10 TFLOP/s
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

#include "constrain/masked_argmax.h"
#include "constrain_mask.h"

namespace ib {
namespace {

TEST(GpuConstrain, MaskedArgmaxMatchesTheCpuReference) {
  REQUIRE_GPU();
  for (int32_t vocab : {1, 31, 32, 33, 1000, 50257, 151936}) {
    const int32_t rows = 3, words = (vocab + 31) / 32;
    std::vector<float> logits(static_cast<size_t>(rows) * vocab);
    std::vector<uint32_t> mask(static_cast<size_t>(rows) * words, 0);
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = random_uniform(9, i) * 10.0f;
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t t = 0; t < vocab; ++t)
        if (random_bits(10 + static_cast<uint64_t>(r), static_cast<uint64_t>(t)) % (r + 2) == 0)  // row 0: half, row 2: a quarter
          mask[static_cast<size_t>(r) * words + (t >> 5)] |= 1u << (t & 31);
    if (vocab > 1) logits[5 % vocab] = logits[(5 % vocab) + 0];  // keep a tie candidate
    DeviceBuffer<float> dl(logits.size(), "logits");
    DeviceBuffer<uint32_t> dm(mask.size(), "mask");
    DeviceBuffer<int32_t> out(rows, "out");
    IB_CUDA_CHECK(cudaMemcpy(dl.data(), logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
    IB_CUDA_CHECK(cudaMemcpy(dm.data(), mask.data(), mask.size() * 4, cudaMemcpyHostToDevice));
    for (bool masked : {false, true}) {
      launch_masked_argmax(dl.data(), masked ? dm.data() : nullptr, vocab, rows, out.data(), nullptr);
      std::vector<int32_t> got(rows);
      IB_CUDA_CHECK(cudaMemcpy(got.data(), out.data(), rows * 4, cudaMemcpyDeviceToHost));
      for (int32_t r = 0; r < rows; ++r)
        EXPECT_EQ(got[static_cast<size_t>(r)],
                  constrain::masked_argmax(logits.data() + static_cast<size_t>(r) * vocab,
                                           masked ? mask.data() + static_cast<size_t>(r) * words : nullptr, vocab))
            << "vocab " << vocab << " row " << r << " masked " << masked;
    }
  }
}

TEST(GpuConstrain, OverheadVariantsPassTheGate) {
  REQUIRE_GPU();
  SpecOptions opt;
  opt.backend = Backend::Cuda;
  Spec spec = parse_spec(
      "experiments:\n  - {name: o, kind: constrain-overhead, variants: [lm_head_argmax, lm_head_masked_argmax],"
      " model: [llama2-7b, qwen2-0.5b], min_samples: 3, min_time: 0, timeout: 2s}\n",
      "gpu-test", opt);
  auto rt = make_cuda_runtime();
  Runner runner(*rt, RunnerOptions{});
  ExperimentResult r = runner.run(spec.experiments[0]);
  ASSERT_EQ(r.rows.size(), 4u);
  for (const auto& row : r.rows) EXPECT_EQ(row.status, RowStatus::Ok) << row.variant << ": " << row.message;
}

}  // namespace
}  // namespace ib
