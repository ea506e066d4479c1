#include <gtest/gtest.h>

#include "core/errors.h"
#include "core/units.h"

namespace ib {
namespace {

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("64KiB"), 64 * 1024);
  EXPECT_EQ(parse_bytes("1.5 GiB"), int64_t{3} << 29);
  EXPECT_EQ(parse_bytes("80GB"), int64_t{80'000'000'000});
  EXPECT_EQ(parse_bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(parse_bytes("1M"), 1 << 20);
  EXPECT_EQ(parse_bytes("-1MiB"), -(1 << 20));  // parsed; range checks reject it later
  EXPECT_FALSE(parse_bytes("lots"));
  EXPECT_FALSE(parse_bytes("12 parsecs"));
  EXPECT_FALSE(parse_bytes("1.3B"));  // not a whole number of bytes
  EXPECT_FALSE(parse_bytes(""));
}

TEST(Units, FormatsSizes) {
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(double(int64_t{1} << 30)), "1 GiB");
  EXPECT_EQ(format_bytes(64e9), "59.6 GiB");
}

TEST(Units, ParsesDurations) {
  EXPECT_DOUBLE_EQ(*parse_seconds("0.5"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_seconds("500ms"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_seconds("20us"), 20e-6);
  EXPECT_DOUBLE_EQ(*parse_seconds("2s"), 2);
  EXPECT_DOUBLE_EQ(*parse_seconds("1min"), 60);
  EXPECT_FALSE(parse_seconds("soon"));
  EXPECT_FALSE(parse_seconds("5 hours"));
}

TEST(Units, FormatsNumbersWithThreeSignificantDigits) {
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(12.345), "12.3");
  EXPECT_EQ(format_number(1.2345), "1.23");
  EXPECT_EQ(format_number(0.012345), "0.0123");
  EXPECT_EQ(format_number(4240.4), "4240");
  EXPECT_EQ(format_number(1.5e7), "1.5e+07");
  EXPECT_EQ(format_seconds(0.0123), "12.3 ms");
  EXPECT_EQ(format_seconds(2.5e-5), "25.0 us");
}

TEST(Suggestions, NearestKey) {
  std::vector<std::string> keys = {"seq_len", "head_dim", "batch", "causal"};
  EXPECT_EQ(nearest("seq_lne", keys), "seq_len");
  EXPECT_EQ(nearest("seq", keys), "seq_len");
  EXPECT_EQ(nearest("batchh", keys), "batch");
  EXPECT_EQ(nearest("zzzzzzzz", keys), "");
  EXPECT_EQ(did_you_mean("casual", keys), " (did you mean 'causal'?)");
  EXPECT_EQ(did_you_mean("qqqqqqqq", keys), "");
}

}  // namespace
}  // namespace ib

namespace ib {
namespace {

TEST(Units, FractionsAndPercentages) {
  EXPECT_EQ(parse_fraction("0.05"), std::optional<double>(0.05));
  EXPECT_DOUBLE_EQ(*parse_fraction("5%"), 0.05);
  EXPECT_DOUBLE_EQ(*parse_fraction("-2"), -2.0);
  for (const char* bad : {"", "%", "x", "5 %", "1e999", "nan%", "0.1x"}) EXPECT_FALSE(parse_fraction(bad).has_value()) << bad;
}

}  // namespace
}  // namespace ib
