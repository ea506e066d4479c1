// The weight-streaming GEMV (kernels/gemv.h) against a CPU reference in double and against
// cuBLAS (the engine's other path) over rows 1..8, bf16/fp32 outputs and fp32 accumulation,
// shapes whose `in` is not a multiple of a warp step or of the unroll and whose `out` is not a
// multiple of a block's outputs, every split-K factor; then the promises the engine relies on:
// the same bits on a second launch, for a row alone or among 8, and when replayed from a CUDA
// graph. Shape checks run without a device (no launch); the rest skip without one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "device_vectors.h"
#include "require_gpu.h"
#include "test_stream.h"

#include "core/cublas.h"
#include "core/cuda_memory.h"
#include "gemv.h"
#include "model_ops.h"
#include "numerics/cuda_check.h"
#include "numerics/half.h"
#include "numerics/random.h"

namespace ib {
namespace {

using testing::TestStream;
using testing::to_device;
using testing::to_host;

struct Shape {
  int in, out;
};

// llama2-7b's and qwen2-0.5b's shapes are too slow to check against a host reference in full;
// these cover the kernel's cases: 1 chunk per row, fewer chunks than lanes, a tail of 1..U
// steps, every split 1/2/4/8 (with 132 SMs), `out` below and just past a block's outputs.
const std::vector<Shape> kShapes = {{8, 5},      {64, 8},     {136, 77},    {1000, 33}, {896, 1152},
                                    {4864, 896}, {4104, 300}, {2056, 4100}, {264, 1}};

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float_to_bf16_bits(scale * random_uniform(seed, i));
  return v;
}

int sm_count() {
  int dev = 0, n = 0;
  IB_CUDA_CHECK(cudaGetDevice(&dev));
  IB_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

// Y = X·Wᵀ in double on the bf16 values, and Σ|w·x| per element (the scale of fp32 rounding).
struct Reference {
  std::vector<double> y, mag;
};
Reference reference(const std::vector<uint16_t>& w, const std::vector<uint16_t>& x, int rows, int in, int out) {
  Reference r;
  r.y.resize(static_cast<size_t>(rows) * out);
  r.mag.resize(r.y.size());
  for (int i = 0; i < rows; ++i)
    for (int o = 0; o < out; ++o) {
      double s = 0, m = 0;
      for (int k = 0; k < in; ++k) {
        const double p = static_cast<double>(bf16_bits_to_float(w[static_cast<size_t>(o) * in + k])) *
                         bf16_bits_to_float(x[static_cast<size_t>(i) * in + k]);
        s += p;
        m += std::fabs(p);
      }
      r.y[static_cast<size_t>(i) * out + o] = s;
      r.mag[static_cast<size_t>(i) * out + o] = m;
    }
  return r;
}

// fp32 accumulation of `in` products: a few thousand roundings at most, each <= 2^-24 of Σ|w·x|.
double fp32_tol(double mag) { return 2e-5 * mag + 1e-30; }

// The kernel's result as doubles: bf16 or fp32 output of `rows` × `out`.
std::vector<double> as_double(const DeviceBuffer<float>& y, GemvOut kind, size_t n) {
  std::vector<double> d(n);
  if (kind == GemvOut::Bf16) {
    std::vector<uint16_t> h(n);
    IB_CUDA_CHECK(cudaMemcpy(h.data(), y.data(), n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) d[i] = bf16_bits_to_float(h[i]);
  } else {
    std::vector<float> h(n);
    IB_CUDA_CHECK(cudaMemcpy(h.data(), y.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) d[i] = h[i];
  }
  return d;
}

const char* name(GemvOut k) { return k == GemvOut::Bf16 ? "bf16" : k == GemvOut::Fp32 ? "fp32" : "fp32+="; }

TEST(Gemv, ShapesItRefusesAreLeftToTheCaller) {
  // Host-side only: no device needed.
  alignas(16) static uint16_t buf[64];
  EXPECT_TRUE(gemv_bf16_supports(1, 8, 1, buf, buf));
  EXPECT_TRUE(gemv_bf16_supports(kGemvMaxRows, 64, 3, buf, buf));
  EXPECT_FALSE(gemv_bf16_supports(0, 64, 3, buf, buf));
  EXPECT_FALSE(gemv_bf16_supports(kGemvMaxRows + 1, 64, 3, buf, buf));
  EXPECT_FALSE(gemv_bf16_supports(1, 60, 3, buf, buf));  // in % 8 != 0 (tiny's MLP of 172)
  EXPECT_FALSE(gemv_bf16_supports(1, 0, 3, buf, buf));
  EXPECT_FALSE(gemv_bf16_supports(1, 64, 0, buf, buf));
  EXPECT_FALSE(gemv_bf16_supports(1, 64, 3, buf + 1, buf));  // W not 16-byte aligned
  EXPECT_FALSE(gemv_bf16_supports(1, 64, 3, buf, buf + 4));  // X not 16-byte aligned
  float y[8];
  EXPECT_THROW(launch_gemv_bf16(buf, buf, y, GemvOut::Fp32, 9, 64, 1, 132, nullptr), std::invalid_argument);
  EXPECT_THROW(launch_gemv_bf16(buf, buf, y, GemvOut::Fp32, 1, 12, 1, 132, nullptr), std::invalid_argument);
}

TEST(Gemv, SplitDependsOnTheShapeAndTheSmCountOnly) {
  for (int sms : {1, 16, 132, 100000}) {
    for (const Shape& s : kShapes) {
      const int split = gemv_split(s.in, s.out, sms);
      EXPECT_TRUE(split == 1 || split == 2 || split == 4 || split == 8) << split;
      if (split > 1) {
        EXPECT_GE(s.in / 8 / split, 32) << s.in << " " << split;  // every warp a full step of `in`
      }
    }
  }
  // On 132 SMs: llama2-7b's o_proj/down_proj (4096 outputs) split 2, its QKV and gate/up not;
  // qwen2-0.5b's down_proj (896 outputs, in 4864) 8 ways, its o_proj (in 896) 2.
  EXPECT_EQ(gemv_split(4096, 4096, 132), 2);
  EXPECT_EQ(gemv_split(11008, 4096, 132), 2);
  EXPECT_EQ(gemv_split(4096, 12288, 132), 1);
  EXPECT_EQ(gemv_split(4864, 896, 132), 8);
  EXPECT_EQ(gemv_split(896, 896, 132), 2);
  EXPECT_EQ(gemv_split(896, 151936, 132), 1);
}

TEST(Gemv, MatchesADoubleReferenceForEveryRowCountAndOutput) {
  REQUIRE_GPU();
  TestStream stream;
  const int sms = sm_count();
  for (const Shape& s : kShapes) {
    const int R = kGemvMaxRows;
    const auto w = random_bf16(static_cast<size_t>(s.out) * s.in, 100 + s.in, 0.5f);
    const auto x = random_bf16(static_cast<size_t>(R) * s.in, 200 + s.out, 1.0f);
    const auto dw = to_device(w), dx = to_device(x);
    const Reference ref = reference(w, x, R, s.in, s.out);
    std::vector<float> y0(static_cast<size_t>(R) * s.out);
    for (size_t i = 0; i < y0.size(); ++i) y0[i] = 4.0f * random_uniform(300, i);
    for (int rows = 1; rows <= R; ++rows) {
      for (GemvOut kind : {GemvOut::Bf16, GemvOut::Fp32, GemvOut::Fp32Add}) {
        DeviceBuffer<float> dy = to_device(y0);
        const size_t n = static_cast<size_t>(rows) * s.out;
        launch_gemv_bf16(dw.data(), dx.data(), dy.data(), kind, rows, s.in, s.out, sms, stream.get());
        IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        const std::vector<double> got = as_double(dy, kind, n);
        int bad = 0;
        for (size_t i = 0; i < n && bad < 5; ++i) {
          double want = ref.y[i], tol = fp32_tol(ref.mag[i]);
          if (kind == GemvOut::Fp32Add) {
            want += y0[i];
            tol += std::fabs(want) * 1.2e-7;
          }
          if (kind == GemvOut::Bf16) tol += (std::fabs(want) + tol) * (1.0 / 256);  // one bf16 rounding
          if (!(std::fabs(got[i] - want) <= tol)) {
            ++bad;
            ADD_FAILURE() << "in " << s.in << " out " << s.out << " rows " << rows << " " << name(kind) << " at [" << i / s.out
                          << "][" << i % s.out << "]: " << got[i] << " vs " << want << " (tol " << tol << ")";
          }
        }
        if (kind != GemvOut::Bf16) {
          // Fp32 store leaves rows past `rows` alone: the caller's buffer is [rows][out].
          const auto all = to_host(dy);
          for (size_t i = n; i < all.size(); i += 7) ASSERT_EQ(all[i], y0[i]) << "wrote past its rows";
        }
      }
    }
  }
}

TEST(Gemv, AgreesWithCublas) {
  REQUIRE_GPU();
  TestStream stream;
  const int sms = sm_count();
  cublasHandle_t h = cublas_handle(stream.get());
  for (const Shape& s : kShapes) {
    for (int rows : {1, 2, 3, 5, 8}) {
      const auto w = random_bf16(static_cast<size_t>(s.out) * s.in, 400 + s.in, 0.5f);
      const auto x = random_bf16(static_cast<size_t>(rows) * s.in, 500 + rows, 1.0f);
      const auto dw = to_device(w), dx = to_device(x);
      const Reference ref = reference(w, x, rows, s.in, s.out);
      DeviceBuffer<float> ours(static_cast<size_t>(rows) * s.out, "gemv"), theirs(ours.size(), "cublas");
      launch_gemv_bf16(dw.data(), dx.data(), ours.data(), GemvOut::Fp32, rows, s.in, s.out, sms, stream.get());
      const float alpha = 1.0f, beta = 0.0f;
      IB_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.out, rows, s.in, &alpha, dw.data(), CUDA_R_16BF, s.in,
                                   dx.data(), CUDA_R_16BF, s.in, &beta, theirs.data(), CUDA_R_32F, s.out, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT));
      IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      const auto a = to_host(ours), b = to_host(theirs);
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_LE(std::fabs(static_cast<double>(a[i]) - b[i]), 2 * fp32_tol(ref.mag[i]))
            << "in " << s.in << " out " << s.out << " rows " << rows << " at " << i << ": " << a[i] << " vs cuBLAS " << b[i];
    }
  }
}

// Each output's sum is taken in an order fixed by (in, split): a second launch, a row launched
// alone or among 8 (another outputs-per-warp and unroll), all give the same bits.
TEST(Gemv, BitwiseRepeatableAndIndependentOfTheRowCount) {
  REQUIRE_GPU();
  TestStream stream;
  const int sms = sm_count();
  for (const Shape& s : kShapes) {
    const int R = kGemvMaxRows;
    const auto w = random_bf16(static_cast<size_t>(s.out) * s.in, 600 + s.in, 0.5f);
    const auto x = random_bf16(static_cast<size_t>(R) * s.in, 700 + s.out, 1.0f);
    const auto dw = to_device(w), dx = to_device(x);
    DeviceBuffer<float> all(static_cast<size_t>(R) * s.out, "8 rows"), again(all.size(), "again");
    launch_gemv_bf16(dw.data(), dx.data(), all.data(), GemvOut::Fp32, R, s.in, s.out, sms, stream.get());
    launch_gemv_bf16(dw.data(), dx.data(), again.data(), GemvOut::Fp32, R, s.in, s.out, sms, stream.get());
    IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const auto a = to_host(all);
    EXPECT_EQ(a, to_host(again)) << "in " << s.in << " out " << s.out;
    DeviceBuffer<float> part(static_cast<size_t>(R) * s.out, "fewer rows");
    for (int first = 0; first < R; first += 3) {
      const int rows = std::min(3, R - first);  // rows 0-2, 3-5, 6-7 as launches of 3, 3 and 2
      launch_gemv_bf16(dw.data(), dx.data() + static_cast<size_t>(first) * s.in, part.data() + static_cast<size_t>(first) * s.out,
                       GemvOut::Fp32, rows, s.in, s.out, sms, stream.get());
    }
    IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    EXPECT_EQ(to_host(part), a) << "in " << s.in << " out " << s.out;
    for (int r = 0; r < R; ++r)
      launch_gemv_bf16(dw.data(), dx.data() + static_cast<size_t>(r) * s.in, part.data() + static_cast<size_t>(r) * s.out,
                       GemvOut::Fp32, 1, s.in, s.out, sms, stream.get());
    IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    EXPECT_EQ(to_host(part), a) << "in " << s.in << " out " << s.out << " one row at a time";
  }
}

// Another SM count picks another split (another summation order): the same values to rounding.
TEST(Gemv, EverySplitGivesTheSameValues) {
  REQUIRE_GPU();
  TestStream stream;
  const Shape s{4104, 300};
  const auto w = random_bf16(static_cast<size_t>(s.out) * s.in, 800, 0.5f);
  const auto x = random_bf16(static_cast<size_t>(4) * s.in, 801, 1.0f);
  const auto dw = to_device(w), dx = to_device(x);
  const Reference ref = reference(w, x, 4, s.in, s.out);
  std::set<int> splits;
  for (int sms : {1, 10, 19, 1000}) {  // 300 outputs: splits 1, 2, 4, 8
    splits.insert(gemv_split(s.in, s.out, sms));
    DeviceBuffer<float> y(static_cast<size_t>(4) * s.out, "y");
    launch_gemv_bf16(dw.data(), dx.data(), y.data(), GemvOut::Fp32, 4, s.in, s.out, sms, stream.get());
    IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    const auto got = to_host(y);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_LE(std::fabs(got[i] - ref.y[i]), fp32_tol(ref.mag[i])) << "split " << gemv_split(s.in, s.out, sms) << " at " << i;
  }
  EXPECT_EQ(splits, (std::set<int>{1, 2, 4, 8}));
}

// The gate/up GEMV with SwiGLU in its epilogue writes bitwise what the gate/up GEMV (bf16) and
// launch_swiglu write, over rows 1..8 and MLP widths below and past a block's columns.
TEST(Gemv, SwigluEpilogueIsBitwiseTheGemvThenLaunchSwiglu) {
  REQUIRE_GPU();
  TestStream stream;
  const int sms = sm_count();
  for (const Shape& s : std::vector<Shape>{{64, 160}, {136, 77}, {256, 512}, {896, 1000}, {4104, 300}, {8, 3}}) {
    const int mlp = s.out;
    const auto w = random_bf16(static_cast<size_t>(2 * mlp) * s.in, 1000 + s.in, 0.5f);
    const auto x = random_bf16(static_cast<size_t>(kGemvMaxRows) * s.in, 1100 + mlp, 1.0f);
    const auto dw = to_device(w), dx = to_device(x);
    DeviceBuffer<uint16_t> gu(static_cast<size_t>(kGemvMaxRows) * 2 * mlp, "gate/up"),
        want(static_cast<size_t>(kGemvMaxRows) * mlp, "act"), got(want.size(), "fused act");
    for (int rows = 1; rows <= kGemvMaxRows; ++rows) {
      IB_CUDA_CHECK(cudaMemsetAsync(want.data(), 0, want.bytes(), stream.get()));
      IB_CUDA_CHECK(cudaMemsetAsync(got.data(), 0, got.bytes(), stream.get()));
      launch_gemv_bf16(dw.data(), dx.data(), gu.data(), GemvOut::Bf16, rows, s.in, 2 * mlp, sms, stream.get());
      launch_swiglu(gu.data(), rows, mlp, want.data(), stream.get());
      launch_gemv_swiglu_bf16(dw.data(), dx.data(), got.data(), rows, s.in, mlp, sms, stream.get());
      IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      ASSERT_EQ(to_host(got), to_host(want)) << "in " << s.in << " mlp " << mlp << " rows " << rows;
    }
  }
  alignas(16) static uint16_t buf[64];
  EXPECT_THROW(launch_gemv_swiglu_bf16(buf, buf, buf, 1, 12, 4, sms, nullptr), std::invalid_argument);
  EXPECT_THROW(launch_gemv_swiglu_bf16(buf, buf, buf, 1, 8, 0, sms, nullptr), std::invalid_argument);
}

// Launches captured into a graph (as the engine's decode step is) replay to the eager bits: the
// launcher neither allocates nor synchronises.
TEST(Gemv, ReplaysFromACudaGraph) {
  REQUIRE_GPU();
  TestStream stream;
  const int sms = sm_count();
  const Shape s{896, 1152};
  const auto w = random_bf16(static_cast<size_t>(s.out) * s.in, 900, 0.5f);
  const auto x = random_bf16(static_cast<size_t>(2) * s.in, 901, 1.0f);
  const auto dw = to_device(w), dx = to_device(x);
  DeviceBuffer<float> eager(static_cast<size_t>(2) * s.out, "eager"), graphed(eager.size(), "graphed");
  DeviceBuffer<uint16_t> eager16(eager.size(), "eager bf16"), graphed16(eager.size(), "graphed bf16");
  launch_gemv_bf16(dw.data(), dx.data(), eager.data(), GemvOut::Fp32, 2, s.in, s.out, sms, stream.get());
  launch_gemv_bf16(dw.data(), dx.data(), eager.data(), GemvOut::Fp32Add, 2, s.in, s.out, sms, stream.get());
  launch_gemv_bf16(dw.data(), dx.data(), eager16.data(), GemvOut::Bf16, 2, s.in, s.out, sms, stream.get());
  cudaGraph_t g = nullptr;
  IB_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  launch_gemv_bf16(dw.data(), dx.data(), graphed.data(), GemvOut::Fp32, 2, s.in, s.out, sms, stream.get());
  launch_gemv_bf16(dw.data(), dx.data(), graphed.data(), GemvOut::Fp32Add, 2, s.in, s.out, sms, stream.get());
  launch_gemv_bf16(dw.data(), dx.data(), graphed16.data(), GemvOut::Bf16, 2, s.in, s.out, sms, stream.get());
  IB_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &g));
  cudaGraphExec_t e = nullptr;
  IB_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int i = 0; i < 2; ++i) IB_CUDA_CHECK(cudaGraphLaunch(e, stream.get()));  // y = s, y += s, twice: the same
  IB_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  (void)cudaGraphExecDestroy(e);
  (void)cudaGraphDestroy(g);
  EXPECT_EQ(to_host(graphed), to_host(eager));
  EXPECT_EQ(to_host(graphed16), to_host(eager16));
}

}  // namespace
}  // namespace ib
