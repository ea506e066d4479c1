// The packed decode GEMV against the engine's reference GEMV (cpu_detail::matmul up to 32 rows):
// bit for bit at every instruction level this CPU runs, for bf16-exact weights (stored as bf16)
// and for weights that are not (stored as float32), at shapes whose columns do not fill a panel;
// and for GGUF block-quantized weights against the reference GEMV on ggml's dequantization of
// the same blocks (the GGUF reader's).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/gguf_file.h"
#include "model/cpu_model_internal.h"
#include "numerics/half.h"
#include "numerics/packed_gemv.h"
#include "numerics/random.h"

namespace ib {
namespace {

std::vector<float> random_matrix(size_t n, uint64_t seed, bool bf16_exact) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    float f = static_cast<float>(random_uniform(seed, i)) * 0.5f;
    if (bf16_exact) {
      uint32_t b;
      std::memcpy(&b, &f, 4);
      b &= 0xFFFF0000u;
      std::memcpy(&f, &b, 4);
    }
    v[i] = f;
  }
  return v;
}

std::vector<CpuIsa> isas_here() {
  std::vector<CpuIsa> v{CpuIsa::Generic};
  if (best_cpu_isa() != CpuIsa::Generic) v.push_back(CpuIsa::Avx2);
  if (best_cpu_isa() == CpuIsa::Avx512) v.push_back(CpuIsa::Avx512);
  return v;
}

void expect_same_as_reference(int in, int out, int rows, bool bf16_exact) {
  const auto w = random_matrix(static_cast<size_t>(in) * out, 11 + in + out, bf16_exact);
  const auto x = random_matrix(static_cast<size_t>(rows) * in, 7 + rows, false);
  std::vector<float> ref(static_cast<size_t>(rows) * out);
  model::cpu_detail::matmul(x.data(), rows, in, w.data(), out, nullptr, ref.data());
  const PackedWeights pw(w.data(), in, out);
  ASSERT_EQ(pw.type(), bf16_exact ? PackedType::BF16 : PackedType::F32);
  ASSERT_EQ(pw.bytes(), pw.panels() * static_cast<size_t>(in) * PackedWeights::kPanel * (bf16_exact ? 2 : 4));
  for (CpuIsa isa : isas_here()) {
    std::vector<float> y(ref.size(), -1.0f);
    pw.multiply(x.data(), rows, 0, pw.panels(), y.data(), isa);
    for (size_t e = 0; e < ref.size(); ++e)
      ASSERT_EQ(std::memcmp(&y[e], &ref[e], 4), 0) << to_string(isa) << " in " << in << " out " << out << " rows " << rows
                                                   << " element " << e << ": " << y[e] << " vs " << ref[e];
    // Panels split over callers (as threads take them) write the same outputs.
    std::vector<float> split(ref.size(), -1.0f);
    for (size_t p = 0; p < pw.panels(); ++p) pw.multiply(x.data(), rows, p, p + 1, split.data(), isa);
    ASSERT_EQ(std::memcmp(split.data(), y.data(), y.size() * 4), 0) << to_string(isa);
  }
}

TEST(PackedGemv, Bf16WeightsMatchTheReferenceBitForBit) {
  for (int rows : {1, 2, 3, 4, 5, 9})
    for (auto [in, out] : {std::pair{16, 64}, {37, 130}, {64, 200}, {3, 17}}) expect_same_as_reference(in, out, rows, true);
}

TEST(PackedGemv, Float32WeightsAreKeptAndMatchTheReference) {
  for (int rows : {1, 4, 6})
    for (auto [in, out] : {std::pair{40, 100}, {8, 64}}) expect_same_as_reference(in, out, rows, false);
}

TEST(PackedGemv, Bf16RefusedWhenNotAllowed) {
  const auto w = random_matrix(64 * 8, 3, true);
  EXPECT_EQ(PackedWeights(w.data(), 8, 64, false).type(), PackedType::F32);
  EXPECT_EQ(PackedWeights(w.data(), 8, 64).type(), PackedType::BF16);
  EXPECT_EQ(PackedWeights(w.data(), 8, 64).bytes(), 8u * 64 * 2);
}

// [out][in / 32] random blocks of `t`: scales of both signs and a spread of magnitudes, every quant.
std::vector<uint8_t> random_blocks(BlockType t, int in, int out, uint64_t seed) {
  const size_t n = static_cast<size_t>(out) * static_cast<size_t>(in / 32), bb = static_cast<size_t>(block_bytes(t));
  std::vector<uint8_t> v(n * bb);
  for (size_t e = 0; e < v.size(); ++e) v[e] = static_cast<uint8_t>(random_bits(seed, e) & 0xFF);
  for (size_t b = 0; b < n; ++b) {
    auto put = [&](size_t at, float f) {
      const uint16_t h = float_to_fp16_bits(f);
      v[b * bb + at] = static_cast<uint8_t>(h & 0xFF);
      v[b * bb + at + 1] = static_cast<uint8_t>(h >> 8);
    };
    put(0, static_cast<float>(random_uniform(seed + 1, b)) * 0.05f);
    if (t == BlockType::Q4_1) put(2, static_cast<float>(random_uniform(seed + 2, b)) * 0.2f);
  }
  return v;
}

gguf::TensorType gguf_type(BlockType t) {
  return t == BlockType::Q8_0 ? gguf::TensorType::Q8_0 : t == BlockType::Q4_0 ? gguf::TensorType::Q4_0 : gguf::TensorType::Q4_1;
}

void expect_blocks_same_as_reference(BlockType t, int in, int out, int rows) {
  const auto blocks = random_blocks(t, in, out, 100 + in + out + static_cast<uint64_t>(t));
  std::vector<float> w(static_cast<size_t>(in) * out), wt(w.size());
  gguf::dequantize(gguf_type(t), blocks.data(), static_cast<int64_t>(w.size()), w.data());  // [out][in]
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) wt[static_cast<size_t>(i) * out + o] = w[static_cast<size_t>(o) * in + i];
  const auto x = random_matrix(static_cast<size_t>(rows) * in, 9 + rows, false);
  // The reference GEMV row by row (past 32 rows the engine's matmul is an SGEMM, another order).
  std::vector<float> ref(static_cast<size_t>(rows) * out);
  for (int r = 0; r < rows; ++r)
    model::cpu_detail::matmul(x.data() + static_cast<size_t>(r) * in, 1, in, wt.data(), out, nullptr,
                              ref.data() + static_cast<size_t>(r) * out);
  const PackedWeights pw(t, blocks.data(), in, out);
  ASSERT_EQ(pw.type(), t == BlockType::Q8_0 ? PackedType::Q8_0 : PackedType::Q4_1);
  ASSERT_TRUE(pw.blocks());
  // Streamed bytes: the file's bytes per weight (Q4_0 gains an fp16 offset per block: 20 vs 18).
  const size_t per_block = t == BlockType::Q8_0 ? 34 : 20;
  ASSERT_EQ(pw.bytes(), pw.panels() * PackedWeights::kPanel * static_cast<size_t>(in / 32) * per_block);
  for (CpuIsa isa : isas_here()) {
    std::vector<float> y(ref.size(), -1.0f);
    pw.multiply(x.data(), rows, 0, pw.panels(), y.data(), isa);
    for (size_t e = 0; e < ref.size(); ++e)
      ASSERT_EQ(std::memcmp(&y[e], &ref[e], 4), 0)
          << to_string(pw.type()) << " " << to_string(isa) << " in " << in << " out " << out << " rows " << rows << " element "
          << e << ": " << y[e] << " vs " << ref[e];
    std::vector<float> split(ref.size(), -1.0f);
    for (size_t p = 0; p < pw.panels(); ++p) pw.multiply(x.data(), rows, p, p + 1, split.data(), isa);
    ASSERT_EQ(std::memcmp(split.data(), y.data(), y.size() * 4), 0) << to_string(isa);
  }
}

TEST(PackedGemv, BlockQuantizedWeightsMatchTheReferenceOnTheirDequantizationBitForBit) {
  // Rows 1-4 widen in registers, 5 and past through a float tile (37: past its 32 rows).
  for (BlockType t : {BlockType::Q8_0, BlockType::Q4_0, BlockType::Q4_1})
    for (int rows : {1, 2, 3, 4, 5, 9, 37})
      for (auto [in, out] : {std::pair{32, 64}, {96, 130}, {64, 17}, {160, 200}})
        expect_blocks_same_as_reference(t, in, out, rows);
}

TEST(PackedGemv, BlockQuantizedWeightsRefuseWhatTheyCannotHoldExactly) {
  const auto blocks = random_blocks(BlockType::Q4_0, 64, 64, 5);
  EXPECT_THROW(PackedWeights(BlockType::Q4_0, blocks.data(), 48, 64), std::invalid_argument);
  auto big = blocks;
  const uint16_t h = float_to_fp16_bits(9000.0f);  // -8·d overflows fp16's range
  big[0] = static_cast<uint8_t>(h & 0xFF);
  big[1] = static_cast<uint8_t>(h >> 8);
  EXPECT_THROW(PackedWeights(BlockType::Q4_0, big.data(), 64, 64), std::invalid_argument);
}

// Int8 dot products (BlockDot::Int8): the dequantized weights times the activations quantized as
// ggml's quantize_row_q8_0 defines it (d = amax/127, q = round-to-nearest(x·(1/d))), computed
// here in double from the GGUF reader's dequantization; every level the same bits as the generic
// kernel; and within the activations' quantization error of the float product.
void expect_int8_dot_is_the_quantized_product(BlockType t, int in, int out, int rows) {
  const auto blocks = random_blocks(t, in, out, 300 + in + out + static_cast<uint64_t>(t));
  std::vector<float> w(static_cast<size_t>(in) * out);
  gguf::dequantize(gguf_type(t), blocks.data(), static_cast<int64_t>(w.size()), w.data());  // [out][in]
  const auto x = random_matrix(static_cast<size_t>(rows) * in, 19 + rows, false);
  std::vector<double> xq(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    for (size_t i = b; i < b + 32; ++i) xq[i] = static_cast<double>(d) * std::nearbyint(x[i] * id);
  }
  std::vector<double> want(static_cast<size_t>(rows) * out), exact(want.size()), bound(want.size());
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      const size_t e = static_cast<size_t>(r) * out + o;
      for (int i = 0; i < in; ++i) {
        const double wi = w[static_cast<size_t>(o) * in + i];
        want[e] += wi * xq[static_cast<size_t>(r) * in + i];
        exact[e] += wi * x[static_cast<size_t>(r) * in + i];
        bound[e] += std::fabs(wi * xq[static_cast<size_t>(r) * in + i]);
      }
    }
  const PackedWeights pw(t, blocks.data(), in, out, BlockDot::Int8);
  ASSERT_EQ(pw.type(), t == BlockType::Q8_0 ? PackedType::Q8_0_I8 : PackedType::Q4_1_I8);
  ASSERT_TRUE(pw.blocks() && pw.int8_dot());
  ASSERT_EQ(pw.bytes(), PackedWeights(t, blocks.data(), in, out).bytes()) << "the exact layout's bytes per weight";
  std::vector<float> generic(want.size(), -1.0f);
  pw.multiply(x.data(), rows, 0, pw.panels(), generic.data(), CpuIsa::Generic);
  double err2 = 0, norm2 = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    // One rounding per block and per sum of blocks: float32's relative 2^-24 on each of a few terms.
    ASSERT_NEAR(generic[e], want[e], 1e-6 * bound[e] + 1e-30)
        << to_string(pw.type()) << " in " << in << " out " << out << " rows " << rows << " element " << e;
    err2 += (generic[e] - exact[e]) * (generic[e] - exact[e]);
    norm2 += exact[e] * exact[e];
  }
  EXPECT_LT(std::sqrt(err2 / norm2), 2e-2) << "the float product on the same weights";
  for (CpuIsa isa : isas_here()) {
    std::vector<float> y(want.size(), -1.0f), split(want.size(), -1.0f);
    pw.multiply(x.data(), rows, 0, pw.panels(), y.data(), isa);
    ASSERT_EQ(std::memcmp(y.data(), generic.data(), y.size() * 4), 0) << to_string(isa) << " vs generic";
    for (size_t p = 0; p < pw.panels(); ++p) pw.multiply(x.data(), rows, p, p + 1, split.data(), isa);
    ASSERT_EQ(std::memcmp(split.data(), y.data(), y.size() * 4), 0) << to_string(isa) << " panel by panel";
  }
}

TEST(PackedGemv, Int8DotIsTheProductOfTheDequantizedOperandsAtEveryLevel) {
  if (best_cpu_isa() == CpuIsa::Avx512 && !cpu_has_avx512_vnni()) GTEST_LOG_(INFO) << "no AVX-512 VNNI: generic kernels only";
  for (BlockType t : {BlockType::Q8_0, BlockType::Q4_0, BlockType::Q4_1})
    for (int rows : {1, 2, 3, 4, 5, 9})
      for (auto [in, out] : {std::pair{32, 64}, {96, 130}, {64, 17}, {160, 40}})
        expect_int8_dot_is_the_quantized_product(t, in, out, rows);
}

TEST(PackedGemv, Int8DotOfZeroActivationsIsExactlyZero) {
  // An all-zero block has scale 0 (its reciprocal taken as 0, not inf): every output 0, never NaN.
  for (BlockType t : {BlockType::Q8_0, BlockType::Q4_1}) {
    const auto blocks = random_blocks(t, 64, 70, 8);
    const PackedWeights pw(t, blocks.data(), 64, 70, BlockDot::Int8);
    const std::vector<float> x(64, 0.0f);
    for (CpuIsa isa : isas_here()) {
      std::vector<float> y(70, -1.0f);
      pw.multiply(x.data(), 1, 0, pw.panels(), y.data(), isa);
      for (float v : y) ASSERT_EQ(v, 0.0f) << to_string(isa);
    }
  }
}

}  // namespace
}  // namespace ib
