// Conformance over the registry, in the spirit of ggml's test-backend-ops: a kind's every variant
// for a backend (and its host variants) runs at the kind's smallest point (KindInfo::smallest)
// through the real runner and must pass its gate. Shared by the CPU test (unit/test_conformance.cpp)
// and the GPU one (gpu/test_gpu_conformance.cpp).
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/registry.h"
#include "run_kind.h"

namespace ib::testing {

// Every kind but the runner test's own (its variants fail on purpose).
inline std::vector<std::string> conformance_kinds() {
  std::vector<std::string> names;
  for (const std::string& k : Registry::instance().kind_names())
    if (k != "unit-test") names.push_back(k);
  return names;
}

// gtest's name for a kind's test ("kv-evict" -> "kv_evict").
inline std::string conformance_test_name(const ::testing::TestParamInfo<std::string>& param_info) {
  std::string name = param_info.param;
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

inline void expect_conformance(const std::string& kind_name, Backend backend) {
  const KindInfo* kind = Registry::instance().kind(kind_name);
  ASSERT_NE(kind, nullptr);
  ASSERT_FALSE(kind->smallest.empty()) << "kind " << kind->name << " declares no smallest point (KindInfo::smallest)";
  std::istringstream in(kind->smallest);
  std::string line, keys;
  while (std::getline(in, line)) keys += "    " + line + "\n";
  const ExperimentResult r = run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 30s}",
                                           "  - name: smallest\n    kind: " + kind->name + "\n" + keys, backend);
  ASSERT_FALSE(r.rows.empty());
  // Every variant of the backend and every host variant ran at every point: as many rows each, and
  // no other rows.
  std::map<std::string, size_t> rows_of;
  for (const VariantDecl& v : kind->variants)
    if (v.backend == backend || v.host) rows_of[v.name] = 0;
  for (const Row& row : r.rows) ++rows_of[row.variant];
  for (const auto& [variant, rows] : rows_of) EXPECT_EQ(rows * rows_of.size(), r.rows.size()) << variant;
  // A run measures the peaks only for kinds that declare roofline columns: a kind whose rows count
  // bytes or FLOPs must declare them, and one that declares them must count some.
  bool counted = false, measured = false;
  for (const Row& row : r.rows) {
    if (row.status != RowStatus::Ok) continue;
    measured = true;
    if (row.work.flops > 0 || row.work.bytes > 0) {
      counted = true;
      EXPECT_TRUE(kind->roofline) << row.variant << " counts bytes or FLOPs; kind " << kind->name
                                  << " must declare KindInfo::roofline for its runs to measure the peaks";
    }
  }
  if (measured && backend == Backend::Cpu) {
    EXPECT_EQ(counted, kind->roofline) << "kind " << kind->name << " declares roofline columns no row fills";
  }
  for (const Row& row : r.rows) {
    const VariantDecl* decl = find_variant(*kind, row.variant);
    ASSERT_NE(decl, nullptr) << row.variant;
    const std::string where = row.variant + " " + row.point.label();
    if (decl->peer && row.status == RowStatus::Unsupported) {  // its framework or server is not here
      EXPECT_FALSE(row.message.empty()) << where << ": a peer's unsupported row says why";
      continue;
    }
    EXPECT_EQ(row.status, RowStatus::Ok) << where << ": " << row.message;
    ASSERT_TRUE(row.validation) << where << ": no gate";
    EXPECT_TRUE(row.validation->ok) << where << ": " << row.validation->metric << " " << row.validation->value << " "
                                    << row.validation->detail;
  }
}

}  // namespace ib::testing
