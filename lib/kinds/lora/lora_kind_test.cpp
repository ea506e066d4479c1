// The `lora` kind through the real runner on the CPU engine: every way of serving a mixed-adapter
// batch passes its check against merged float32 weights, the metrics count what happened, and a
// PEFT adapter that does not fit the spec's model is refused when the spec is read.
#include <string>

#include <gtest/gtest.h>

#include "common/run_kind.h"
#include "core/errors.h"
#include "core/registry.h"
#include "core/spec.h"

namespace ib::lora {
namespace {

using testing::expect_all_ok;
using testing::metric;
using testing::run_spec_text;

const std::string kLoraDefaults = "{warmup: 0, min_samples: 2, min_time: 0, timeout: 5s}";

// Every registered way (a new one is tested by registering it).
std::string every_way() {
  std::string list;
  for (const VariantDecl& v : Registry::instance().kind("lora")->variants) list += (list.empty() ? "" : ", ") + v.name;
  return list;
}

TEST(LoraKind, EveryWayPassesItsCheckOnAMixedBatch) {
  const size_t ways = Registry::instance().kind("lora")->variants.size();
  ASSERT_GE(ways, 4u);
  for (const char* measure : {"decode", "prefill"}) {
    SCOPED_TRACE(measure);
    const auto r = run_spec_text(kLoraDefaults, std::string(R"(
  - name: t
    kind: lora
    variants: [)") + every_way() + R"(]
    baseline: cpu_merged
    model: tiny
    batch: 6
    adapters: 3
    rank: 4
    modules: all
    prompt: 12
    measure: )" + measure + "\n");
    expect_all_ok(r, ways);
    for (const auto& row : r.rows) {
      if (row.variant == "cpu_base") continue;
      EXPECT_EQ(metric(row, "distinct"), 3) << row.variant;  // round-robin over the pool
      EXPECT_GT(metric(row, "resident"), 0) << row.variant;
      // The check says how far the adapters moved the logits: a no-op adapter would show 0.0%.
      EXPECT_EQ(row.validation->detail.find("move the logits 0.0%"), std::string::npos) << row.validation->detail;
      if (row.variant == "cpu_merged") {
        EXPECT_EQ(metric(row, "switches"), 3);
      }
    }
  }
}

TEST(LoraKind, ZipfPopularityConcentratesTheBatchOnFewAdapters) {
  const auto r = run_spec_text(kLoraDefaults, R"(
  - name: t
    kind: lora
    variants: [cpu_batched]
    model: tiny
    batch: 16
    adapters: 32
    rank: 2
    prompt: 8
    popularity: [uniform, zipf]
    zipf_s: 3
)");
  expect_all_ok(r, 2);
  EXPECT_EQ(metric(r.rows[0], "distinct"), 16);  // uniform: min(adapters, batch)
  EXPECT_LT(metric(r.rows[1], "distinct"), 8);   // zipf with s = 3: most sequences on adapter 0
  EXPECT_GE(metric(r.rows[1], "distinct"), 1);
}

TEST(LoraKind, ASpecWhoseAdapterDoesNotFitItsModelIsRefusedWhenRead) {
  const std::string dir = std::string(IB_SOURCE_DIR) + "/data/adapters/qv-r8";  // an adapter of ib-draft-1m (hidden 128)
  const std::string spec =
      "experiments:\n  - name: t\n    kind: lora\n    variants: [cpu_batched]\n    model: tiny\n    adapter: " + dir + "\n";
  try {
    parse_spec(spec, "t.yaml", SpecOptions{});
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("t.yaml:6:"), std::string::npos) << m;  // the adapter: line
    EXPECT_NE(m.find("adapter"), std::string::npos) << m;
    EXPECT_NE(m.find("the config needs [8, 64]"), std::string::npos) << m;
  }
  try {
    parse_spec("experiments:\n  - name: t\n    kind: lora\n    variants: [cpu_batched]\n    modules: q,x\n", "t.yaml",
               SpecOptions{});
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'x' is not a module"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ib::lora
