// Report writers: golden Markdown and CSV for a fixed result set, and a JSON round trip.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/report.h"
#include "core/spec.h"

namespace ib {
namespace {

ResultSet fixture() {
  SpecOptions opt;
  Spec spec = parse_spec(
      "experiments:\n"
      "  - name: demo\n"
      "    kind: ceiling\n"
      "    description: A fixed result set\n"
      "    variants: [sgemm, memcpy]\n"
      "    baseline: sgemm\n"
      "    m: [64, 128]\n"
      "    n: 32\n"
      "    k: 16\n"
      "    dtype: fp32\n"
      "    book: {source: 'Chapter 8, §8.1', rows: [{m: 64, variant: memcpy, ms: 5, speedup: 2.4}]}\n",
      "demo.yaml", opt);
  ExperimentResult e;
  e.spec = spec.experiments[0];
  e.plan = plan_sweep(e.spec);
  auto points = expand_sweep(e.spec);

  Row base;
  base.experiment = "demo";
  base.kind = "ceiling";
  base.variant = "sgemm";
  base.point = points[0];
  base.is_baseline = true;
  base.samples = {0.010, 0.012, 0.011, 0.013, 0.009};
  base.stats = summarize(base.samples);
  base.stop_reason = "noise 1.00% <= 2.00%";
  base.validation = Validation{true, "max_err", 1.5e-7, 1e-5, ""};
  base.work = {2.0 * 64 * 32 * 16, 4.0 * (64 * 16 + 16 * 32 + 64 * 32)};
  base.peak_memory = 14336;

  Row fast = base;
  fast.variant = "memcpy";
  fast.is_baseline = false;
  fast.samples = {0.004, 0.005, 0.0045, 0.0042, 0.0048};
  fast.stats = summarize(fast.samples);
  fast.speedup = Speedup{2.44, 2.1, 2.9, Verdict::Faster};
  fast.book = {{"ms", 5.0}, {"speedup", 2.4}};
  fast.metrics = {{"saving", 4.0, "x"}};

  Row oom;
  oom.experiment = "demo";
  oom.kind = "ceiling";
  oom.variant = "sgemm";
  oom.point = points[1];
  oom.status = RowStatus::Oom;
  oom.message = "sgemm C: 1 MiB more would pass the host memory limit of 1 MiB (\"quoted\", with a comma)";
  oom.is_baseline = true;
  oom.peak_memory = 0;

  Row unsupported;
  unsupported.experiment = "demo";
  unsupported.kind = "ceiling";
  unsupported.variant = "memcpy";
  unsupported.point = points[1];
  unsupported.status = RowStatus::Unsupported;
  unsupported.message = "needs | a pipe";

  e.rows = {base, fast, oom, unsupported};
  ResultSet rs;
  rs.meta.argv = {"infer-bench", "run", "demo.yaml"};
  rs.meta.version = "0.1.0";
  rs.meta.git_sha = "abc123";
  rs.meta.started_utc = "2026-11-30T00:00:00Z";
  rs.meta.finished_utc = "2026-11-30T00:01:00Z";
  rs.meta.backend = Backend::Cpu;
  rs.meta.device.name = "Test CPU";
  rs.meta.device.properties = {{"model", "Test CPU"}, {"threads", "2"}};
  rs.meta.ceilings = {2e10, 1e11, "memcpy 256 MiB", "blocked SGEMM fp32 1024x1024x1024"};
  rs.meta.spec_file = "demo.yaml";
  rs.experiments.push_back(e);
  return rs;
}

const char* kGoldenTable = R"(
bytes = 1 GiB · n = 32 · k = 16 · dtype = fp32

| variant | m | ms | TFLOP/s | % GEMM peak | GB/s | % copy peak | saving (x) | peak mem | speedup (95% CI) | verdict | book ms | book speedup | check | samples | stop | note |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- |
| sgemm | 64 | 11.0 ± 1.58 | 5.96e-06 | 0.00596 | 0.0013 | 0.00652 |  | 14 KiB | baseline |  |  |  | ok max_err 1.5e-07 | 5 | noise 1.00% <= 2.00% |  |
| memcpy | 64 | 4.50 ± 0.412 | 1.46e-05 | 0.0146 | 0.00319 | 0.0159 | 4.00 | 14 KiB | 2.44× [2.10, 2.90] | faster | 5.00 | 2.40 | ok max_err 1.5e-07 | 5 | noise 1.00% <= 2.00% |  |
| sgemm | 128 | OOM |  |  |  |  |  |  | baseline |  |  |  |  |  |  | sgemm C: 1 MiB more would pass the host memory limit of 1 MiB ("quoted", with a comma) |
| memcpy | 128 | unsupported |  |  |  |  |  |  |  |  |  |  |  |  |  | needs \| a pipe |

book: Chapter 8, §8.1
)";

TEST(Report, GoldenMarkdownTable) {
  ResultSet rs = fixture();
  EXPECT_EQ(markdown_table(rs.experiments[0], rs.meta.ceilings), kGoldenTable);
}

TEST(Report, HeadingCountsRows) {
  ResultSet rs = fixture();
  EXPECT_EQ(markdown_heading(rs.experiments[0].spec, rs.experiments[0].plan, Backend::Cpu),
            "### demo (ceiling)\n\nA fixed result set\n\nbackend: cpu · 2 configurations × 2 variants = 4 rows\n");
}

const char* kGoldenCsv =
    "experiment,kind,backend,variant,status,bytes,m,n,k,dtype,samples,median_ms,mean_ms,stdev_ms,min_ms,p10_ms,p90_ms,"
    "stop_reason,work_flops,work_bytes,tflops,gbps,pct_gemm_peak,pct_copy_peak,peak_memory_bytes,speedup,speedup_lo,"
    "speedup_hi,verdict,check_metric,check_value,check_tolerance,saving,book_ms,book_speedup,message\r\n"
    "demo,ceiling,cpu,sgemm,ok,1073741824,64,32,16,fp32,5,11,11,1.58114,9,9.4,12.6,noise 1.00% <= 2.00%,65536,14336,"
    "5.95782e-06,0.00130327,0.00595782,0.00651636,14336,1,,,baseline,max_err,1.5e-07,1e-05,,,,\r\n"
    "demo,ceiling,cpu,memcpy,ok,1073741824,64,32,16,fp32,5,4.5,4.5,0.412311,4,4.08,4.92,noise 1.00% <= 2.00%,65536,"
    "14336,1.45636e-05,0.00318578,0.0145636,0.0159289,14336,2.44,2.1,2.9,faster,max_err,1.5e-07,1e-05,4,5,2.4,\r\n"
    "demo,ceiling,cpu,sgemm,OOM,1073741824,128,32,16,fp32,,,,,,,,,,,,,,,0,,,,baseline,,,,,,,"
    "\"sgemm C: 1 MiB more would pass the host memory limit of 1 MiB (\"\"quoted\"\", with a comma)\"\r\n"
    "demo,ceiling,cpu,memcpy,unsupported,1073741824,128,32,16,fp32,,,,,,,,,,,,,,,,,,,,,,,,,,needs | a pipe\r\n";

TEST(Report, GoldenCsv) { EXPECT_EQ(csv_report(fixture()), kGoldenCsv); }

TEST(Report, CsvQuotingFollowsRfc4180) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
}

TEST(Report, JsonRoundTrip) {
  ResultSet rs = fixture();
  nlohmann::json j = json_report(rs);
  EXPECT_EQ(j["schema_version"], kResultsSchemaVersion);
  EXPECT_EQ(j["experiments"][0]["rows"][0]["samples_s"].size(), 5u);
  ResultSet back = results_from_json(nlohmann::json::parse(j.dump()));
  // Everything the writers use survives: the reports of the copy are identical.
  EXPECT_EQ(markdown_table(back.experiments[0], back.meta.ceilings), kGoldenTable);
  EXPECT_EQ(csv_report(back), kGoldenCsv);
  EXPECT_EQ(json_report(back), j);
  EXPECT_EQ(back.meta.argv, rs.meta.argv);
  EXPECT_EQ(back.experiments[0].rows[1].samples, rs.experiments[0].rows[1].samples);
}

TEST(Report, JsonRejectsOtherSchemaVersions) {
  nlohmann::json j = json_report(fixture());
  j["schema_version"] = kResultsSchemaVersion + 1;
  EXPECT_THROW(results_from_json(j), std::runtime_error);
  j["schema"] = "something else";
  EXPECT_THROW(results_from_json(j), std::runtime_error);
}

}  // namespace
}  // namespace ib
