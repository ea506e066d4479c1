// Two runs compared row by row: matching by variant and the parameters both runs have, the
// speedup of the new run from both runs' samples, status changes, and the regression gate.
#include <algorithm>

#include <gtest/gtest.h>

#include "core/compare.h"
#include "core/spec.h"

namespace ib {
namespace {

// One experiment over m = 64, 128 with two variants; `scale` multiplies every sample.
ResultSet run(const std::string& extra_axis, double scale, const std::string& name = "demo") {
  SpecOptions opt;
  Spec spec =
      parse_spec("experiments:\n  - name: " + name +
                     "\n    kind: ceiling\n    variants: [sgemm, memcpy]\n    m: [64, 128]\n    dtype: fp32\n" + extra_axis,
                 "demo.yaml", opt);
  ExperimentResult e;
  e.spec = spec.experiments[0];
  e.plan = plan_sweep(e.spec);
  for (const auto& point : expand_sweep(e.spec))
    for (const char* v : {"sgemm", "memcpy"}) {
      Row r;
      r.experiment = name;
      r.variant = v;
      r.point = point;
      for (int i = 0; i < 20; ++i) r.samples.push_back(scale * (1e-3 + 1e-6 * (i % 5)));
      r.stats = summarize(r.samples);
      e.rows.push_back(r);
    }
  ResultSet rs;
  rs.meta.device.name = "dev";
  rs.experiments.push_back(e);
  return rs;
}

TEST(Compare, MatchedRowsGetTheNewRunsSpeedupWithAnInterval) {
  const Comparison c = compare_results(run("", 1.0), run("", 0.5));
  ASSERT_EQ(c.experiments.size(), 1u);
  const auto& e = c.experiments[0];
  ASSERT_EQ(e.rows.size(), 4u);
  EXPECT_EQ(e.base_only, 0u);
  EXPECT_EQ(e.new_only, 0u);
  for (const auto& r : e.rows) {
    ASSERT_TRUE(r.speedup.has_value());
    EXPECT_NEAR(r.speedup->ratio, 2.0, 1e-9);
    EXPECT_LE(r.speedup->lo, 2.0);
    EXPECT_GE(r.speedup->hi, 2.0);
    EXPECT_EQ(r.speedup->verdict, Verdict::Faster);
  }
  const std::string md = comparison_markdown(c, "a.json", "b.json");
  EXPECT_NE(md.find("| variant | m | base ms | new ms | new vs base (95% CI) | verdict |"), std::string::npos) << md;
  EXPECT_NE(md.find("| sgemm | 64 | 1.00 | 0.501 | 2.00× [2.00, 2.00] | faster |"), std::string::npos) << md;
  EXPECT_NE(md.find("4 rows timed in both runs: 4 faster, 0 slower, 0 the same; geometric mean of new vs base 2.00×"),
            std::string::npos);
  EXPECT_TRUE(slower_rows(c, 0.05).empty());
  // The other way round every row is slower, past a 5% gate, and each is named.
  const Comparison back = compare_results(run("", 0.5), run("", 1.0));
  const auto slow = slower_rows(back, 0.05);
  ASSERT_EQ(slow.size(), 4u);
  EXPECT_NE(slow[0].find("demo: sgemm (m=64): 0.501 → 1.00 ms, new vs base 0.5× [0.499, 0.501]"), std::string::npos) << slow[0];
  EXPECT_TRUE(slower_rows(back, 1.5).empty());  // not 150% slower
}

TEST(Compare, RowsMatchOnTheParametersBothRunsHave) {
  // The new run sweeps n too: its n = 8192 rows (the default) match, the n = 64 rows have no partner.
  const Comparison c = compare_results(run("", 1.0), run("    n: [8192, 64]\n", 1.0));
  ASSERT_EQ(c.experiments.size(), 1u);
  EXPECT_EQ(c.experiments[0].rows.size(), 4u);
  EXPECT_EQ(c.experiments[0].new_only, 4u);
  for (const auto& r : c.experiments[0].rows) EXPECT_EQ(r.speedup->verdict, Verdict::Same);
  const std::string md = comparison_markdown(c, "a", "b");
  EXPECT_NE(md.find("0 rows only in base, 4 only in new"), std::string::npos) << md;
  // A run made before a key existed (its rows lack dtype): the rows match on the others.
  ResultSet older = run("", 2.0);
  for (auto& r : older.experiments[0].rows)
    r.point.params.erase(
        std::remove_if(r.point.params.begin(), r.point.params.end(), [](const Param& p) { return p.key == "dtype"; }),
        r.point.params.end());
  const Comparison o = compare_results(older, run("", 1.0));
  ASSERT_EQ(o.experiments[0].rows.size(), 4u);
  EXPECT_NEAR(o.experiments[0].rows[0].speedup->ratio, 2.0, 1e-9);
  for (const auto& p : o.experiments[0].rows[0].params) EXPECT_NE(p.key, "dtype");
}

TEST(Compare, StatusChangesAndExperimentsOnlyOneRunHas) {
  ResultSet base = run("", 1.0);
  ResultSet next = run("", 1.0);
  next.experiments[0].rows[0].status = RowStatus::Failed;
  next.experiments[0].rows[1].status = RowStatus::Oom;
  base.experiments.push_back(run("", 1.0, "gone").experiments[0]);
  next.experiments.push_back(run("", 1.0, "added").experiments[0]);
  const Comparison c = compare_results(base, next);
  ASSERT_EQ(c.experiments.size(), 1u);
  EXPECT_FALSE(c.experiments[0].rows[0].speedup.has_value());
  EXPECT_EQ(c.base_only, std::vector<std::string>{"gone"});
  EXPECT_EQ(c.new_only, std::vector<std::string>{"added"});
  const std::string md = comparison_markdown(c, "a", "b");
  EXPECT_NE(md.find("| sgemm | 64 | 1.00 | FAILED | | ok → FAILED |"), std::string::npos) << md;
  EXPECT_NE(md.find("| memcpy | 64 | 1.00 | OOM | | ok → OOM |"), std::string::npos) << md;
  EXPECT_NE(md.find("experiments only in base: gone"), std::string::npos);
  EXPECT_NE(md.find("experiments only in new: added"), std::string::npos);
  const std::string csv = comparison_csv(c);
  EXPECT_EQ(
      csv.rfind("experiment,variant,params,base_status,new_status,base_ms,new_ms,speedup,speedup_lo,speedup_hi,verdict\n", 0),
      0u);
  EXPECT_NE(csv.find("demo,sgemm,bytes=1 GiB;m=64;n=8192;k=8192;dtype=fp32,ok,FAILED,"), std::string::npos)
      << csv;  // every shared param, values as written
  // `only` narrows the experiments.
  EXPECT_TRUE(compare_results(base, next, {"gone"}).experiments.empty());
}

}  // namespace
}  // namespace ib
