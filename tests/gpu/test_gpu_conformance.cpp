// Conformance over the registry on the CUDA backend: every registered CUDA and host variant of
// every kind at its kind's smallest point passes its gate (tests/common/conformance.h), as the CPU
// test does for the CPU variants. Skipped, saying why, where no GPU is usable.
#include <gtest/gtest.h>

#include "../common/conformance.h"
#include "require_gpu.h"

namespace ib {
namespace {

class GpuConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuConformance, EveryVariantPassesItsGateAtTheKindsSmallestPoint) {
  REQUIRE_GPU();
  testing::expect_conformance(GetParam(), Backend::Cuda);
}

INSTANTIATE_TEST_SUITE_P(EveryKind, GpuConformance, ::testing::ValuesIn(testing::conformance_kinds()),
                         testing::conformance_test_name);

}  // namespace
}  // namespace ib
