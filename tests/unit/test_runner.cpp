// The runner on a kind of fake variants: ordering, the correctness gate, OOM rows, unsupported
// rows, speedups and book figures.
#include <atomic>
#include <optional>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../cli/process.h"
#include "core/json_input.h"
#include "core/memory.h"
#include "core/output.h"
#include "core/point_access.h"
#include "core/registry.h"
#include "core/runner.h"
#include "core/session.h"
#include "core/spec.h"

namespace ib {
namespace {

std::atomic<int> g_wrong_runs{0};
volatile double g_sink = 0;

// Spins for `work` units: time proportional to work, deterministic enough for a speedup.
void spin(int64_t work) {
  double x = 0;
  for (int64_t i = 0; i < work * 20000; ++i) x += 1.0 / static_cast<double>(i + 1);
  g_sink = x;
}

class Spinner : public Variant {
 public:
  explicit Spinner(int64_t factor) : factor_(factor) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t) override {
    work_ = std::get<int64_t>(PointAccess::at(p, "work")) * factor_;
    scratch_.allocate(1024, "scratch");
  }
  Validation validate(BackendRuntime&) override { return {true, "abs_err", 0, 1e-6, ""}; }
  void run(BackendRuntime&) override { spin(work_); }
  Work work() const override { return {1e6 * static_cast<double>(work_), 0}; }
  std::vector<Metric> metrics() const override { return {{"units", static_cast<double>(work_), "work"}}; }

 private:
  int64_t factor_, work_ = 0;
  HostBuffer<float> scratch_;
};

struct Slow : Spinner {
  Slow() : Spinner(3) {}
};
struct Fast : Spinner {
  Fast() : Spinner(1) {}
};

class Wrong : public Variant {
 public:
  void prepare(const Point&, BackendRuntime&, uint64_t) override {}
  Validation validate(BackendRuntime&) override { return {false, "rel_l2", 0.5, 1e-2, "output is garbage"}; }
  void run(BackendRuntime&) override { ++g_wrong_runs; }
};

class Hungry : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime&, uint64_t) override {
    big_.allocate(static_cast<size_t>(std::get<int64_t>(PointAccess::at(p, "alloc"))), "n×n scores");
  }
  Validation validate(BackendRuntime&) override { return {true, "none", 0, 0, ""}; }
  void run(BackendRuntime&) override {}

 private:
  HostBuffer<char> big_;
};

class Picky : public Variant {
 public:
  std::string unsupported(const Point& p) const override {
    return std::get<int64_t>(PointAccess::at(p, "work")) > 1 ? "work > 1 is not supported" : "";
  }
  void prepare(const Point&, BackendRuntime&, uint64_t) override {}
  Validation validate(BackendRuntime&) override { return {true, "none", 0, 0, ""}; }
  void run(BackendRuntime&) override {}
};

class Thrower : public Variant {
 public:
  void prepare(const Point&, BackendRuntime&, uint64_t) override {}
  Validation validate(BackendRuntime&) override { return {true, "none", 0, 0, ""}; }
  void run(BackendRuntime&) override { throw std::runtime_error("kernel exploded"); }
};

// Measures itself (Variant::measure_self), as a peer in another process would: work 1 ok,
// 2 unsupported by trying, 3 a failed gate. The runner must never call validate() or run().
std::atomic<int> g_self_calls{0};
class SelfTimed : public Variant {
 public:
  void prepare(const Point& p, BackendRuntime&, uint64_t) override { mode_ = std::get<int64_t>(PointAccess::at(p, "work")); }
  Validation validate(BackendRuntime&) override {
    ++g_self_calls;
    return {true, "none", 0, 0, ""};
  }
  void run(BackendRuntime&) override { ++g_self_calls; }
  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override {
    SelfMeasurement m;
    if (mode_ == 2) {
      m.unsupported = "the peer refused the shape";
      return m;
    }
    m.validation = {mode_ == 1, "rel_l2", mode_ == 1 ? 1e-3 : 0.5, 1e-2, "peer's own reference"};
    if (mode_ == 1)
      for (int64_t i = 0; i < c.min_samples; ++i) m.samples.push_back(1e-3 * static_cast<double>(i + 1));
    m.stop_reason = "peer's rule";
    m.peak_memory = 12345;
    m.note = "measured elsewhere";
    return m;
  }

 private:
  int64_t mode_ = 0;
};

KindInfo test_kind() {
  KindInfo k;
  k.name = "unit-test";
  k.group = "test";
  k.doc = "fake variants for the runner's tests";
  KeySpec work;
  work.name = "work";
  work.type = ParamType::Int;
  work.default_value = Value(int64_t{1});
  KeySpec alloc;
  alloc.name = "alloc";
  alloc.type = ParamType::Bytes;
  alloc.default_value = Value(int64_t{1024});
  k.keys = {work, alloc};
  return k;
}

const KindRegistration kind_registration(test_kind());
// gpu_only has no factory: declared, not built into this binary.
const VariantListRegistration test_variants("unit-test",
                                            {{{"slow", Backend::Cpu, "3 units of work", {}}, make_variant<Slow>()},
                                             {{"fast", Backend::Cpu, "1 unit", {}}, make_variant<Fast>()},
                                             {{"wrong", Backend::Cpu, "fails validation", {}}, make_variant<Wrong>()},
                                             {{"hungry", Backend::Cpu, "allocates alloc bytes", {}}, make_variant<Hungry>()},
                                             {{"picky", Backend::Cpu, "only work = 1", {}}, make_variant<Picky>()},
                                             {{"gpu_only", Backend::Cuda, "a CUDA variant", {}}, VariantFactory{}},
                                             {{"thrower", Backend::Cpu, "throws while running", {}}, make_variant<Thrower>()},
                                             {{"self_timed", Backend::Cpu, "measures itself", {}}, make_variant<SelfTimed>()}});

ExperimentSpec spec_of(const std::string& body) {
  SpecOptions opt;
  std::string text =
      "experiments:\n  - name: e\n    kind: unit-test\n    warmup: 1\n    min_samples: 5\n"
      "    min_time: 0\n    max_noise: 50%\n    timeout: 5s\n" +
      body;
  return parse_spec(text, "t.yaml", opt).experiments[0];
}

ExperimentResult run(const ExperimentSpec& e) {
  auto rt = make_cpu_runtime();
  Runner r(*rt, RunnerOptions{});
  return r.run(e);
}

TEST(Runner, BaselineFirstAndSpeedupWithInterval) {
  ExperimentResult res =
      run(spec_of("    variants: [fast, slow]\n    baseline: slow\n    work: [2, 3]\n"
                  "    book: {source: b, rows: [{variant: fast, work: 2, speedup: 3}]}\n"));
  ASSERT_EQ(res.rows.size(), 4u);
  EXPECT_EQ(res.rows[0].variant, "slow");
  EXPECT_TRUE(res.rows[0].is_baseline);
  EXPECT_EQ(res.rows[1].variant, "fast");
  for (const auto& r : res.rows) {
    EXPECT_EQ(r.status, RowStatus::Ok) << r.message;
    EXPECT_GE(r.stats.n, 5u);
    EXPECT_FALSE(r.stop_reason.empty());
    EXPECT_GT(r.stats.median, 0);
    EXPECT_GE(r.peak_memory, 4096);
  }
  ASSERT_TRUE(res.rows[1].speedup);
  EXPECT_GT(res.rows[1].speedup->ratio, 1.5);
  EXPECT_EQ(res.rows[1].speedup->verdict, Verdict::Faster);
  EXPECT_FALSE(res.rows[0].speedup);
  ASSERT_EQ(res.rows[1].book.size(), 1u);
  EXPECT_EQ(res.rows[1].book[0].first, "speedup");
  EXPECT_TRUE(res.rows[3].book.empty());  // work = 3 has no book row
  EXPECT_EQ(res.rows[1].metrics[0].key, "units");
}

TEST(Runner, FailedValidationIsNeverTimed) {
  g_wrong_runs = 0;
  ExperimentResult res = run(spec_of("    variants: [wrong, fast]\n"));
  ASSERT_EQ(res.rows.size(), 2u);
  EXPECT_EQ(res.rows[0].status, RowStatus::Failed);
  EXPECT_NE(res.rows[0].message.find("validation failed: rel_l2 0.5 > 0.01 (output is garbage)"), std::string::npos)
      << res.rows[0].message;
  EXPECT_TRUE(res.rows[0].samples.empty());
  EXPECT_EQ(g_wrong_runs.load(), 0);
  EXPECT_EQ(res.rows[1].status, RowStatus::Ok);  // the sweep goes on
}

TEST(Runner, MemoryLimitGivesAnOomRowAndTheSweepGoesOn) {
  ExperimentResult res = run(spec_of("    variants: [hungry]\n    alloc: [1MiB, 64MiB, 2MiB]\n    memory_limit: 16MiB\n"));
  ASSERT_EQ(res.rows.size(), 3u);
  EXPECT_EQ(res.rows[0].status, RowStatus::Ok);
  EXPECT_EQ(res.rows[1].status, RowStatus::Oom);
  EXPECT_NE(res.rows[1].message.find("n×n scores"), std::string::npos) << res.rows[1].message;
  EXPECT_NE(res.rows[1].message.find("memory limit of 16 MiB"), std::string::npos) << res.rows[1].message;
  EXPECT_EQ(res.rows[2].status, RowStatus::Ok);
  EXPECT_EQ(res.rows[2].peak_memory, 2 << 20);
  EXPECT_EQ(host_memory().limit(), 0);  // the limit applies to the rows only
}

// #19 item 11: without --memory-limit a CPU row past the machine's free memory grew until the OS
// killed the run (Linux overcommits). Now the free memory is the limit, and the row is OOM.
TEST(Runner, CpuRowPastTheFreeMemoryIsOomWithoutALimit) {
  ExperimentResult res = run(spec_of("    variants: [hungry]\n    alloc: [1MiB, 64TiB]\n"));
  ASSERT_EQ(res.rows.size(), 2u);
  EXPECT_EQ(res.rows[0].status, RowStatus::Ok);
  EXPECT_EQ(res.rows[1].status, RowStatus::Oom) << res.rows[1].message;
  EXPECT_NE(res.rows[1].message.find("the memory free when the row began"), std::string::npos) << res.rows[1].message;
}

TEST(Runner, UnsupportedRowsSayWhy) {
  ExperimentResult res = run(spec_of("    variants: [picky, gpu_only]\n    work: [1, 2]\n"));
  ASSERT_EQ(res.rows.size(), 4u);
  EXPECT_EQ(res.rows[0].status, RowStatus::Ok);
  EXPECT_EQ(res.rows[1].status, RowStatus::Unsupported);
  EXPECT_EQ(res.rows[1].message, "needs the cuda backend");
  EXPECT_EQ(res.rows[2].status, RowStatus::Unsupported);
  EXPECT_EQ(res.rows[2].message, "work > 1 is not supported");
}

TEST(Runner, ExceptionInRunIsAFailedRow) {
  ExperimentResult res = run(spec_of("    variants: [thrower, fast]\n    baseline: thrower\n"));
  ASSERT_EQ(res.rows.size(), 2u);
  EXPECT_EQ(res.rows[0].status, RowStatus::Failed);
  EXPECT_EQ(res.rows[0].message, "kernel exploded");
  EXPECT_FALSE(res.rows[1].speedup);  // no speedup against a failed baseline
}

TEST(Runner, SelfMeasuredRowsTakeTheirOwnSamplesGateAndPeak) {
  g_self_calls = 0;
  ExperimentResult res = run(spec_of("    variants: [fast, self_timed]\n    baseline: fast\n    work: [1, 2, 3]\n"));
  ASSERT_EQ(res.rows.size(), 6u);
  const Row& ok = res.rows[1];
  EXPECT_EQ(ok.status, RowStatus::Ok) << ok.message;
  EXPECT_EQ(ok.samples, (std::vector<double>{1e-3, 2e-3, 3e-3, 4e-3, 5e-3}));  // min_samples 5 reached the variant
  EXPECT_DOUBLE_EQ(ok.stats.median, 3e-3);
  EXPECT_EQ(ok.stop_reason, "peer's rule");
  EXPECT_EQ(ok.peak_memory, 12345);
  EXPECT_EQ(ok.message, "measured elsewhere");
  ASSERT_TRUE(ok.validation);
  EXPECT_EQ(ok.validation->detail, "peer's own reference");
  EXPECT_TRUE(ok.speedup);  // compared with the baseline like any row
  EXPECT_EQ(res.rows[3].status, RowStatus::Unsupported);
  EXPECT_EQ(res.rows[3].message, "the peer refused the shape");
  EXPECT_EQ(res.rows[3].peak_memory, -1);
  EXPECT_EQ(res.rows[5].status, RowStatus::Failed);
  EXPECT_NE(res.rows[5].message.find("validation failed: rel_l2 0.5 > 0.01 (peer's own reference)"), std::string::npos)
      << res.rows[5].message;
  EXPECT_TRUE(res.rows[5].samples.empty());
  EXPECT_EQ(g_self_calls.load(), 0);
}

TEST(Runner, SkippedRowsAreNotRun) {
  ExperimentResult res = run(spec_of("    variants: [fast, slow]\n    work: [1, 2]\n    skip: [{variant: slow, work: 2}]\n"));
  EXPECT_EQ(res.rows.size(), 3u);
  EXPECT_EQ(res.plan.skipped, 1u);
}

TEST(Session, ExitCodeOneWhenARowFailedAndTheRunIsStillWritten) {
  std::string dir = test::make_temp_dir();
  test::write_text(dir + "/s.yaml",
                   "experiments:\n  - {name: e, kind: unit-test, variants: [fast, wrong], min_samples: 2, min_time: 0}\n");
  SessionOptions o;
  o.backend = "cpu";
  o.quiet = true;
  o.output = dir + "/out";
  o.format = "json";  // keeps the test's stdout short
  EXPECT_EQ(run_spec_file(dir + "/s.yaml", o), 1);
  auto j = ib::parse_json<nlohmann::json>(test::read_text(dir + "/out/results.json"));
  EXPECT_EQ(j["experiments"][0]["rows"][1]["status"], "FAILED");
  o.output = dir + "/out2";
  test::write_text(dir + "/ok.yaml",
                   "experiments:\n  - {name: e, kind: unit-test, variants: [fast], min_samples: 2, min_time: 0}\n");
  EXPECT_EQ(run_spec_file(dir + "/ok.yaml", o), 0);
}

// The peaks (copy, GEMM) are measured before a run only where a kind's rows count bytes or FLOPs
// for the roofline columns: a run of the runner's own kind (no work counted) says they were not
// measured and writes zeros; a run of the ceiling kind measures them.
TEST(Session, PeaksAreMeasuredOnlyForKindsThatCountWork) {
  std::string dir = test::make_temp_dir();
  test::write_text(dir + "/plain.yaml",
                   "experiments:\n  - {name: e, kind: unit-test, variants: [fast], min_samples: 2, min_time: 0}\n");
  test::write_text(dir + "/roofline.yaml",
                   "experiments:\n  - {name: c, kind: ceiling, variants: [memcpy], bytes: 1MiB, min_samples: 2, min_time: 0}\n");
  SessionOptions o;
  o.backend = "cpu";
  o.quiet = true;
  o.format = "md";
  auto peaks_of = [&](const std::string& spec, std::string* printed) {
    o.output = dir + "/out-" + spec;
    ::testing::internal::CaptureStdout();
    const int code = run_spec_file(dir + "/" + spec + ".yaml", o);
    *printed = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(code, 0) << *printed;
    return ib::parse_json<nlohmann::json>(test::read_text(o.output + "/results.json"))["meta"]["ceilings"];
  };
  std::string printed;
  const nlohmann::json none = peaks_of("plain", &printed);
  EXPECT_EQ(none["copy_bytes_per_s"], 0.0);
  EXPECT_NE(printed.find("peaks: not measured"), std::string::npos) << printed;
  const nlohmann::json measured = peaks_of("roofline", &printed);
  EXPECT_GT(measured["copy_bytes_per_s"].get<double>(), 0.0);
  EXPECT_GT(measured["gemm_flops_per_s"].get<double>(), 0.0);
  EXPECT_EQ(printed.find("peaks: not measured"), std::string::npos) << printed;
}

}  // namespace
}  // namespace ib
