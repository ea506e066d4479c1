// Running one experiment through the real runner from spec text, and the gate every row must pass:
// shared by the kinds' unit tests and the GPU tests.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/backend.h"
#include "core/runner.h"
#include "core/spec.h"

namespace ib::testing {

// `defaults` is the spec's defaults block ("{warmup: 0, min_samples: 2, ...}"), `body` the
// experiments list; the first experiment runs on `backend`.
inline ExperimentResult run_spec_text(const std::string& defaults, const std::string& body, Backend backend = Backend::Cpu) {
  SpecOptions opt;
  Spec spec = parse_spec("defaults: " + defaults + "\nexperiments:\n" + body, "t.yaml", opt);
  auto rt = backend == Backend::Cpu ? make_cpu_runtime() : make_cuda_runtime();
  Runner runner(*rt, RunnerOptions{});
  return runner.run(spec.experiments[0]);
}

// Every row measured and its correctness gate passed; `rows` rows unless it is 0 (any, but some).
inline void expect_all_ok(const ExperimentResult& r, size_t rows = 0) {
  if (rows) {
    ASSERT_EQ(r.rows.size(), rows);
  } else {
    ASSERT_FALSE(r.rows.empty());
  }
  for (const auto& row : r.rows) {
    EXPECT_EQ(row.status, RowStatus::Ok) << row.variant << " " << row.point.label() << ": " << row.message;
    ASSERT_TRUE(row.validation) << row.variant << " " << row.point.label();
    EXPECT_TRUE(row.validation->ok) << row.variant << " " << row.point.label() << ": " << row.validation->metric << " "
                                    << row.validation->value << " " << row.validation->detail;
  }
}

// The value of a row's metric `key` (a test failure, and 0, when the row lacks it).
inline double metric(const Row& r, const std::string& key) {
  for (const auto& m : r.metrics)
    if (m.key == key) return m.value;
  ADD_FAILURE() << "no metric " << key << " in " << r.variant;
  return 0;
}

}  // namespace ib::testing
