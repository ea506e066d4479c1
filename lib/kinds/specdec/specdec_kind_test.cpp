// The `specdec` kind through the real runner: every registered CPU variant at its smallest point,
// greedy and sampled, passes its gate (a new method is tested by registering it, no list to edit),
// and the typed keys are the kind's keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "common/run_kind.h"
#include "core/registry.h"
#include "kinds/specdec/specdec_keys.h"

namespace ib::specdec {
namespace {

TEST(SpecdecKind, TheTypedKeysAreTheKindsAndEveryVariantReadsOnlyThem) {
  const KindInfo* k = Registry::instance().kind("specdec");
  ASSERT_NE(k, nullptr);
  std::vector<std::string> kind_keys;
  for (const KeySpec& key : k->keys) kind_keys.push_back(key.name);
  EXPECT_EQ(kind_keys, specdec_keys().names());
  const std::vector<std::string> names = specdec_keys().names();
  const std::set<std::string> known(names.begin(), names.end());
  ASSERT_GE(k->variants.size(), 12u);
  for (const VariantDecl& v : k->variants)
    for (const std::string& key : v.uses) EXPECT_TRUE(known.count(key)) << v.name << " reads '" << key << "'";
}

TEST(SpecdecKind, AStringKeyAndItsGroupLandInTheirFields) {
  Point p;
  p.params = {{"acceptance", Value(std::string("model")), ParamType::Enum},
              {"prompt_file", Value(std::string("p.txt")), ParamType::String},
              {"cpu_matmul", Value(std::string("int8")), ParamType::Enum}};
  const SpecdecKeys keys = specdec_keys().read(p);
  EXPECT_EQ(keys.acceptance, Acceptance::Model);
  EXPECT_EQ(keys.prompts.file, "p.txt");
  EXPECT_TRUE(keys.prompts.text.empty());
  EXPECT_EQ(keys.prompts.tokenizer, "auto");
  EXPECT_EQ(keys.cpu_matmul, model::CpuMatmul::Int8);
  EXPECT_EQ(keys.k, 5);
  EXPECT_EQ(keys.text, "none");
}

// Every CPU variant of the kind, on the tiny preset with a draft of its first layer.
std::vector<std::string> cpu_variants() {
  std::vector<std::string> names;
  for (const VariantDecl& v : Registry::instance().kind("specdec")->variants)
    if (v.backend == Backend::Cpu) names.push_back(v.name);
  return names;
}
std::string every_cpu_variant() {
  std::string list;
  for (const std::string& v : cpu_variants()) list += (list.empty() ? "" : ", ") + v;
  return list;
}

TEST(SpecdecKind, EveryCpuVariantPassesItsGateGreedy) {
  const auto r = testing::run_spec_text(
      "{warmup: 0, min_samples: 1, min_time: 0}",
      "  - name: smallest\n    kind: specdec\n    variants: [" + every_cpu_variant() +
          "]\n    target: tiny\n    draft: self\n    draft_layers: 1\n    acceptance: model\n    prompt: 16\n"
          "    new_tokens: 12\n    k: 3\n    tree: 3x2x1\n    branches: 2\n    lookahead_window: 3\n    lookahead_ngram: 3\n");
  testing::expect_all_ok(r, cpu_variants().size());
  for (const Row& row : r.rows) {
    if (row.variant == "cpu_autoregressive") continue;
    EXPECT_GT(testing::metric(row, "tokens/step"), 0.99) << row.variant;
  }
}

TEST(SpecdecKind, EveryCpuVariantThatSamplesPassesItsGateSampled) {
  // Lookahead verifies greedily (an unsupported row saying so); the others sample.
  const auto r = testing::run_spec_text(
      "{warmup: 0, min_samples: 1, min_time: 0}",
      "  - name: sampled\n    kind: specdec\n    variants: [" + every_cpu_variant() +
          "]\n    target: tiny\n    draft: self\n    draft_layers: 1\n    acceptance: model\n    prompt: 16\n"
          "    new_tokens: 12\n    k: 3\n    tree: 3x2x1\n    branches: 2\n    temperature: 0.8\n");
  ASSERT_EQ(r.rows.size(), cpu_variants().size());
  for (const Row& row : r.rows) {
    if (row.variant == "cpu_lookahead") {
      EXPECT_EQ(row.status, RowStatus::Unsupported);
      EXPECT_NE(row.message.find("greedily"), std::string::npos) << row.message;
      continue;
    }
    EXPECT_EQ(row.status, RowStatus::Ok) << row.variant << ": " << row.message;
    ASSERT_TRUE(row.validation) << row.variant;
    EXPECT_TRUE(row.validation->ok) << row.variant << ": " << row.validation->metric << " " << row.validation->value;
  }
}

}  // namespace
}  // namespace ib::specdec
