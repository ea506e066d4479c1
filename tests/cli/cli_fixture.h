// The fixture of the CLI tests that run the binary in a scratch directory holding a quick spec
// (test_cli.cpp, test_cli_input_checks.cpp: one test suite, `Cli`, so one fixture type).
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "infer_bench_binary.h"

namespace ib::test {

// A spec that runs in well under a second on the CPU backend.
inline constexpr const char* kQuickSpec = R"(version: 1
defaults: {warmup: 1, min_samples: 3, min_time: 0, timeout: 1s}
experiments:
  - name: tiny-copy
    kind: ceiling
    variants: [memcpy]
    bytes: [1MiB, 2MiB]
  - name: tiny-gemm
    kind: ceiling
    variants: [sgemm]
    m: 64
    n: 64
    k: 64
    dtype: fp32
)";

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir();
    write_text(dir_ + "/quick.yaml", kQuickSpec);
  }
  ProcessOptions in_dir() const {
    ProcessOptions o;
    o.cwd = dir_;
    return o;
  }
  std::string dir_;
};

}  // namespace ib::test
