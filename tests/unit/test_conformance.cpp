// Conformance over the registry, in the spirit of ggml's test-backend-ops: every kind declares its
// smallest point (KindInfo::smallest), and every registered variant of every kind runs there on
// the CPU backend (with the host variants) through the real runner and must pass its gate. A new
// variant is checked by registering it: there is no list to edit. A peer (another framework in its
// own process) may be unsupported, saying why, where its framework is not installed.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../common/run_kind.h"
#include "core/registry.h"

namespace ib {
namespace {

// Every kind but the runner test's own (its variants fail on purpose).
std::vector<std::string> kind_names() {
  std::vector<std::string> names;
  for (const std::string& k : Registry::instance().kind_names())
    if (k != "unit-test") names.push_back(k);
  return names;
}

std::string indented(const std::string& yaml) {
  std::istringstream in(yaml);
  std::string line, out;
  while (std::getline(in, line)) out += "    " + line + "\n";
  return out;
}

class Conformance : public ::testing::TestWithParam<std::string> {};

TEST_P(Conformance, EveryVariantPassesItsGateAtTheKindsSmallestPoint) {
  const KindInfo* kind = Registry::instance().kind(GetParam());
  ASSERT_NE(kind, nullptr);
  ASSERT_FALSE(kind->smallest.empty()) << "kind " << kind->name << " declares no smallest point (KindInfo::smallest)";
  const ExperimentResult r =
      testing::run_spec_text("{warmup: 0, min_samples: 1, min_time: 0, timeout: 30s}",
                             "  - name: smallest\n    kind: " + kind->name + "\n" + indented(kind->smallest));
  ASSERT_FALSE(r.rows.empty());
  // Every CPU and host variant ran at every point: as many rows each, and no other rows.
  std::map<std::string, size_t> rows_of;
  for (const VariantDecl& v : kind->variants)
    if (v.backend == Backend::Cpu || v.host) rows_of[v.name] = 0;
  for (const Row& row : r.rows) ++rows_of[row.variant];
  for (const auto& [variant, rows] : rows_of) EXPECT_EQ(rows * rows_of.size(), r.rows.size()) << variant;
  for (const Row& row : r.rows) {
    const VariantDecl* decl = find_variant(*kind, row.variant);
    ASSERT_NE(decl, nullptr) << row.variant;
    const std::string where = row.variant + " " + row.point.label();
    if (decl->peer && row.status == RowStatus::Unsupported) {
      EXPECT_FALSE(row.message.empty()) << where << ": a peer's unsupported row says why";
      continue;
    }
    EXPECT_EQ(row.status, RowStatus::Ok) << where << ": " << row.message;
    ASSERT_TRUE(row.validation) << where << ": no gate";
    EXPECT_TRUE(row.validation->ok) << where << ": " << row.validation->metric << " " << row.validation->value << " "
                                    << row.validation->detail;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKind, Conformance, ::testing::ValuesIn(kind_names()),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ib
