// The packed decode GEMV against the engine's reference GEMV (cpu_detail::matmul up to 32 rows):
// bit for bit at every instruction level this CPU runs, for bf16-exact weights (stored as bf16)
// and for weights that are not (stored as float32), at shapes whose columns do not fill a panel.
#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "model/cpu_model_internal.h"
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

}  // namespace
}  // namespace ib
