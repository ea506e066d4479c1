// #19's reproducers through the real binary: hostile input files, sweeps past the row limit, a
// full disk, two runs into one directory and a closed stdout. Each must end in a one-line error
// (or a complete run) and never lose a finished row.
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "infer_bench_binary.h"

namespace ib::test {
namespace {

class Reliability : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = make_temp_dir(); }
  ProcessOptions in_dir() const {
    ProcessOptions o;
    o.cwd = dir_;
    return o;
  }
  // exit 2, one line on stderr holding `expected`, nothing on stdout, no run directory.
  void expect_refused(const ProcessResult& r, const std::string& expected) const {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_FALSE(path_exists(dir_ + "/out"));
  }
  std::string dir_;
};

// A spec of `rows` memcpy rows of a few milliseconds each.
std::string copy_rows(const std::string& name, int rows) {
  std::string s = "  - name: " + name + "\n    kind: ceiling\n    variants: [memcpy]\n    bytes: [";
  for (int i = 0; i < rows; ++i) s += (i ? ", " : "") + std::to_string(64 + i) + "KiB";
  return s + "]\n    min_samples: 3\n    min_time: 0\n    warmup: 0\n";
}

// #19 item 9: a FIFO blocked forever, /dev/zero grew without end, a 3 MB gzip bomb passed 4 GB.
TEST_F(Reliability, FifosDevicesAndGzipBombsAreRefusedBeforeTheyAreRead) {
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0644), 0);
  {  // 80 MiB of one byte, gzip'd to ~80 KB: past the 64 MiB a tokenizer.json may hold
    gzFile gz = gzopen((dir_ + "/bomb.json.gz").c_str(), "wb9");
    ASSERT_NE(gz, nullptr);
    const std::string head = "{\"model\": {\"vocab\": {\"", chunk(1 << 20, 'a');
    gzwrite(gz, head.data(), static_cast<unsigned>(head.size()));
    for (int i = 0; i < 80; ++i) gzwrite(gz, chunk.data(), static_cast<unsigned>(chunk.size()));
    gzclose(gz);
  }
  struct Case {
    std::string vocab, expected;
  };
  for (const Case& c : {Case{"fifo", "fifo: cannot read: is a FIFO, not a regular file"},
                        Case{"/dev/zero", "/dev/zero: cannot read: is a device, not a regular file"},
                        Case{"bomb.json.gz", "bomb.json.gz: more than 64 MiB once decompressed"}}) {
    write_text(dir_ + "/v.yaml",
               "experiments:\n  - name: v\n    kind: constrain-mask\n    constraint: \"regex:a+\"\n    vocab: " + c.vocab + "\n");
    expect_refused(ib({"run", "v.yaml", "--backend", "cpu", "-o", "out"}, in_dir()), c.expected);
  }
  // The spec itself, a schema file and a checkpoint's weights file as a FIFO.
  expect_refused(ib({"run", "fifo", "--backend", "cpu", "-o", "out"}, in_dir()), "fifo: cannot read: is a FIFO");
  write_text(dir_ + "/s.yaml", "experiments:\n  - name: s\n    kind: constrain-compile\n    constraint: fifo\n");
  expect_refused(ib({"run", "s.yaml", "--backend", "cpu", "-o", "out"}, in_dir()), "fifo: cannot read: is a FIFO");
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_EQ(::mkdir(ckpt.c_str(), 0755), 0);
  write_text(ckpt + "/config.json", read_text(kSource + "/data/models/ib-draft-1m/config.json"));
  ASSERT_EQ(::mkfifo((ckpt + "/model.safetensors").c_str(), 0644), 0);
  write_text(dir_ + "/d.yaml",
             "experiments:\n  - name: d\n    kind: decode\n    variants: [cpu_prefill]\n    model: checkpoint\n"
             "    weights: ckpt\n");
  expect_refused(ib({"run", "d.yaml", "--backend", "cpu", "-o", "out"}, in_dir()), "model.safetensors: cannot read: is a FIFO");
}

// #19 item 14: a checkpoint whose headers are fine but whose data is cut short is bad input when
// the spec is read, before any experiment runs, naming the tensor.
TEST_F(Reliability, TruncatedCheckpointIsRefusedWithTheSpec) {
  const std::string ckpt = dir_ + "/ckpt", src = kSource + "/data/models/ib-draft-1m";
  ASSERT_EQ(::mkdir(ckpt.c_str(), 0755), 0);
  for (const char* f : {"config.json", "tokenizer.json"}) write_text(ckpt + "/" + f, read_text(src + "/" + f));
  const std::string weights = read_text(src + "/model.safetensors");
  write_text(ckpt + "/model.safetensors", weights.substr(0, weights.size() - 1000));
  write_text(dir_ + "/d.yaml",
             "experiments:\n" + copy_rows("first", 2) +
                 "  - name: d\n    kind: decode\n    variants: [cpu_prefill]\n    model: checkpoint\n    weights: ckpt\n");
  expect_refused(ib({"run", "d.yaml", "--backend", "cpu", "-o", "out"}, in_dir()), "(truncated file?)");
}

// #19 item 12: a sweep of 10^6 rows was accepted and started. Refused at parse time with its size
// and the limit; --max-rows raises the limit.
TEST_F(Reliability, SweepsPastTheRowLimitAreRefusedAndTheFlagRaisesIt) {
  std::string bytes, m;
  for (int i = 0; i < 400; ++i) bytes += (i ? ", " : "") + std::to_string(4096 + i);
  for (int i = 0; i < 300; ++i) m += (i ? ", " : "") + std::to_string(1 + i);
  write_text(dir_ + "/big.yaml", "experiments:\n  - name: big\n    kind: ceiling\n    variants: [memcpy, sgemm]\n    bytes: [" +
                                     bytes + "]\n    m: [" + m + "]\n");
  for (const char* cmd : {"list", "run"}) {
    auto r = ib({cmd, "big.yaml", "--backend", "cpu"}, in_dir());
    expect_refused(r, "the sweep has 240000 rows (400 bytes × 300 m × 2 variants), past the limit of 100000 rows");
    EXPECT_NE(r.err.find("--max-rows"), std::string::npos) << r.err;
  }
  auto listed = ib({"list", "big.yaml", "--backend", "cpu", "--max-rows", "240000"}, in_dir());
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("240000 rows in all"), std::string::npos);
  expect_refused(ib({"list", "big.yaml", "--backend", "cpu", "--max-rows", "0"}, in_dir()), "--max-rows: must be at least 1");
}

// #19 item 13: on a full disk the run failed after some rows, exited 2 and removed every file.
// Now the last complete files stay, the error names the file and errno, and the exit code is 3.
// (A file size limit stands in for the full disk: the write fails with EFBIG, through the same path.)
TEST_F(Reliability, FullDiskKeepsTheLastCompleteFiles) {
  write_text(dir_ + "/many.yaml", "experiments:\n" + copy_rows("many", 60));
  ProcessOptions o = in_dir();
  o.file_size_limit = 48 << 10;
  auto r = ib({"run", "many.yaml", "--backend", "cpu", "-o", "out", "-q"}, o);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("cannot write"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("errno"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the results written before it are in out/"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  const auto& rows = j["experiments"][0]["rows"];
  EXPECT_GT(rows.size(), 0u);
  EXPECT_LT(rows.size(), 60u);
  for (const auto& row : rows) EXPECT_EQ(row["status"], "ok");
  // The CSV's and the report's last complete versions are there too, no temporary is left.
  EXPECT_GE(lines(read_text(dir_ + "/out/results.csv")), 1u);
  EXPECT_TRUE(path_exists(dir_ + "/out/report.md"));
  for (const auto& f : list_files(dir_ + "/out")) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
}

// #19 item 15: two runs started together into one --output both failed and the directory ended
// empty. One wins (the lock) and writes every row; the other fails at once and touches nothing.
TEST_F(Reliability, TwoRunsIntoOneOutputOneWinsTheOtherTouchesNothing) {
  write_text(dir_ + "/s.yaml", "experiments:\n" + copy_rows("s", 12));
  ProcessResult a, b;
  std::thread ta([&] { a = ib({"run", "s.yaml", "--backend", "cpu", "-o", "out", "-q"}, in_dir()); });
  std::thread tb([&] { b = ib({"run", "s.yaml", "--backend", "cpu", "-o", "out", "-q"}, in_dir()); });
  ta.join();
  tb.join();
  const ProcessResult& won = a.exit_code == 0 ? a : b;
  const ProcessResult& lost = a.exit_code == 0 ? b : a;
  ASSERT_EQ(won.exit_code, 0) << a.err << b.err;
  EXPECT_EQ(lost.exit_code, 2) << lost.err;
  EXPECT_EQ(lines(lost.err), 1u) << lost.err;
  EXPECT_TRUE(lost.err.find("another infer-bench run is writing there") != std::string::npos ||
              lost.err.find("already holds") != std::string::npos)
      << lost.err;
  const auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  EXPECT_EQ(j["experiments"][0]["rows"].size(), 12u);
  EXPECT_EQ(lines(read_text(dir_ + "/out/results.csv")), 13u);
  for (const auto& f : list_files(dir_ + "/out")) EXPECT_EQ(f.find(".tmp"), std::string::npos) << f;
}

// #19 item 16: `infer-bench run … | head` killed the run by SIGPIPE with interrupted: false. Now a
// closed stdout stops the run as Ctrl-C does: exit 130, complete files, meta.interrupted.
TEST_F(Reliability, ClosedStdoutStopsTheRunAsAnInterruption) {
  std::string spec = "experiments:\n";
  for (int i = 0; i < 6; ++i) spec += copy_rows("e" + std::to_string(i), 3);
  write_text(dir_ + "/s.yaml", spec);
  ProcessOptions o = in_dir();
  o.close_stdout_after_bytes = 10;
  auto r = ib({"run", "s.yaml", "--backend", "cpu", "-o", "out"}, o);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("stdout was closed"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(read_text(dir_ + "/out/results.json"));
  EXPECT_TRUE(j["meta"]["interrupted"].get<bool>());
  size_t rows = 0;
  for (const auto& e : j["experiments"]) rows += e["rows"].size();
  EXPECT_LT(rows, 18u);
}

// #19 "Also": a value holding a newline broke the one-line rule; an empty spec or one without
// `experiments` had no line.
TEST_F(Reliability, ErrorsAreOneLineWithALocationWhateverTheInputHolds) {
  write_text(dir_ + "/nl.yaml", "experiments:\n  - name: \"two\\nlines\"\n    kind: ceiling\n");
  auto r = ib({"list", "nl.yaml"}, in_dir());
  expect_refused(r, "nl.yaml:2:11: ");
  EXPECT_NE(r.err.find("two\\nlines"), std::string::npos) << r.err;  // escaped, on the one line
  write_text(dir_ + "/empty.yaml", "");
  expect_refused(ib({"list", "empty.yaml"}, in_dir()), "empty.yaml:1:1: the spec is empty");
  write_text(dir_ + "/none.yaml", "version: 1\n");
  expect_refused(ib({"list", "none.yaml"}, in_dir()), "none.yaml:1:1: missing required key 'experiments'");
}

}  // namespace
}  // namespace ib::test
