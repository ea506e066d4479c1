// Every constrain kind's CPU variants through the runner at small sizes: each passes its gate.
#include <gtest/gtest.h>

#include "../common/run_kind.h"
#include "core/json_input.h"

#include "constrain/keyword_cases.h"
#include "core/runner.h"
#include "core/spec.h"

namespace ib {
namespace {

using testing::expect_all_ok;

ExperimentResult run_spec_text(const std::string& body) {
  return testing::run_spec_text("{warmup: 0, min_samples: 2, min_time: 0, timeout: 2s}", body);
}

double metric(const Row& r, const std::string& key) {
  for (const auto& m : r.metrics)
    if (m.key == key) return m.value;
  ADD_FAILURE() << "no metric " << key;
  return 0;
}

TEST(ConstrainKinds, CompileBothVariantsOnRegexChoiceAndSchema) {
  auto r = run_spec_text(
      "  - {name: c, kind: constrain-compile, variants: [precomputed, lazy],"
      " constraint: [tool_call, 'regex:[a-z]{1,8}@[a-z]+\\.com', 'choice:yes|no|maybe'], vocab: llama2}\n");
  expect_all_ok(r, 6);
  EXPECT_GT(metric(r.rows[0], "dfa_states"), 100);
}

TEST(ConstrainKinds, MaskStepsAreAllowedAndTimed) {
  auto r =
      run_spec_text("  - {name: m, kind: constrain-mask, variants: [precomputed, lazy], constraint: extraction, documents: 3}\n");
  expect_all_ok(r, 2);
  EXPECT_GT(metric(r.rows[0], "steps_per_run"), 3);
  EXPECT_GT(metric(r.rows[0], "step_p99"), 0);
}

// The grammar path's variants: a recursive schema is rules (not max_recursion copies), its masks
// exact on random documents' positions, every step of random documents allowed.
TEST(ConstrainKinds, GrammarVariantsCompileAndMaskSchemas) {
  auto c = run_spec_text("  - {name: c, kind: constrain-compile, variants: [grammar], constraint: [tool_call, tree]}\n");
  expect_all_ok(c, 2);
  EXPECT_GE(metric(c.rows[1], "rules"), 2);
  EXPECT_GT(metric(c.rows[1], "first_mask"), 0);
  auto m = run_spec_text("  - {name: m, kind: constrain-mask, variants: [grammar], constraint: tree, documents: 3}\n");
  expect_all_ok(m, 1);
  EXPECT_GT(metric(m.rows[0], "steps_per_run"), 3);
  EXPECT_GT(metric(m.rows[0], "masks_built"), 2);
}

TEST(ConstrainKinds, ConstrainedOutputIsAlwaysValidUnconstrainedIsNot) {
  auto r = run_spec_text(
      "  - {name: v, kind: constrain-validity, variants: [unconstrained_retry, constrained],"
      " constraint: tool_call, epsilon: 0.2, retries: 1, documents: 20}\n");
  expect_all_ok(r, 2);
  EXPECT_LT(metric(r.rows[0], "valid"), 60);  // 20% errors per token: few documents survive
  EXPECT_EQ(metric(r.rows[1], "valid"), 100);
}

TEST(ConstrainKinds, JumpForwardSavesCallsOnTheSameDocuments) {
  auto r = run_spec_text(
      "  - {name: j, kind: constrain-jump-forward, variants: [no_jump, jump_forward], constraint: tool_union, documents: 5}\n");
  expect_all_ok(r, 2);
  EXPECT_LT(metric(r.rows[1], "model_calls_per_doc"), metric(r.rows[0], "model_calls_per_doc"));
  EXPECT_GT(metric(r.rows[1], "calls_saved"), 10);
}

TEST(ConstrainKinds, CpuOverheadPicksTheMaskedArgmax) {
  auto r = run_spec_text(
      "  - {name: o, kind: constrain-overhead, variants: [cpu_lm_head_argmax, cpu_lm_head_masked_argmax],"
      " baseline: cpu_lm_head_argmax, model: tiny, mask_density: 0.01}\n");
  expect_all_ok(r, 2);
}

// Supported keywords pass their case; a refused keyword is an `unsupported` row whose note is
// the compiler's error, naming the keyword and the JSON pointer.
TEST(ConstrainKinds, KeywordRowsCheckCasesAndShowRefusals) {
  auto r = run_spec_text(
      "  - {name: k, kind: constrain-keywords, variants: [dfa], walks: 30,"
      " keyword: [additionalProperties-schema, $ref-recursive, regex, unevaluatedProperties, pattern-product-too-large]}\n");
  ASSERT_EQ(r.rows.size(), 5u);
  for (size_t i = 0; i < 3; ++i) {
    const Row& row = r.rows[i];
    ASSERT_EQ(row.status, RowStatus::Ok) << row.point.label() << ": " << row.message;
    ASSERT_TRUE(row.validation && row.validation->ok);
    EXPECT_EQ(metric(row, "valid_accepted"), metric(row, "valid_docs"));
    EXPECT_EQ(metric(row, "invalid_rejected"), metric(row, "invalid_docs"));
    EXPECT_EQ(metric(row, "walks_valid"), 30);
    EXPECT_GT(metric(row, "dfa_states"), 3);
  }
  EXPECT_GT(metric(r.rows[0], "by_design_rejected"), 0);
  EXPECT_EQ(r.rows[3].status, RowStatus::Unsupported);
  EXPECT_EQ(r.rows[3].message, "error: schema /unevaluatedProperties: unsupported keyword 'unevaluatedProperties'");
  EXPECT_EQ(r.rows[4].status, RowStatus::Unsupported);
  EXPECT_NE(r.rows[4].message.find("/properties/code"), std::string::npos) << r.rows[4].message;
  EXPECT_NE(r.rows[4].message.find("pattern"), std::string::npos) << r.rows[4].message;
}

// The specs run every case of the table, and nothing else.
// constrain.yaml lists every case; chapter8.yaml (whose rows must all be ok) the supported ones.
TEST(ConstrainKinds, KeywordExperimentListsEveryCase) {
  std::vector<std::string> supported;
  for (const auto& c : constrain::keyword_cases()) supported.push_back(c.name);
  for (const char* file : {"constrain.yaml", "chapter8.yaml"}) {
    Spec spec = load_spec(std::string(IB_SOURCE_DIR) + "/experiments/" + file, SpecOptions{});
    const ExperimentSpec* e = nullptr;
    for (const auto& x : spec.experiments)
      if (x.kind == "constrain-keywords") e = &x;
    ASSERT_NE(e, nullptr) << file;
    std::vector<std::string> listed;
    for (const auto& a : e->axes)
      if (a.key == "keyword")
        for (const auto& v : a.values) listed.push_back(std::get<std::string>(v));
    EXPECT_EQ(listed, std::string(file) == "chapter8.yaml" ? supported : constrain::keyword_case_names()) << file;
  }
}

// An unknown schema is bad input found with the spec (exit 2 at its line), not a FAILED row.
TEST(ConstrainKinds, UnknownSchemaIsASpecErrorNamingIt) {
  try {
    run_spec_text("  - {name: x, kind: constrain-compile, variants: [lazy], constraint: no_such_schema}\n");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("t.yaml:3:", 0), 0u) << what;
    EXPECT_NE(what.find("experiments[0].constraint: 'no_such_schema' is no schema file, nor a bundled schema (calendar_event"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace ib

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/validator.h"

namespace ib::constrain {
namespace {

// Regression: a deviation that happened to repeat the previous target token left a stale
// target, and the emitter walked out of the language (found by constrain.yaml, order, 5%).
TEST(Emitter, ConstrainedStaysValidAfterDeviationsThatRepeatATargetToken) {
  auto c = compile_constraint("order", constraint_source("order"), SchemaOptions{});
  auto v = load_vocabulary("gpt2");
  LazyTokenMasker masker(c.dfa, v);
  SchemaValidator validator(*c.schema);
  std::mt19937_64 rng(20260101ull + 1000003ull * 6);
  EmitterStats st =
      emit_constrained(*c.dfa, distance_to_accept(*c.dfa), *v, *vocab_trie(v), masker, 0.05, 50, rng, [&](const std::string& t) {
        auto d = ib::parse_json_or_discarded<nlohmann::ordered_json>(t);
        return !d.is_discarded() && validator.valid(d);
      });
  EXPECT_EQ(st.valid, 50);
}

}  // namespace
}  // namespace ib::constrain
