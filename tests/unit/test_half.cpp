#include <cmath>
#include <cstdint>
#include <set>

#include <gtest/gtest.h>

#include "numerics/dtype.h"
#include "numerics/half.h"
#include "numerics/random.h"

namespace ib {
namespace {

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3·2^-8 is halfway between 1+2^-7 and 1+2^-6: ties go to even (1 + 2^-6).
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  EXPECT_TRUE(std::isinf(bf16_bits_to_float(float_to_bf16_bits(INFINITY))));
}

TEST(Half, Fp16MatchesIeeeRounding) {
  EXPECT_EQ(float_to_fp16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7bff);               // largest finite
  EXPECT_EQ(float_to_fp16_bits(65519.0f), 0x7bff);               // still rounds down
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7c00);               // rounds to infinity
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(float_to_fp16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(NAN))));
}

TEST(Half, Fp16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN
    float f = fp16_bits_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(float_to_fp16_bits(f), h) << "bits " << h;
  }
}

TEST(Half, Bf16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7f80) == 0x7f80) continue;
    float f = bf16_bits_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(float_to_bf16_bits(f), h) << "bits " << h;
  }
}

TEST(Random, IsDeterministicAndInRange) {
  double sum = 0;
  std::set<float> distinct;
  for (uint64_t i = 0; i < 100000; ++i) {
    float v = random_uniform(42, i);
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
    ASSERT_EQ(v, random_uniform(42, i));
    sum += v;
    if (i < 1000) distinct.insert(v);
  }
  EXPECT_NEAR(sum / 100000, 0.0, 0.01);
  EXPECT_GT(distinct.size(), 990u);
  EXPECT_NE(random_uniform(42, 7), random_uniform(43, 7));
}

TEST(DType, RoundTo) {
  EXPECT_EQ(round_to(DType::F32, 0.1f), 0.1f);
  EXPECT_NE(round_to(DType::BF16, 0.1f), 0.1f);
  EXPECT_NEAR(round_to(DType::BF16, 0.1f), 0.1f, 0.1f / 128);
  EXPECT_NEAR(round_to(DType::F16, 0.1f), 0.1f, 0.1f / 1024);
  EXPECT_EQ(dtype_from_string("bf16"), DType::BF16);
  EXPECT_FALSE(dtype_from_string("int3"));
}

}  // namespace
}  // namespace ib
