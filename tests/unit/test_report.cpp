// Report writers: golden Markdown and CSV for a fixed result set, and a JSON round trip.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/registry.h"
#include "core/report.h"
#include "core/spec.h"
#include "core/units.h"

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
  ResultSet back = results_from_json(ib::parse_json<nlohmann::json>(j.dump()));
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

// #19: a hand-edited results.json with an unknown backend, or a plot block without a y (the
// spec parser refuses it, the reader did not: `plot` crashed) is an error naming where.
TEST(Report, JsonRejectsUnknownBackendsAndEmptyPlots) {
  const nlohmann::json good = json_report(fixture());
  nlohmann::json j = good;
  j["meta"]["backend"] = "tpu";
  try {
    results_from_json(j);
    ADD_FAILURE() << "accepted backend tpu";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/meta/backend: unknown backend 'tpu'"), std::string::npos) << e.what();
  }
  j = good;
  j["experiments"][0]["rows"][0]["backend"] = "";
  EXPECT_THROW(results_from_json(j), std::runtime_error);
  j = good;
  j["experiments"][0]["spec"]["plot"] = nlohmann::json::array({{{"x", "m"}, {"y", nlohmann::json::array()}}});
  try {
    results_from_json(j);
    ADD_FAILURE() << "accepted a plot without y";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/spec/plot"), std::string::npos) << e.what();
  }
}

// #19 item 9: plan.configurations of 300,000,000 in a hand-edited results.json sized an
// allocation of gigabytes in plot/compare. It must equal the product of the axes.
TEST(Report, JsonRejectsAConfigurationCountItsAxesDoNotMake) {
  nlohmann::json j = json_report(fixture());
  const size_t real = j["experiments"][0]["plan"]["configurations"].get<size_t>();
  EXPECT_NO_THROW(results_from_json(j));
  j["experiments"][0]["plan"]["configurations"] = 300000000;
  try {
    results_from_json(j);
    ADD_FAILURE() << "accepted 300,000,000 configurations";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(
        std::string(e.what()).find("/experiments/0/plan/configurations: 300000000, but its axes make " + std::to_string(real)),
        std::string::npos)
        << e.what();
  }
}

// #19: a member missing from a hand-edited results.json is named with the experiment and row.
TEST(Report, JsonErrorsNameWhereTheyAre) {
  nlohmann::json j = json_report(fixture());
  j["experiments"][0]["rows"][1].erase("status");
  try {
    results_from_json(j);
    ADD_FAILURE() << "accepted a row without status";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/experiments/0/rows/1: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("'status'"), std::string::npos) << e.what();
  }
  j = json_report(fixture());
  j["meta"]["argv"] = 3;
  try {
    results_from_json(j);
    ADD_FAILURE() << "accepted argv: 3";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/meta: ", 0), 0u) << e.what();
  }
}

// A run that stopped on late bad input says why, and the reader keeps it.
TEST(Report, RunErrorRoundTripsAndIsShownInTheReport) {
  ResultSet rs = fixture();
  rs.meta.error = "bad.yaml:2:5: experiment a (sliding_window, budget=2.5): budget 2.5 is not a fraction";
  const ResultSet back = results_from_json(json_report(rs));
  EXPECT_EQ(back.meta.error, rs.meta.error);
  EXPECT_NE(markdown_report(rs).find("**stopped early**: bad.yaml:2:5"), std::string::npos);
  EXPECT_FALSE(json_report(fixture())["meta"].contains("error"));  // a run that ran through has none
}

// ---- the chapter's figures on both backends, stdout's compact tables, the summary ----

// The rows a spec's experiment would produce (every planned variant × point, ok, with the book
// figures the runner matches), without running anything.
ExperimentResult planned_result(const ExperimentSpec& spec, Backend backend) {
  ExperimentResult e;
  e.spec = spec;
  e.plan = plan_sweep(spec);
  const KindInfo* kind = Registry::instance().kind(spec.kind);
  for (const auto& p : expand_sweep(spec))
    for (const auto& v : spec.variants) {
      if (is_skipped(spec, p, v)) continue;
      Row r;
      r.experiment = spec.name;
      r.kind = spec.kind;
      r.variant = v;
      r.role = variant_role(*kind, v);
      r.backend = backend;
      r.point = p;
      r.samples = {0.001, 0.0011, 0.0012};
      r.stats = summarize(r.samples);
      r.stop_reason = "noise settled at 1.00%";
      r.validation = Validation{true, "rel_l2", 1e-7, 1e-4, ""};
      r.is_baseline = v == spec.baseline;
      if (!spec.baseline.empty() && !r.is_baseline) r.speedup = Speedup{1.5, 1.4, 1.6, Verdict::Faster};
      r.book = match_book(spec.book, p, v, r.role);
      e.rows.push_back(r);
    }
  return e;
}

std::vector<std::string> spec_files() {
  std::vector<std::string> files;
  const std::string dir = std::string(IB_SOURCE_DIR) + "/experiments";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      const std::string n = ent->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".yaml") files.push_back(dir + "/" + n);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Every experiment with a book: block, in every spec of experiments/ and on both backends' variant
// sets, prints the chapter's figures in its stdout table: on rows of the variant playing the role
// (cpu_flash plays flash2), or as "(chapter)" rows where no variant of that backend plays it. In
// the main suite, only cuda-graph on the CPU (no CUDA Graph there) has no measured row beside them.
TEST(BookRoles, EverySpecShowsTheChaptersFiguresOnBothBackends) {
  const std::vector<std::string> files = spec_files();
  ASSERT_GE(files.size(), 7u);
  size_t with_book = 0;
  for (const auto& file : files)
    for (Backend b : {Backend::Cpu, Backend::Cuda}) {
      SpecOptions opt;
      opt.backend = b;
      for (const auto& spec : load_spec(file, opt).experiments) {
        if (spec.book.empty()) continue;
        ++with_book;
        const ExperimentResult e = planned_result(spec, b);
        TableOptions compact;
        compact.compact = true;
        const std::string table = markdown_table(e, Ceilings{}, compact);
        const std::string where = file + " " + spec.name + " on " + to_string(b);
        EXPECT_NE(table.find("| book "), std::string::npos) << where << "\n" << table;
        for (const auto& br : spec.book.rows)
          for (const auto& [k, v] : br.figures) {
            const std::string text =
                std::holds_alternative<std::string>(v) ? std::get<std::string>(v) : format_number(std::get<double>(v));
            EXPECT_NE(table.find(text), std::string::npos) << where << ": book " << k << " = " << text << "\n" << table;
          }
        bool beside_measured = false;
        for (const auto& r : e.rows) beside_measured = beside_measured || !r.book.empty();
        const bool no_counterpart =
            file.find("chapter8.yaml") != std::string::npos && spec.name == "cuda-graph" && b == Backend::Cpu;
        if (file.find("chapter8.yaml") != std::string::npos) {
          EXPECT_EQ(beside_measured, !no_counterpart) << where << ": the chapter's figures beside a measured row";
        }
      }
    }
  EXPECT_GE(with_book, 20u);
}

TEST(BookRoles, CpuVariantsPlayTheirGpuTwinsRoles) {
  const KindInfo* attention = Registry::instance().kind("attention");
  const KindInfo* specdec = Registry::instance().kind("specdec");
  const KindInfo* decode = Registry::instance().kind("decode");
  ASSERT_TRUE(attention && specdec && decode);
  EXPECT_EQ(variant_role(*attention, "cpu_flash"), "flash2");
  EXPECT_EQ(variant_role(*attention, "cpu_standard"), "standard");
  EXPECT_EQ(variant_role(*attention, "flash1"), "flash1");
  EXPECT_EQ(variant_role(*specdec, "cpu_draft_model"), "draft_model");
  // The CPU step is launched op by op: it plays the eager step, never the graph's.
  EXPECT_EQ(variant_role(*decode, "cpu_decode_step"), "decode_step_eager");
}

size_t widest_line(const std::string& s) {
  size_t w = 0, n = 0;
  for (unsigned char c : s) {
    if (c == '\n') {
      w = std::max(w, n);
      n = 0;
    } else if ((c & 0xC0) != 0x80) {
      ++n;
    }
  }
  return std::max(w, n);
}

TEST(CompactTable, PrintsTheDeclaredColumnsAndFitsTheWidth) {
  ResultSet rs = fixture();
  ExperimentResult e = rs.experiments[0];
  for (auto& r : e.rows) r.message += std::string(300, 'x');  // a note longer than any terminal
  TableOptions compact;
  compact.compact = true;
  const std::string table = markdown_table(e, rs.meta.ceilings, compact);
  EXPECT_LE(widest_line(table), 160u) << table;
  EXPECT_EQ(table.find("samples"), std::string::npos) << "not a default column";
  EXPECT_NE(table.find("book ms"), std::string::npos);
  EXPECT_NE(table.find("columns in report.md"), std::string::npos);
  EXPECT_NE(table.find("…"), std::string::npos) << "the long note is shortened on stdout";
  // Declared columns replace the default; --columns all shows every one (unfitted).
  e.spec.columns = {"ms", "samples"};
  const std::string declared = markdown_table(e, rs.meta.ceilings, compact);
  EXPECT_NE(declared.find("| samples"), std::string::npos) << declared;
  EXPECT_EQ(declared.find("check"), std::string::npos) << declared;
  compact.columns = {"all"};
  const std::string all = markdown_table(e, rs.meta.ceilings, compact);
  EXPECT_NE(all.find("% copy peak"), std::string::npos);
  EXPECT_NE(all.find(std::string(300, 'x')), std::string::npos) << "--columns all: whole cells";
  // report.md's table keeps every column.
  EXPECT_NE(markdown_table(e, rs.meta.ceilings).find("| stop |"), std::string::npos);
}

TEST(CompactTable, BookRowsNoRowMatchesAreChapterRows) {
  ResultSet rs = fixture();
  ExperimentResult e = rs.experiments[0];
  BookRow extra;
  extra.match = {{"role", Value(std::string("sgemm"))}, {"m", Value(int64_t{4096})}};
  extra.figures = {{"ms", 123.0}};
  e.spec.book.rows.push_back(extra);
  const std::string table = markdown_table(e, rs.meta.ceilings);
  EXPECT_NE(table.find("| sgemm (chapter) | 4096 | — |"), std::string::npos) << table;
  EXPECT_NE(table.find("(chapter) rows:"), std::string::npos);
  e.interrupted = true;  // rows not run yet are not "not measured here"
  EXPECT_EQ(markdown_table(e, rs.meta.ceilings).find("(chapter)"), std::string::npos);
}

TEST(Summary, OneLinePerExperimentWithTheShapeVerdict) {
  ResultSet rs = fixture();
  ExperimentResult& e = rs.experiments[0];
  e.spec.summary.claim = "memcpy is 2.4× faster";
  e.spec.summary.figure = "speedup";
  e.spec.summary.holds = {"faster", "above 3"};
  const std::string line = summary_line(e, rs.meta.ceilings);
  EXPECT_NE(line.find("**demo**: chapter memcpy is 2.4× faster"), std::string::npos) << line;
  EXPECT_NE(line.find("measured speedup 2.44×"), std::string::npos) << line;
  EXPECT_NE(line.find("faster: holds 1/1"), std::string::npos) << line;
  EXPECT_NE(line.find("above 3: does not hold 0/1"), std::string::npos) << line;
  e.spec.summary = {};
  EXPECT_NE(summary_line(e, rs.meta.ceilings).find("no chapter claim · measured median ms 4.50–11.0"), std::string::npos)
      << summary_line(e, rs.meta.ceilings);
  const std::string all = markdown_summary(rs);
  EXPECT_EQ(all.rfind("## Summary", 0), 0u);
  EXPECT_NE(all.find("\n- **demo**"), std::string::npos);
}

}  // namespace
}  // namespace ib
