// The BGMV kernels (kernels/lora_bgmv.h) against a CPU reference in double: a batch whose rows use
// three adapters and the base model, in a shuffled order, through shrink then expand, with fp32
// and bf16 outputs; rows of the base model untouched; the same bits on a second launch. Shape
// checks run without a device; the rest skip without one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "device_vectors.h"
#include "require_gpu.h"
#include "test_stream.h"

#include "core/cuda_memory.h"
#include "lora_bgmv.h"
#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/random.h"

namespace ib {
namespace {

using testing::TestStream;
using testing::to_device;
using testing::to_host;

std::vector<uint16_t> lora_random_bf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float_to_bf16_bits(scale * random_uniform(seed, i));
  return v;
}

TEST(GpuLora, RefusesShapesItDoesNotTake) {
  EXPECT_THROW(launch_lora_shrink_bf16(nullptr, 0, 8, nullptr, nullptr, 4, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(launch_lora_shrink_bf16(nullptr, 1, 8, nullptr, nullptr, kLoraMaxRank + 1, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(launch_lora_expand_bf16(nullptr, 1, 4, nullptr, nullptr, nullptr, 0, nullptr, LoraOut::Fp32Add, nullptr),
               std::invalid_argument);
}

TEST(GpuLora, ShrinkThenExpandMatchesTheCpuReferencePerRowAdapter) {
  REQUIRE_GPU();
  const int in = 200, out = 300, rank = 16, n_adapters = 3;
  const std::vector<int32_t> adapter_of_row = {2, 0, -1, 1, 0, 2, -1, 1, 1};
  const int rows = static_cast<int>(adapter_of_row.size());
  const std::vector<float> scaling = {2.0f, 0.5f, 1.25f};
  std::vector<std::vector<uint16_t>> a, b;
  std::vector<DeviceBuffer<uint16_t>> da, db;
  std::vector<const uint16_t*> pa, pb;
  for (int i = 0; i < n_adapters; ++i) {
    a.push_back(lora_random_bf16(static_cast<size_t>(rank) * in, 100 + i, 0.1f));
    b.push_back(lora_random_bf16(static_cast<size_t>(out) * rank, 200 + i, 0.1f));
    da.push_back(to_device(a.back()));
    db.push_back(to_device(b.back()));
    pa.push_back(da.back().data());
    pb.push_back(db.back().data());
  }
  const auto x = lora_random_bf16(static_cast<size_t>(rows) * in, 7, 1.0f);
  const auto y0f = lora_random_bf16(static_cast<size_t>(rows) * out, 8, 1.0f);  // what the base GEMM left in y
  std::vector<float> y0(y0f.size());
  for (size_t i = 0; i < y0.size(); ++i) y0[i] = bf16_bits_to_float(y0f[i]);

  // Reference: y0 + s·B·(A·x) in double on the bf16 values.
  std::vector<double> want(y0.begin(), y0.end());
  for (int r = 0; r < rows; ++r) {
    const int ad = adapter_of_row[static_cast<size_t>(r)];
    if (ad < 0) continue;
    std::vector<double> t(rank, 0.0);
    for (int k = 0; k < rank; ++k)
      for (int i = 0; i < in; ++i)
        t[static_cast<size_t>(k)] +=
            static_cast<double>(bf16_bits_to_float(a[static_cast<size_t>(ad)][static_cast<size_t>(k) * in + i])) *
            bf16_bits_to_float(x[static_cast<size_t>(r) * in + i]);
    for (int o = 0; o < out; ++o) {
      double acc = 0;
      for (int k = 0; k < rank; ++k)
        acc += t[static_cast<size_t>(k)] * bf16_bits_to_float(b[static_cast<size_t>(ad)][static_cast<size_t>(o) * rank + k]);
      want[static_cast<size_t>(r) * out + o] += scaling[static_cast<size_t>(ad)] * acc;
    }
  }

  TestStream stream;
  auto d_x = to_device(x);
  auto d_rows = to_device(adapter_of_row);
  auto d_pa = to_device(pa);
  auto d_pb = to_device(pb);
  auto d_s = to_device(scaling);
  DeviceBuffer<float> d_t(static_cast<size_t>(rows) * rank, "t");
  auto d_y = to_device(y0);
  launch_lora_shrink_bf16(d_x.data(), rows, in, d_rows.data(), d_pa.data(), rank, d_t.data(), stream.get());
  launch_lora_expand_bf16(d_t.data(), rows, rank, d_rows.data(), d_pb.data(), d_s.data(), out, d_y.data(), LoraOut::Fp32Add,
                          stream.get());
  IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const auto got = to_host(d_y);
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      const size_t i = static_cast<size_t>(r) * out + o;
      if (adapter_of_row[static_cast<size_t>(r)] < 0) {
        ASSERT_EQ(got[i], y0[i]) << "row " << r << " (base model) was changed";
        continue;
      }
      worst = std::max(worst, std::fabs(got[i] - want[i]));
    }
  EXPECT_LE(worst, 1e-4);

  // bf16 output: the same update rounded once.
  auto d_yb = to_device(y0f);
  launch_lora_expand_bf16(d_t.data(), rows, rank, d_rows.data(), d_pb.data(), d_s.data(), out, d_yb.data(), LoraOut::Bf16Add,
                          stream.get());
  IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const auto gotb = to_host(d_yb);
  for (size_t i = 0; i < gotb.size(); ++i) {
    const double tol = 0.008 * std::fabs(want[i]) + 1e-3;  // bf16 has 8 bits of mantissa
    ASSERT_NEAR(bf16_bits_to_float(gotb[i]), want[i], tol) << "element " << i;
  }

  // Deterministic: a second launch from the same y gives the same bits.
  auto d_y2 = to_device(y0);
  launch_lora_expand_bf16(d_t.data(), rows, rank, d_rows.data(), d_pb.data(), d_s.data(), out, d_y2.data(), LoraOut::Fp32Add,
                          stream.get());
  IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  EXPECT_EQ(to_host(d_y2), got);
}

}  // namespace
}  // namespace ib
