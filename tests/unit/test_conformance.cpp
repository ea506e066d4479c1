// Conformance over the registry on the CPU backend: every registered CPU and host variant of every
// kind runs at its kind's smallest point and passes its gate (tests/common/conformance.h). A new
// variant is checked by registering it: there is no list to edit. A peer (another framework in
// its own process) may be unsupported, saying why, where its framework is not installed.
#include <gtest/gtest.h>

#include "../common/conformance.h"

namespace ib {
namespace {

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, EveryVariantPassesItsGateAtTheKindsSmallestPoint) { testing::expect_conformance(GetParam(), Backend::Cpu); }

INSTANTIATE_TEST_SUITE_P(EveryKind, Conformance, ::testing::ValuesIn(testing::conformance_kinds()),
                         testing::conformance_test_name);

}  // namespace
}  // namespace ib
