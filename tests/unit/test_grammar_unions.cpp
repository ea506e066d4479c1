// Union rules (constrain/grammar_unions.h): an alternative of calls of container rules becomes one
// rule whose DFA carries their shared prefix in one stack; the language is unchanged (the
// validator on every document, in some key order), masks still allow exactly the tokens that step
// through the grammar, and a union whose DFA is past its state limit is compiled as its calls.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "constrain/constraint.h"
#include "constrain/grammar.h"
#include "constrain/grammar_mask.h"
#include "constrain/json_schema.h"
#include "constrain/validator.h"
#include "constrain/vocab.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;

// Three closed objects told apart by "kind" but for the third, which overlaps the first; "x" is a
// nested object, "tags" an array: values that are rules of their own.
constexpr const char* kThreeObjects =
    R"({"anyOf":[)"
    R"({"type":"object","additionalProperties":false,"required":["kind"],"properties":{"kind":{"const":"a"},)"
    R"("x":{"type":"object","properties":{"v":{"type":"integer"}},"additionalProperties":false},)"
    R"("tags":{"type":"array","items":{"type":"string","maxLength":3}}}},)"
    R"({"type":"object","additionalProperties":false,"required":["kind","y"],"properties":{"kind":{"const":"b"},)"
    R"("y":{"type":"array","items":{"type":"integer"},"maxItems":2}}},)"
    R"({"type":"object","additionalProperties":false,"properties":{"kind":{"enum":["a","c"]},)"
    R"("x":{"type":"object","properties":{"w":{"type":"boolean"}},"additionalProperties":false}}})"
    R"(]})";

size_t largest_union(const Grammar& g) {
  size_t most = 0;
  for (size_t i = 0; i < g.size(); ++i) most = std::max(most, g.members(static_cast<int32_t>(i)).size());
  return most;
}

// Whether the grammar takes the document in some order of its top-level keys (the compiler writes
// properties in the schema's order; the validator takes any).
bool matches_in_some_order(const Grammar& g, const json& doc) {
  std::vector<std::string> keys;
  if (doc.is_object())
    for (const auto& [k, v] : doc.items()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  do {
    json d = doc;
    if (d.is_object()) {
      d = json::object();
      for (const auto& k : keys) d[k] = doc[k];
    }
    if (grammar_matches(g, d.dump())) return true;
  } while (std::next_permutation(keys.begin(), keys.end()));
  return false;
}

TEST(GrammarUnions, ObjectsOfAnAnyOfShareOneStackAndKeepTheValidatorsLanguage) {
  const json schema = ib::parse_json<json>(kThreeObjects);
  SchemaOptions o;
  o.strict_properties = false;
  const SchemaGrammar sg = schema_to_grammar(schema, o);
  const Grammar& g = *sg.grammar;
  EXPECT_EQ(largest_union(g), 3u);
  // The three objects' common prefix is one stack (it was three: one call each).
  GrammarStacks at = grammar_start(g);
  ASSERT_TRUE(grammar_walk(g, at, R"({"kind":")"));
  EXPECT_EQ(at.size(), 1u);

  // Random documents from the three objects' keys and values (and some that fit none).
  const SchemaValidator validator(schema);
  std::mt19937_64 rng(7);
  const std::vector<json> kinds = {"a", "b", "c", "d", 1};
  const std::vector<json> xs = {json::object(), {{"v", 3}}, {{"w", true}}, {{"v", 1}, {"w", false}}, {{"v", "s"}}, 2};
  const std::vector<json> tags = {json::array(), {"ab"}, {"abcd"}, {1}};
  const std::vector<json> ys = {json::array(), {1, 2}, {1, 2, 3}, {"z"}};
  int valid = 0, checked = 0;
  for (int n = 0; n < 1500; ++n) {
    json d = json::object();
    if (rng() % 5) d["kind"] = kinds[rng() % kinds.size()];
    if (rng() % 2) d["x"] = xs[rng() % xs.size()];
    if (rng() % 3 == 0) d["tags"] = tags[rng() % tags.size()];
    if (rng() % 3 == 0) d["y"] = ys[rng() % ys.size()];
    if (rng() % 17 == 0) d["other"] = true;
    const bool expected = validator.valid(d);
    ASSERT_EQ(matches_in_some_order(g, d), expected) << d.dump();
    valid += expected;
    ++checked;
  }
  EXPECT_GT(valid, 100);
  EXPECT_GT(checked - valid, 100);

  // Masks over GPT-2 at every third byte of a document that stays in the union to its end.
  auto vocab = load_vocabulary("gpt2");
  auto shared = std::make_shared<const Grammar>(g);
  GrammarTokenMasker masker(shared, vocab);
  const std::string doc = R"({"kind":"a","x":{"v":12},"tags":["ab","c"]})";
  ASSERT_TRUE(grammar_matches(*shared, doc));
  at = grammar_start(*shared);
  int positions = 0;
  for (size_t i = 0; i <= doc.size(); ++i) {
    if (i % 3 == 0 || i == doc.size()) {
      const uint32_t* m = masker.mask(at);
      for (int32_t t = 0; t < vocab->size(); ++t) {
        const bool allowed = t == vocab->eos ? grammar_accepts(*shared, at) : !grammar_advance(*shared, *vocab, at, t).empty();
        ASSERT_EQ(mask_allows(m, t), allowed)
            << "at byte " << i << " token '" << vocab->token_bytes[static_cast<size_t>(t)] << "'";
      }
      ++positions;
    }
    if (i < doc.size()) {
      ASSERT_TRUE(grammar_walk(*shared, at, doc.substr(i, 1)));
    }
  }
  EXPECT_GT(positions, 10);
}

TEST(GrammarUnions, SplitsOfSplitsAreFlattenedIntoOneUnion) {
  // dependentSchemas splits the object on c's presence, if/else splits each case again, and the
  // negation of if is a union of its own: rules that only forward to other rules. Their leaves,
  // the object rules, are one union: one stack from the first byte.
  const json schema = ib::parse_json<json>(
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"array","items":{"type":"object"}}},)"
      R"("if":{"required":["a"]},"then":{"required":["b"]},"else":{"properties":{"b":{"const":1}}},)"
      R"("dependentSchemas":{"c":{"required":["a"]}}})");
  SchemaOptions o;
  o.strict_properties = false;
  const SchemaGrammar sg = schema_to_grammar(schema, o);
  const Grammar& g = *sg.grammar;
  EXPECT_GE(largest_union(g), 3u);
  const std::string doc = R"({"a":"x","b":2,"c":[{"k":[1,{"z":null}]}],"d":{"e":[]}})";
  ASSERT_TRUE(grammar_matches(g, doc));
  // Between members one stack (each leaf rule was one of its own: 4 or more); at a value, the
  // container's own stack beside the value's call.
  GrammarStacks at = grammar_start(g);
  size_t most = 0;
  for (size_t i = 0; i < doc.size(); ++i) {
    ASSERT_TRUE(grammar_walk(g, at, doc.substr(i, 1)));
    most = std::max(most, at.size());
    if (doc.compare(0, i + 1, R"({"a":"x","b":2,)") == 0) {
      EXPECT_EQ(at.size(), 1u);
    }
  }
  EXPECT_LE(most, 2u);
  const SchemaValidator validator(schema);
  std::mt19937_64 rng(5);
  const std::vector<json> as = {"x", 1}, bs = {1, 2, "s"}, cs = {json::array(), json::array({json::object()}), 3};
  int valid = 0;
  for (int n = 0; n < 600; ++n) {
    json d = json::object();
    if (rng() % 2) d["a"] = as[rng() % as.size()];
    if (rng() % 2) d["b"] = bs[rng() % bs.size()];
    if (rng() % 2) d["c"] = cs[rng() % cs.size()];
    if (rng() % 5 == 0) d["d"] = json::object();
    const bool expected = validator.valid(d);
    ASSERT_EQ(matches_in_some_order(g, d), expected) << d.dump();
    valid += expected;
  }
  EXPECT_GT(valid, 100);
  EXPECT_LT(valid, 500);
}

TEST(GrammarUnions, AUnionPastItsStateLimitIsCompiledAsItsCalls) {
  // Rule 1 remembers its 15th byte from the end: 2^15 DFA states alone, past kMaxUnionStates in
  // any union. Rule 2 is '{' a* '}'. Rule 0 calls either.
  Re ab = re_bytes(ByteSet().set('a').set('b'));
  Re counted = re_concat({re_byte('{'), re_star(ab), re_byte('a'), re_repeat(ab, 14, 14), re_byte('}')});
  Re plain = re_concat({re_byte('{'), re_star(re_byte('a')), re_byte('}')});
  const Grammar g = build_grammar({re_alt({re_call(1), re_call(2)}), counted, plain}, {}, 0);
  ASSERT_EQ(g.size(), 4u);  // the union rule appended
  EXPECT_EQ(g.members(3), (std::vector<int32_t>{1, 2}));
  GrammarStacks at = grammar_start(g);
  ASSERT_TRUE(grammar_walk(g, at, "{"));
  EXPECT_EQ(at.size(), 2u);  // the calls apart: the union's DFA was not built
  // The language is the two rules' union.
  std::mt19937_64 rng(11);
  for (int n = 0; n < 400; ++n) {
    std::string body;
    const size_t len = rng() % 20;
    for (size_t i = 0; i < len; ++i) body += rng() % 3 ? 'a' : 'b';
    const std::string s = "{" + body + "}";
    const bool in_plain = body.find('b') == std::string::npos;
    const bool in_counted = body.size() >= 15 && body[body.size() - 15] == 'a';
    EXPECT_EQ(grammar_matches(g, s), in_plain || in_counted) << s;
  }
  // Under the limit the same shape is one rule: '{' a* '}' or '{' b* '}'.
  const Grammar small = build_grammar(
      {re_alt({re_call(1), re_call(2)}), re_concat({re_byte('{'), re_star(re_byte('b')), re_byte('}')}), plain}, {}, 0);
  GrammarStacks one = grammar_start(small);
  ASSERT_TRUE(grammar_walk(small, one, "{"));
  EXPECT_EQ(one.size(), 1u);
  EXPECT_TRUE(grammar_matches(small, "{}"));
  EXPECT_TRUE(grammar_matches(small, "{bb}"));
  EXPECT_FALSE(grammar_matches(small, "{ab}"));
}

}  // namespace
}  // namespace ib::constrain
