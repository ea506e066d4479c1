#include <gtest/gtest.h>

#include "core/point_access.h"
#include "core/spec.h"
#include "core/sweep.h"

namespace ib {
namespace {

ExperimentSpec one(const std::string& body) {
  SpecOptions opt;
  return parse_spec("experiments:\n  - name: s\n    kind: ceiling\n    variants: [sgemm, memcpy]\n" + body, "t.yaml", opt)
      .experiments[0];
}

TEST(Sweep, CartesianProductFirstAxisSlowest) {
  ExperimentSpec e = one("    bytes: [1MiB, 2MiB]\n    m: [1, 2, 3]\n");
  auto pts = expand_sweep(e);
  ASSERT_EQ(pts.size(), 6u);
  EXPECT_EQ(std::get<int64_t>(PointAccess::at(pts[0], "bytes")), 1 << 20);
  EXPECT_EQ(std::get<int64_t>(PointAccess::at(pts[0], "m")), 1);
  EXPECT_EQ(std::get<int64_t>(PointAccess::at(pts[1], "m")), 2);
  EXPECT_EQ(std::get<int64_t>(PointAccess::at(pts[3], "bytes")), 2 << 20);
  EXPECT_EQ(std::get<int64_t>(PointAccess::at(pts[5], "m")), 3);
  EXPECT_EQ(pts[4].label({"bytes", "m"}), "bytes=2MiB m=2");
  EXPECT_EQ(std::get<std::string>(PointAccess::at(pts[0], "dtype")), "bf16");  // default
}

TEST(Sweep, SkipRulesMatchEveryCondition) {
  ExperimentSpec e =
      one("    m: [1, 2, 3]\n    bytes: [1MiB, 2MiB]\n"
          "    skip:\n      - {m: [2, 3], variant: memcpy}\n      - {bytes: 2MiB, m: 1}\n");
  SweepPlan plan = plan_sweep(e);
  EXPECT_EQ(plan.points.size(), 6u);
  // Points in key order (bytes slowest): memcpy is skipped at m = 2, 3 (4 rows); both variants
  // at bytes = 2MiB, m = 1 (2 rows).
  EXPECT_EQ(plan.skipped, 6u);
  EXPECT_EQ(plan.rows, 6u);
  EXPECT_TRUE(is_skipped(e, plan.points[2], "memcpy"));  // 1MiB, m=3
  EXPECT_FALSE(is_skipped(e, plan.points[2], "sgemm"));
  EXPECT_TRUE(is_skipped(e, plan.points[3], "sgemm"));    // 2MiB, m=1
  EXPECT_FALSE(is_skipped(e, plan.points[0], "memcpy"));  // 1MiB, m=1
  EXPECT_EQ(describe_plan(plan), "6 configurations × 2 variants = 6 rows (6 skipped)");
}

TEST(Sweep, SingleValuesAreOnePoint) {
  SweepPlan plan = plan_sweep(one(""));
  EXPECT_EQ(plan.points.size(), 1u);
  EXPECT_EQ(describe_plan(plan), "1 configuration × 2 variants = 2 rows");
}

}  // namespace
}  // namespace ib
