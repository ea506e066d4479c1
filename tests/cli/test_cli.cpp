// End to end through the real binary: help and usage, each technique's subcommand on the CPU backend,
// CPU runs that print a table and write the three result files, plots, compare, output formats,
// Ctrl-C. Bad input found after the spec: test_cli_input_checks.cpp; malformed specs:
// test_cli_malformed.cpp.
#include <algorithm>
#include <filesystem>

#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "infer_bench_binary.h"

namespace ib::test {
namespace {

TEST_F(Cli, HelpAndVersionExitZero) {
  auto h = ib({"--help"});
  EXPECT_EQ(h.exit_code, 0);
  for (const char* s : {"run", "list", "info", "keys", "attention", "Exit codes"})
    EXPECT_NE(h.out.find(s), std::string::npos) << s;
  auto rh = ib({"run", "--help"});
  EXPECT_EQ(rh.exit_code, 0);
  for (const char* s : {"--backend", "--format", "--output", "--set", "--warmup", "--min-samples", "--min-time", "--max-noise",
                        "--timeout", "--cold-l2", "--memory-limit", "--seed", "--profile", "--quiet"})
    EXPECT_NE(rh.out.find(s), std::string::npos) << s;
  auto v = ib({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out.rfind("infer-bench ", 0), 0u) << v.out;
}

TEST_F(Cli, UsageErrorsAreOneLineAndExitTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{{}, {"frobnicate"}, {"run"}, {"run", "x.yaml", "--bogus"}}) {
    auto r = ib(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST_F(Cli, KvcacheRunsItsSpecOnTheCpuBackend) {
  auto r = ib({"kvcache", kSource + "/experiments/kvcache.yaml", "--backend", "cpu", "--only", "kv-memory", "--only", "kv-quant",
               "--set", "kv-quant.context=[500]", "--set", "kv-quant.batch=[1]", "-o", dir_ + "/kv", "-q", "--columns", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"cpu_fp8", "cpu_int8", "rel L2 vs bf16 KV", "KV batch (formula)", "book: Chapter 8"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
}

TEST_F(Cli, AttentionRunsItsSpecOnTheCpuBackend) {
  auto r = ib({"attention", kSource + "/experiments/attention.yaml", "--backend", "cpu", "--only", "flash-vs-standard", "--set",
               "flash-vs-standard.seq=[64, 300]", "--set", "flash-vs-standard.heads=2", "-o", dir_ + "/att", "-q", "--columns",
               "all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"cpu_standard", "cpu_flash", "mem saving", "rel_l2", "book: Chapter 8"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  // The torch peer row is there: measured where python3 has torch, else unsupported saying why.
  EXPECT_NE(r.out.find("| cpu_torch_sdpa |"), std::string::npos) << r.out;
}

TEST_F(Cli, DecodeRunsTheEngineOnTheCpuAndRefusesAnUnknownPreset) {
  auto r = ib({"decode", kSource + "/experiments/decode.yaml", "--backend", "cpu", "--only", "decode-metrics", "--set",
               "decode-metrics.model=tiny", "-o", dir_ + "/dec", "-q", "--columns", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"cpu_generate", "TTFT (ms)", "TPOT (ms)", "TPS (tok/s)", "ok rel_l2"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  auto bad = ib({"decode", kSource + "/experiments/decode.yaml", "--backend", "cpu", "--set", "decode-metrics.model=llama9-70b",
                 "-o", dir_ + "/dec2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("llama2-7b"), std::string::npos) << bad.err;  // the known presets are listed
  EXPECT_TRUE(bad.out.empty());
}

// `matmul` is validated on every backend (a bad value is exit 2 before anything runs) and left
// out of the CPU rows, whose engine's GEMV is `cpu_matmul`.
TEST_F(Cli, DecodeMatmulIsValidatedAndLeftOutOfCpuRows) {
  auto r =
      ib({"decode", kSource + "/experiments/decode.yaml", "--backend", "cpu", "--only", "gemv-matmul", "-o", dir_ + "/mm", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu_decode_step"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" matmul ="), std::string::npos) << r.out;     // neither a constant above the table
  EXPECT_NE(r.out.find("| cpu_matmul"), std::string::npos) << r.out;  // the CPU engine's own axis is
  EXPECT_EQ(r.out.find("| matmul"), std::string::npos) << r.out;      // nor a column
  auto bad = ib({"decode", kSource + "/experiments/decode.yaml", "--backend", "cpu", "--only", "gemv-matmul", "--set",
                 "gemv-matmul.matmul=cutlass", "-o", dir_ + "/mm2"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("matmul"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("cublas, gemv"), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty());
}

// specdec (like prefix and constrain-generate) takes decode's `matmul` key for its CUDA engines:
// a bad value is a spec error at its file:line (exit 2, nothing written), and the CPU variants
// leave it out (a matmul axis does not repeat their rows); they read `cpu_matmul` instead.
TEST_F(Cli, SpecdecMatmulIsValidatedAndLeftOutOfCpuRows) {
  const std::string spec =
      "version: 1\nexperiments:\n  - name: mm\n    kind: specdec\n    variants: [cpu_autoregressive, cpu_ngram]\n"
      "    target: tiny\n    matmul: ";
  write_text(dir_ + "/mm.yaml", spec + "[cublas, gemv]\n");
  auto l = ib({"list", "mm.yaml", "--backend", "cpu"}, in_dir());
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("1 configuration × 2 variants = 2 rows"), std::string::npos) << l.out;
  // Neither a constant nor a config: every "matmul" in the listing is the CPU engine's cpu_matmul.
  size_t matmuls = 0, cpu_matmuls = 0;
  for (size_t at = l.out.find("matmul"); at != std::string::npos; at = l.out.find("matmul", at + 1)) {
    ++matmuls;
    cpu_matmuls += at >= 4 && l.out.compare(at - 4, 4, "cpu_") == 0;
  }
  EXPECT_EQ(matmuls, cpu_matmuls) << l.out;
  EXPECT_GT(cpu_matmuls, 0u) << l.out;
  write_text(dir_ + "/bad.yaml", spec + "cutlass\n");
  auto bad = ib({"specdec", "bad.yaml", "--backend", "cpu", "-o", "out"}, in_dir());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.yaml:7:"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("matmul"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("cublas, gemv"), std::string::npos) << bad.err;
  EXPECT_TRUE(bad.out.empty());
  EXPECT_EQ(list_files(dir_), (std::vector<std::string>{"bad.yaml", "mm.yaml", "quick.yaml"}));  // no output directory
}

TEST_F(Cli, SpecdecRunsOnTheCpuEngineWithExactOutputs) {
  auto r = ib({"specdec", kSource + "/experiments/specdec.yaml", "--backend", "cpu", "--only", "specdec-ngram", "--set",
               "specdec-ngram.text=edit", "--set", "specdec-ngram.new_tokens=24", "--set", "specdec-ngram.target=tiny", "-o",
               dir_ + "/spec", "-q", "--columns", "all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"cpu_autoregressive", "cpu_ngram", "ok mismatches 0", "tokens/step"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

// A prompt and new tokens past the target's (or draft's) positions are an unsupported row saying
// so, not a prefill that runs for minutes.
TEST_F(Cli, SpecdecRefusesSequencesPastTheModelsPositions) {
  write_text(dir_ + "/long.yaml",
             "experiments:\n  - name: target\n    kind: specdec\n    variants: [cpu_autoregressive]\n"
             "    target: tiny\n    prompt: 100000\n    new_tokens: 8\n    min_samples: 1\n    min_time: 0\n"
             "  - name: draft\n    kind: specdec\n    variants: [cpu_draft_model]\n"
             "    target: deep-narrow\n    draft: tiny\n    prompt: 3000\n    new_tokens: 8\n"
             "    min_samples: 1\n    min_time: 0\n");
  auto r = ib({"specdec", "long.yaml", "--backend", "cpu", "-q", "-o", "out"}, in_dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("a 100008-token sequence exceeds the target tiny's 2048 positions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a 3008-token sequence exceeds the draft tiny's 2048 positions"), std::string::npos) << r.out;
}

// experiments/real.yaml names our trained checkpoints and held-out texts relative to the
// repository root: from there every key checks (the checkpoints' headers, the texts' token counts).
TEST_F(Cli, TheRealWeightsSpecChecksFromTheRepositoryRoot) {
  ProcessOptions root;
  root.cwd = kSource;
  // Its SmolLM2 experiments name the model scripts/get-models fetches.
  if (!path_exists(kSource + "/data/models/smollm2-135m-instruct-q4_1.gguf"))
    GTEST_SKIP() << "data/models/smollm2-135m-instruct-q4_1.gguf is not here (scripts/get-models)";
  auto r = ib({"list", "experiments/real.yaml", "--backend", "cpu"}, root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("real-streaming-llm"), std::string::npos);
  EXPECT_NE(r.out.find("rows in all"), std::string::npos);
}

TEST_F(Cli, ListShowsTheExpandedSweepWithNvtxRanges) {
  auto r = ib({"list", kSource + "/experiments/chapter8.yaml", "--backend", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("copy-bandwidth"), std::string::npos);
  EXPECT_NE(r.out.find("`ceiling/copy-bandwidth/memcpy/default`"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rows in all"), std::string::npos);
  auto q = ib({"list", "quick.yaml", "--backend", "cpu"}, in_dir());
  EXPECT_NE(q.out.find("2 configurations × 1 variant = 2 rows"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("`ceiling/tiny-copy/memcpy/bytes=2MiB`"), std::string::npos) << q.out;
  EXPECT_EQ(list_files(dir_), std::vector<std::string>{"quick.yaml"});  // list writes nothing
  // Flags that only mean something to a run are refused, not silently ignored.
  for (const char* flag : {"--format", "--output", "--timeout", "--memory-limit"}) {
    auto bad = ib({"list", "quick.yaml", "--backend", "cpu", flag, "1"}, in_dir());
    EXPECT_EQ(bad.exit_code, 2) << flag;
    EXPECT_EQ(lines(bad.err), 1u) << bad.err;
    EXPECT_TRUE(bad.out.empty()) << flag;
  }
  EXPECT_EQ(
      ib({"list", "quick.yaml", "--backend", "cpu", "--set", "bytes=4MiB", "--only", "tiny-copy", "-q"}, in_dir()).exit_code, 0);
}

// An experiment named twice by --only runs once (twice would repeat its rows under one name).
TEST_F(Cli, OnlyNamingAnExperimentTwiceRunsItOnce) {
  auto r = ib({"list", "quick.yaml", "--backend", "cpu", "--only", "tiny-gemm", "--only", "tiny-gemm"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 experiment for the cpu backend"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n1 rows in all"), std::string::npos) << r.out;
}

TEST_F(Cli, RunOnTheCpuPrintsTablesAndWritesThreeFiles) {
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "--output", "out"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("### tiny-copy (ceiling)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 configurations × 1 variant = 2 rows"), std::string::npos);
  // stdout's table: the default columns, aligned (report.md keeps every column).
  EXPECT_NE(r.out.find("| variant | bytes |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" | GB/s |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n## Summary\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| sgemm "), std::string::npos);
  EXPECT_EQ(list_files(dir_ + "/out"), (std::vector<std::string>{"report.md", "results.csv", "results.json"}));

  auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  EXPECT_EQ(j["schema_version"], 1);
  EXPECT_EQ(j["meta"]["backend"], "cpu");
  EXPECT_FALSE(j["meta"]["interrupted"].get<bool>());
  EXPECT_GT(j["meta"]["ceilings"]["copy_bytes_per_s"].get<double>(), 0);
  ASSERT_EQ(j["experiments"].size(), 2u);
  for (const auto& e : j["experiments"])
    for (const auto& row : e["rows"]) {
      EXPECT_EQ(row["status"], "ok");
      EXPECT_TRUE(row["validation"]["ok"].get<bool>());
      EXPECT_GE(row["samples_s"].size(), 3u);
    }
  std::string csv = read_text(dir_ + "/out/results.csv");
  EXPECT_EQ(csv.rfind("experiment,kind,backend,variant,status,", 0), 0u);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);  // header + 3 rows
  EXPECT_NE(read_text(dir_ + "/out/report.md").find("- command: `"), std::string::npos);

  // A run is never overwritten.
  std::string before = read_text(dir_ + "/out/results.json");
  auto again = ib({"run", "quick.yaml", "--backend", "cpu", "--output", "out"}, in_dir());
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("already holds results.json"), std::string::npos) << again.err;
  EXPECT_EQ(read_text(dir_ + "/out/results.json"), before);
  // #19: nor a directory holding only someone's report.md, nor an empty --output (it fell back to
  // the default directory).
  ASSERT_EQ(::mkdir((dir_ + "/mine").c_str(), 0755), 0);
  write_text(dir_ + "/mine/report.md", "my notes\n");
  auto mine = ib({"run", "quick.yaml", "--backend", "cpu", "--output", "mine"}, in_dir());
  EXPECT_EQ(mine.exit_code, 2);
  EXPECT_NE(mine.err.find("already holds report.md"), std::string::npos) << mine.err;
  EXPECT_EQ(read_text(dir_ + "/mine/report.md"), "my notes\n");
  auto empty = ib({"run", "quick.yaml", "--backend", "cpu", "--output", ""}, in_dir());
  EXPECT_EQ(empty.exit_code, 2) << empty.out;
  EXPECT_NE(empty.err.find("empty path"), std::string::npos) << empty.err;
  EXPECT_EQ(lines(empty.err), 1u) << empty.err;
}

TEST_F(Cli, PlotsAreWrittenBesideTheTablesAndRedrawnFromResults) {
  write_text(dir_ + "/plotted.yaml",
             std::string(kQuickSpec) + "    plot: {x: m, y: gbps}\n" +
                 "  - name: copy-sweep\n    kind: ceiling\n    variants: [memcpy]\n"
                 "    bytes: [1MiB, 2MiB, 4MiB]\n    plot: [{x: bytes, y: gbps}, {x: bytes, y: nothing}]\n");
  auto r = ib({"run", "plotted.yaml", "--backend", "cpu", "--output", "out"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // tiny-gemm has one m: its plot is left out, and the note says why; copy-sweep's second plot has no data.
  EXPECT_EQ(list_files(dir_ + "/out"), (std::vector<std::string>{"copy-sweep.svg", "report.md", "results.csv", "results.json"}));
  EXPECT_NE(r.err.find("tiny-gemm: plot 1 (gbps vs m) not drawn: fewer than two values of m"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("copy-sweep: plot 2 (nothing vs bytes) not drawn: no row has a value of nothing"), std::string::npos)
      << r.err;
  const std::string svg = read_text(dir_ + "/out/copy-sweep.svg");
  EXPECT_EQ(svg.rfind("<svg xmlns=", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(read_text(dir_ + "/out/report.md").find("![copy-sweep: gbps vs bytes](copy-sweep.svg)"), std::string::npos);

  // `plot` redraws the same file from results.json, here into another directory with a prefix.
  auto p = ib({"plot", "out/results.json", "-o", "figs", "--prefix", "cpu-"}, in_dir());
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, "figs/cpu-copy-sweep.svg\n");
  EXPECT_EQ(read_text(dir_ + "/figs/cpu-copy-sweep.svg"), svg);
  // --spec supplies plot: blocks for results measured without them.
  ASSERT_EQ(ib({"run", "quick.yaml", "--backend", "cpu", "--output", "plain"}, in_dir()).exit_code, 0);
  auto none = ib({"plot", "plain/results.json"}, in_dir());
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("plain/results.json: no experiment declares a plot"), std::string::npos) << none.err;
  write_text(dir_ + "/plots.yaml",
             std::string(kQuickSpec).replace(std::string(kQuickSpec).find("    bytes:"), 0, "    plot: {x: bytes, y: ms}\n"));
  auto with_spec = ib({"plot", "plain/results.json", "--spec", "plots.yaml"}, in_dir());
  ASSERT_EQ(with_spec.exit_code, 0) << with_spec.err;
  EXPECT_EQ(with_spec.out, "plain/tiny-copy.svg\n");
  // Bad input: one line, exit 2.
  for (const auto& args : std::vector<std::vector<std::string>>{{"plot", "missing.json"},
                                                                {"plot", "quick.yaml"},
                                                                {"plot", "plain/results.json", "--spec", "nope.yaml"},
                                                                {"plot", "out/results.json", "--prefix", "a/b"}}) {
    auto bad = ib(args, in_dir());
    EXPECT_EQ(bad.exit_code, 2) << args[1];
    EXPECT_EQ(lines(bad.err), 1u) << bad.err;
  }
}

TEST_F(Cli, CompareMatchesTwoRunsRowByRow) {
  ASSERT_EQ(ib({"run", "quick.yaml", "--backend", "cpu", "--output", "a", "-q"}, in_dir()).exit_code, 0);
  ASSERT_EQ(ib({"run", "quick.yaml", "--backend", "cpu", "--output", "b", "-q", "--only", "tiny-copy"}, in_dir()).exit_code, 0);
  auto r = ib({"compare", "a/results.json", "b/results.json"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("- base: `a/results.json` — "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| variant | bytes | base ms | new ms | new vs base (95% CI) | verdict |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| memcpy | 1 MiB |"), std::string::npos);
  EXPECT_NE(r.out.find("2 rows timed in both runs"), std::string::npos);
  EXPECT_NE(r.out.find("experiments only in base: tiny-gemm"), std::string::npos);
  auto csv = ib({"compare", "a/results.json", "b/results.json", "--format", "csv"}, in_dir());
  ASSERT_EQ(csv.exit_code, 0);
  EXPECT_EQ(lines(csv.out), 3u);  // header + the two tiny-copy rows
  // A gate no row can fail (1000% slower) passes.
  EXPECT_EQ(ib({"compare", "a/results.json", "b/results.json", "--fail-slower", "1000%"}, in_dir()).exit_code, 0);
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"compare", "a/results.json", "missing.json"},
                                             {"compare", "a/results.json", "quick.yaml"},
                                             {"compare", "a/results.json", "b/results.json", "--only", "nope"},
                                             {"compare", "a/results.json", "b/results.json", "--fail-slower", "x"},
                                             {"compare", "a/results.json", "b/results.json", "--format", "json"}}) {
    auto bad = ib(args, in_dir());
    EXPECT_EQ(bad.exit_code, 2) << args[2];
    EXPECT_EQ(lines(bad.err), 1u) << bad.err;
    EXPECT_TRUE(bad.out.empty()) << bad.out;
  }
}

TEST_F(Cli, DefaultOutputIsATimestampedRunDirectory) {
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "--only", "tiny-gemm", "-q"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // --quiet
  auto files = list_files(dir_);
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files[0], "quick.yaml");
  EXPECT_EQ(files[1].rfind("results/runs/", 0), 0u);
  EXPECT_NE(files[1].find("Z-tiny-gemm/"), std::string::npos) << files[1];
}

TEST_F(Cli, MemoryLimitMakesAnOomRowNotAFailure) {
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "--only", "tiny-copy", "--set", "bytes=[1MiB, 64MiB]", "--memory-limit",
               "32MiB", "-o", "out", "--format", "json"},
              in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);  // --format json: stdout is the results document
  const auto& rows = j["experiments"][0]["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["status"], "ok");
  EXPECT_EQ(rows[1]["status"], "OOM");
  EXPECT_NE(rows[1]["message"].get<std::string>().find("memory limit of 32 MiB"), std::string::npos);
}

TEST_F(Cli, CsvFormatOnStdout) {
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "--only", "tiny-gemm", "-o", "out", "--format", "csv"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, read_text(dir_ + "/out/results.csv"));
}

TEST_F(Cli, ProfileModeRunsAFixedFewTimes) {
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "--only", "tiny-gemm", "-o", "out", "--profile"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  const auto& row = j["experiments"][0]["rows"][0];
  EXPECT_EQ(row["samples_s"].size(), 3u);
  EXPECT_EQ(row["stop_reason"], "profile: 3 runs");
}

TEST_F(Cli, CtrlCKeepsTheRowsMeasuredSoFar) {
  write_text(dir_ + "/long.yaml",
             "experiments:\n  - name: long\n    kind: ceiling\n    variants: [memcpy]\n"
             "    bytes: [1MiB, 2MiB, 3MiB, 4MiB, 5MiB, 6MiB, 7MiB, 8MiB]\n"
             "    min_time: 1s\n    min_samples: 5\n    max_noise: 0.0001%\n    timeout: 1s\n");
  ProcessOptions o = in_dir();
  o.sigint_after_ms = 4500;  // start-up peaks take ~1-3 s, then rows of 1 s each
  auto r = ib({"run", "long.yaml", "--backend", "cpu", "-o", "out"}, o);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted"), std::string::npos) << r.err;
  auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  EXPECT_TRUE(j["meta"]["interrupted"].get<bool>());
  const auto& rows = j["experiments"][0]["rows"];
  EXPECT_LT(rows.size(), 8u);
  for (const auto& row : rows) EXPECT_EQ(row["status"], "ok");
  for (const auto& f : list_files(dir_ + "/out")) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
}

// The README's main command on the CPU backend (quick stopping rule): every stdout table fits 160
// characters, every experiment with a book: block shows the chapter's figures, and the summary,
// one line per experiment, is the last thing printed.
TEST_F(Cli, MainCommandTablesFitAndEndWithTheSummary) {
  // specdec-real runs SmolLM2-135M-Instruct, which the README's commands fetch (scripts/get-models).
  if (!std::filesystem::exists(kSource + "/data/models/smollm2-135m-instruct-q4_1.gguf"))
    GTEST_SKIP() << "data/models/smollm2-135m-instruct-q4_1.gguf is not here (scripts/get-models)";
  auto r = ib({"run", kSource + "/experiments/chapter8.yaml", "--backend", "cpu", "-q", "--output", dir_ + "/ch8", "--warmup",
               "0", "--min-samples", "1", "--min-time", "0", "--timeout", "0.01"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t widest = 0, tables = 0;
  std::string line;
  for (size_t i = 0; i <= r.out.size(); ++i) {
    if (i < r.out.size() && r.out[i] != '\n') {
      line += r.out[i];
      continue;
    }
    if (line.rfind("| ", 0) == 0) {
      size_t n = 0;
      for (unsigned char c : line) n += (c & 0xC0) != 0x80;
      widest = std::max(widest, n);
      tables += line.rfind("| variant", 0) == 0;
      EXPECT_LE(n, 160u) << line;
    }
    line.clear();
  }
  EXPECT_EQ(tables, 15u);
  EXPECT_GT(widest, 40u);
  // The experiments with a book: block print its figures (a "book …" column).
  for (const char* name : {"flash-vs-standard", "cuda-graph", "specdec-acceptance", "kv-memory", "prefix-system-prompt",
                           "constrain-compile", "constrain-mask", "constrain-validity", "constrain-overhead"}) {
    const auto at = r.out.find(std::string("### ") + name + " (");
    ASSERT_NE(at, std::string::npos) << name;
    const auto next = r.out.find("\n### ", at + 1);
    const std::string section = r.out.substr(at, next == std::string::npos ? std::string::npos : next - at);
    EXPECT_NE(section.find("| book "), std::string::npos) << section;
  }
  const auto summary = r.out.rfind("\n## Summary\n");
  ASSERT_NE(summary, std::string::npos);
  EXPECT_EQ(r.out.find("\n### ", summary), std::string::npos) << "the summary comes last";
  size_t items = 0;
  for (size_t at = r.out.find("\n- **", summary); at != std::string::npos; at = r.out.find("\n- **", at + 1)) ++items;
  EXPECT_EQ(items, 15u);
  EXPECT_NE(r.out.find("**flash-vs-standard**: chapter flash2 beats standard", summary), std::string::npos);
  // report.md keeps every column, the summary first.
  const std::string report = read_text(dir_ + "/ch8/report.md");
  EXPECT_LT(report.find("## Summary"), report.find("### copy-bandwidth"));
  EXPECT_NE(report.find("| samples |"), std::string::npos);
}

TEST_F(Cli, ColumnsFlagChoosesTheStdoutColumns) {
  auto r = ib({"run", "quick.yaml", "--backend", "cpu", "-q", "--output", "out", "--columns", "ms,samples"}, in_dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| samples |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("check"), std::string::npos) << r.out;
  auto all = ib({"run", "quick.yaml", "--backend", "cpu", "-q", "--output", "out2", "--columns", "all"}, in_dir());
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_NE(all.out.find("| stop"), std::string::npos) << all.out;
  auto bad = ib({"run", "quick.yaml", "--backend", "cpu", "--columns", "ms,,check"}, in_dir());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(lines(bad.err), 1u) << bad.err;
}

TEST(CliBackend, CudaWithoutAUsableGpuIsBadInput) {
  if (path_exists("/dev/nvidiactl")) GTEST_SKIP() << "a GPU driver is present";
  auto r = ib({"info", "--backend", "cuda"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("infer-bench: --backend cuda: ", 0), 0u) << r.err;
  EXPECT_EQ(lines(r.err), 1u);
}

TEST(CliKeys, SpecReferenceIsInSync) {
  auto r = ib({"keys"});
  ASSERT_EQ(r.exit_code, 0);
  std::string readme = read_text(kSource + "/docs/spec-reference.md");
  const std::string begin = "<!-- spec-reference:begin (generated by `infer-bench keys`; a test keeps it in sync) -->\n";
  const std::string end = "<!-- spec-reference:end -->";
  auto b = readme.find(begin), e = readme.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/spec-reference.md lacks the spec-reference markers";
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()), r.out)
      << "docs/spec-reference.md's spec reference is stale: run scripts/sync-readme-keys";
}

}  // namespace
}  // namespace ib::test
