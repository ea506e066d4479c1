// The grammar path under a token budget (grammar_budget.h): the budget's mask is exactly the
// tokens whose position is within reach of a finished document (stepping every token), the
// masker's reach bounds every allowed token's, and documents drawn under random logits always
// end valid within max_tokens, the tightest budget included.
#include <random>

#include <gtest/gtest.h>

#include "constrain/engine_generate.h"
#include "constrain/grammar_budget.h"
#include "constrain/json_schema.h"
#include "constrain/validator.h"
#include "constrain/vocab.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> budget_grammar(const std::string& schema) {
  SchemaOptions o;
  o.strict_properties = false;  // the JSON Schema meaning: free values where keys are undeclared
  return schema_to_grammar(ib::parse_json<json>(schema), o).grammar;
}

// A recursive schema with free values (any JSON at any depth) and a long required key.
const char* kTree =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"kids":{"type":"array","items":{"$ref":"#"}},)"
    R"("meta":{"type":"object"},"a_rather_long_required_key":{"type":"boolean"}},)"
    R"("required":["name","a_rather_long_required_key"],"additionalProperties":false})";

TEST(GrammarBudget, MaskIsExactlyTheTokensWithinTheBudgetAndReachBoundsThem) {
  auto vocab = load_vocabulary("gpt2");
  auto g = budget_grammar(kTree);
  GrammarBudgetMasker budget(g, vocab);
  ASSERT_EQ(budget.guarantee_problem(), "");
  const std::string doc = R"({"name":"ab","kids":[{"name":"c","a_rather_long_required_key":true}],"meta":{"x":[1,{"y":null}]},)"
                          R"("a_rather_long_required_key":false})";
  ASSERT_TRUE(grammar_matches(*g, doc));
  const GrammarDistances& d = budget.distances();
  GrammarStacks at = grammar_start(*g);
  int checked = 0, filtered = 0;
  for (size_t i = 0; i <= doc.size(); ++i) {
    if (i % 7 == 0 || i == doc.size()) {
      std::vector<int32_t> after(static_cast<size_t>(vocab->size()), -1);  // the distance after each token; -1 not allowed
      int32_t largest = 0;
      for (int32_t t = 0; t < vocab->size(); ++t) {
        if (t == vocab->eos) continue;
        const GrammarStacks next = grammar_advance(*g, *vocab, at, t);
        if (next.empty()) continue;
        after[static_cast<size_t>(t)] = d.finish(next);
        largest = std::max(largest, after[static_cast<size_t>(t)]);
      }
      int32_t reach = 0;
      budget.masker().mask(at, &reach);
      EXPECT_GE(reach, largest) << "the reach at byte " << i << " is below an allowed token's distance";
      const int32_t here = d.finish(at);
      for (int left : {here + 1, here + 2, here + 5, largest + 2}) {
        const uint32_t* m = budget.mask(at, left);
        for (int32_t t = 0; t < vocab->size(); ++t) {
          const bool allowed = t == vocab->eos ? grammar_accepts(*g, at)
                                               : after[static_cast<size_t>(t)] >= 0 && after[static_cast<size_t>(t)] <= left - 2;
          ASSERT_EQ(mask_allows(m, t), allowed)
              << "byte " << i << " left " << left << " token " << t << " '" << vocab->token_bytes[static_cast<size_t>(t)] << "'";
        }
        ++checked;
      }
    }
    if (i < doc.size()) {
      ASSERT_TRUE(grammar_walk(*g, at, doc.substr(i, 1)));
    }
  }
  filtered = static_cast<int>(budget.filtered_steps());
  EXPECT_GT(checked, 40);
  EXPECT_GT(filtered, 10);       // the tight budgets were filtered
  EXPECT_LT(filtered, checked);  // and the loose ones were not
}

// Draws a document under the budget from random logits; returns its text, or fails.
struct Drawn {
  std::string text;
  int tokens = 0;
  bool ended = false;
};
Drawn draw_document(GrammarBudgetMasker& budget, const Vocabulary& vocab, int max_tokens, std::mt19937_64& rng) {
  Drawn out;
  const Grammar& g = budget.grammar();
  GrammarStacks at = grammar_start(g);
  std::vector<float> logits(static_cast<size_t>(vocab.size()));
  std::vector<double> scratch;
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int left = max_tokens; left > 0; --left) {
    for (auto& l : logits) l = noise(rng);
    const int32_t t = sample_masked(logits.data(), vocab.size(), budget.mask(at, left), 1.0f, unit(rng), scratch);
    if (t < 0) return out;  // nothing allowed: the guarantee broke
    ++out.tokens;
    if (t == vocab.eos) {
      out.ended = true;
      return out;
    }
    at = grammar_advance(g, vocab, at, t);
    if (at.empty()) return out;
    out.text += vocab.token_bytes[static_cast<size_t>(t)];
    if (grammar_complete(g, at)) {
      out.ended = true;
      return out;
    }
  }
  return out;
}

TEST(GrammarBudget, RandomDocumentsEndValidWithinMaxTokens) {
  auto vocab = load_vocabulary("gpt2");
  std::mt19937_64 rng(17);
  for (const char* schema : {kTree, R"({"type":"object"})", R"({"type":"array","items":{"type":"array"},"minItems":2})"}) {
    auto g = budget_grammar(schema);
    const json parsed_schema = ib::parse_json<json>(schema);
    const SchemaValidator validator(parsed_schema);
    GrammarBudgetMasker budget(g, vocab);
    ASSERT_EQ(budget.guarantee_problem(), "");
    for (int extra : {0, 3, 30}) {
      const int max_tokens = budget.min_tokens() + extra;
      for (int i = 0; i < 4; ++i) {
        const Drawn doc = draw_document(budget, *vocab, max_tokens, rng);
        SCOPED_TRACE(std::string(schema) + " max_tokens " + std::to_string(max_tokens) + ": '" + doc.text + "'");
        ASSERT_TRUE(doc.ended);
        EXPECT_LE(doc.tokens, max_tokens);
        const json parsed = ib::parse_json_or_discarded<json>(doc.text);
        ASSERT_FALSE(parsed.is_discarded());
        EXPECT_TRUE(validator.valid(parsed));
      }
    }
  }
}

TEST(GrammarBudget, MinTokensAndAnEmptyLanguage) {
  auto vocab = load_vocabulary("gpt2");
  GrammarBudgetMasker obj(budget_grammar(R"({"type":"object","required":["ab"]})"), vocab);
  EXPECT_EQ(obj.min_tokens(), static_cast<int32_t>(std::string(R"({"ab":0})").size()) + 1);
  GrammarBudgetMasker none(budget_grammar(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"), vocab);
  EXPECT_NE(none.guarantee_problem().find("empty"), std::string::npos) << none.guarantee_problem();
  // Complete: the closing brace of the top object; not complete where a number could go on.
  auto g = budget_grammar(R"({"type":"array","items":{"type":"integer"}})");
  GrammarStacks at = grammar_start(*g);
  ASSERT_TRUE(grammar_walk(*g, at, "[1,2"));
  EXPECT_FALSE(grammar_complete(*g, at));
  ASSERT_TRUE(grammar_walk(*g, at, "]"));
  EXPECT_TRUE(grammar_complete(*g, at));
}

}  // namespace
}  // namespace ib::constrain

namespace ib::constrain {
namespace {

// A vocabulary without single-byte tokens for some bytes (SmolLM2's has none for most control
// bytes): the grammar's budget counts only the bytes it can spell one token each, so documents
// still end valid within the tightest budget; a schema every document of which needs a missing
// byte is refused by name.
TEST(GrammarBudget, HoldsWithSingleByteTokensMissing) {
  auto without = [](const std::string& bytes) {
    auto v = std::make_shared<Vocabulary>(*load_vocabulary("gpt2"));
    for (int32_t t = 0; t < v->size(); ++t) {
      const std::string& b = v->token_bytes[static_cast<size_t>(t)];
      if (b.size() == 1 && bytes.find(b[0]) != std::string::npos) v->special[static_cast<size_t>(t)] = 1;
    }
    return std::shared_ptr<const Vocabulary>(v);
  };
  const std::string schema = R"({"type":"object","properties":{"w":{"type":"string","pattern":"^[a-z]{2,6}$"},)"
                             R"("kids":{"type":"array","items":{"$ref":"#"}}},"required":["w"],"additionalProperties":false})";
  const json parsed_schema = ib::parse_json<json>(schema);
  const SchemaValidator validator(parsed_schema);
  auto g = budget_grammar(schema);
  GrammarBudgetMasker full(g, load_vocabulary("gpt2"));
  GrammarBudgetMasker some(g, without("qxz"));  // letters no shortest document needs
  ASSERT_EQ(some.guarantee_problem(), "");
  EXPECT_EQ(some.min_tokens(), full.min_tokens());
  std::mt19937_64 rng(23);
  auto v = without("qxz");
  GrammarBudgetMasker budget(g, v);
  for (int i = 0; i < 6; ++i) {
    const Drawn doc = draw_document(budget, *v, budget.min_tokens() + (i % 2) * 20, rng);
    SCOPED_TRACE(doc.text);
    ASSERT_TRUE(doc.ended);
    const json parsed = ib::parse_json_or_discarded<json>(doc.text);
    ASSERT_FALSE(parsed.is_discarded());
    EXPECT_TRUE(validator.valid(parsed));
  }
  GrammarBudgetMasker no_quote(g, without("\""));  // every document spells a key
  EXPECT_NE(no_quote.guarantee_problem().find("lacks single-byte tokens"), std::string::npos) << no_quote.guarantee_problem();
}

}  // namespace
}  // namespace ib::constrain
