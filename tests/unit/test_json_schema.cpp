// JSON Schema -> DFA: per-keyword accept/reject tables, refusals with pointers, random walks
// checked by an independent validator, and the JSON-Schema-Test-Suite (soundness/completeness).

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <type_traits>

#include <gtest/gtest.h>

#include "../common/json_schema_suite.h"
#include "constrain/automaton.h"
#include "constrain/generate.h"
#include "constrain/json_schema.h"
#include "constrain/keyword_cases.h"
#include "constrain/validator.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;

Dfa compile(const std::string& schema, SchemaOptions o = {}) {
  return compile_dfa(schema_to_regex(ib::parse_json<json>(schema), o));
}

struct TableCase {
  const char* schema;
  std::vector<std::string> valid, invalid;  // compact documents
};

TEST(JsonSchema, KeywordTable) {
  const std::vector<TableCase> cases = {
      {R"({"type":"null"})", {"null"}, {"nul", "0", "\"null\""}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1"}},
      {R"({"type":"integer"})", {"0", "-7", "1234567890123"}, {"01", "-0", "1.5", "+1", "1e3"}},
      {R"({"type":"number"})", {"0", "-0.5", "3.25e-7", "1E+9", "-0"}, {".5", "1.", "01", "1e", "NaN"}},
      {R"({"type":"string"})",
       {"\"\"", "\"a b\"", "\"\\\"\\\\\\n\\u00e9\"", "\"\xc3\xa9\xe2\x82\xac\""},
       {"\"a", "\"\\x\"", "\"\\ud800\"", "\"\x01\"", "'a'", "\"\xc3\""}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {"\"ab\"", "\"\\n\\t\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\""},
       {"\"a\"", "\"abcd\""}},
      {R"({"type":"string","pattern":"^[a-z]+[0-9]?$"})", {"\"abc\"", "\"ab7\""}, {"\"\"", "\"7\"", "\"ab77\""}},
      {R"({"type":"string","pattern":"ab"})", {"\"ab\"", "\"xxabyy\""}, {"\"a b\""}},
      {R"({"type":"string","format":"date"})", {"\"2026-11-30\""}, {"\"2026-13-01\"", "\"2026-1-01\""}},
      {R"({"type":"string","format":"date-time"})",
       {"\"2026-11-30T12:30:00Z\"", "\"2026-11-30t23:59:59.5+05:30\""},
       {"\"2026-11-30 12:30:00Z\"", "\"2026-11-30T24:00:00Z\""}},
      {R"({"type":"string","format":"uuid"})",
       {"\"123e4567-e89b-12d3-a456-426614174000\""},
       {"\"123e4567e89b12d3a456426614174000\""}},
      {R"({"type":"string","format":"email"})", {"\"a.b+c@example.co.uk\""}, {"\"@example.com\"", "\"a@b\""}},
      {R"({"type":"integer","minimum":-15,"maximum":123})", {"-15", "-1", "0", "9", "99", "123"}, {"-16", "124", "1000", "-100"}},
      {R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", {"1", "9"}, {"0", "10"}},
      {R"({"type":"integer","minimum":1000})", {"1000", "99999999"}, {"999", "0", "-1000"}},
      {R"({"type":"integer","maximum":-5})", {"-5", "-123456"}, {"-4", "0", "5"}},
      {R"({"type":"number","minimum":0})", {"0", "2.5", "0.001"}, {"-1", "-0.5", "2e3"}},
      {R"({"type":"number","minimum":-2,"exclusiveMaximum":3})",
       {"-2", "-1.5", "0", "2.999", "-0.25"},
       {"-2.5", "3", "3.0", "7", "-3"}},
      {R"({"type":"number","exclusiveMinimum":1,"maximum":2})", {"1.5", "2", "2.00"}, {"1", "1.0", "2.1"}},
      {R"({"type":"number","maximum":-1})", {"-1", "-1.0", "-7.5"}, {"-0.5", "0", "1"}},
      {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]})",
       {"{\"a\":1,\"b\":\"x\"}"},
       {"{\"a\":1}", "{\"b\":\"x\"}"}},
      {R"({"allOf":[{"type":["integer","string"]},{"type":"integer","minimum":3}]})", {"3", "10"}, {"\"s\"", "2"}},
      {R"({"type":"integer","anyOf":[{"maximum":2},{"minimum":10}]})", {"1", "11"}, {"5", "\"a\""}},
      {R"({"$defs":{"p":{"type":"integer"}},"$ref":"#/$defs/p","maximum":5})", {"5", "-1"}, {"6", "1.5"}},
      {R"({"type":"object","required":["q"]})", {"{\"q\":[1]}"}, {"{}"}},
      {R"({"enum":["a",1,null,{"k":[true]}]})", {"\"a\"", "1", "null", "{\"k\":[true]}"}, {"\"b\"", "2", "{\"k\":[]}"}},
      {R"({"const":"x"})", {"\"x\""}, {"\"y\""}},
      {R"({"type":["string","null"]})", {"\"s\"", "null"}, {"1"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"boolean"}]})", {"3", "true"}, {"\"3\""}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]})",
       {"{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\"}"},
       {"{}", "{\"a\":1}", "{\"b\":\"x\",\"a\":1}", "{\"b\":\"x\",\"c\":1}", "{,\"b\":\"x\"}"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
       {"{}", "{\"a\":1}", "{\"a\":1,\"zz\":true}", "{\"q\":false,\"r\":true}"},
       {"{\"q\":1}"}},
      {R"({"type":"object","properties":{"x":{},"y":{},"z":{}}})",
       {"{}", "{\"y\":1}", "{\"x\":1,\"z\":2}", "{\"x\":1,\"y\":2,\"z\":3}"},
       {"{\"x\":1,}", "{\"y\":1\"z\":2}"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]"},
       {"[]", "[1,2,3,4]", "[1,]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {"[]", "[\"a\"]", "[\"a\",1]"},
       {"[1]", "[\"a\",1,2]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},"minItems":2})",
       {"[\"a\",1]", "[\"a\",1,2,3]"},
       {"[\"a\"]", "[1,2]"}},
      {R"({"$defs":{"p":{"type":"integer","minimum":0}},"type":"array","items":{"$ref":"#/$defs/p"}})",
       {"[]", "[0,5]"},
       {"[-1]"}},
      {R"(true)", {"1", "\"s\"", "[1,{\"a\":null}]", "{}"}, {"", "[1,"}},
      {R"(false)", {}, {"1", "null"}},
      {R"({"type":"object","properties":{"n":{"type":"integer"}},"nullable":true})", {"null", "{\"n\":1}"}, {"1"}},
  };
  for (const auto& c : cases) {
    Dfa d = compile(c.schema);
    for (const auto& v : c.valid) EXPECT_TRUE(d.matches(v)) << c.schema << " should accept " << v;
    for (const auto& v : c.invalid) EXPECT_FALSE(d.matches(v)) << c.schema << " should reject " << v;
  }
}

TEST(JsonSchema, FlexibleWhitespace) {
  SchemaOptions o;
  o.whitespace = SchemaOptions::Whitespace::Flexible;
  Dfa d = compile(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})", o);
  EXPECT_TRUE(d.matches("{ \"a\" : [ 1, 2 ] }"));
  EXPECT_TRUE(d.matches("{\n \"a\": [1,2]\n}"));
  EXPECT_FALSE(d.matches("{ \"a\"   : [1] }"));                 // more than max_whitespace
  EXPECT_FALSE(compile(R"({"type":"array"})").matches("[ ]"));  // compact by default
}

TEST(JsonSchema, RefusalsNameKeywordAndPointer) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {R"({"type":"object","patternProperties":{"^x":{},"y":{}}})", "patternProperties", "/patternProperties"},
      {R"({"properties":{"o":{"patternProperties":{"(":{}}}}})", "patternProperties", "/properties/o/patternProperties/("},
      {R"({"properties":{"a":{"type":"object","unevaluatedProperties":false}}})", "unevaluatedProperties",
       "/properties/a/unevaluatedProperties"},
      {R"({"type":"array","uniqueItems":true})", "uniqueItems", "/uniqueItems"},
      {R"({"type":"number","maximum":3.5})", "maximum", "/maximum"},
      // #48: past the 64-bit integers on the side that leaves no 18-digit integer (was clamped to
      // the 64-bit limit: unsound, and a compile to the automaton cap).
      {R"({"type":"integer","exclusiveMaximum":-1e300})", "exclusiveMaximum", "/exclusiveMaximum"},
      {R"({"type":"integer","minimum":1e300})", "minimum", "/minimum"},
      {R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})", "pattern", "/pattern"},
      {R"({"items":{"$ref":"#nowhere"}})", "$ref", "/items/$ref"},
      {R"js({"type":"string","pattern":"(?=x)"})js", "pattern", "/pattern"},
      {R"({"$ref":"http://example.com/s.json"})", "$ref", "/$ref"},
      {R"({"$ref":"#/$defs/missing"})", "$ref", "/$ref"},
      {R"({"type":"object","required":["x"],"additionalProperties":false})", "required", "/required"},
      {R"({"type":"integer","minimum":5,"maximum":1})", "minimum", ""},
      {R"({"type":"number","exclusiveMinimum":1,"maximum":1})", "minimum", ""},
      {R"({"allOf":[{"patternProperties":{"^a":{}}}],"additionalProperties":false})", "additionalProperties", ""},
      {R"({"type":"object","properties":{"a~b/c":{"unevaluatedItems":{}}}})", "unevaluatedItems",
       "/properties/a~0b~1c/unevaluatedItems"},
      {R"({"type":"strin"})", "type", "/type"},
      // #48: bounds past any int (the cast came out negative: the bound was dropped) and an empty
      // type list (read as any type): documents that do not validate were served.
      {R"({"type":"string","minLength":1e300})", "minLength", "/minLength"},
      {R"({"type":"array","minItems":1e300})", "minItems", "/minItems"},
      {R"({"type":"object","minProperties":1e300})", "minProperties", "/minProperties"},
      {R"({"type":"array","contains":{"type":"integer"},"minContains":1e300})", "minContains", "/minContains"},
      {R"({"type":[]})", "type", "/type"},
  };
  for (const auto& [schema, keyword, pointer] : cases) {
    try {
      schema_to_regex(ib::parse_json<json>(schema));
      ADD_FAILURE() << schema << " compiled";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword(), keyword) << schema << ": " << e.what();
      EXPECT_EQ(e.pointer(), pointer) << schema << ": " << e.what();
    }
  }
}

TEST(JsonSchema, RecursionIsBounded) {
  const char* tree =
      R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}}})";
  SchemaOptions o;
  o.max_recursion = 2;
  Dfa d = compile(tree, o);
  EXPECT_TRUE(d.matches("{\"c\":[{\"c\":[{}]}]}"));
  EXPECT_FALSE(d.matches("{\"c\":[{\"c\":[{\"c\":[{\"c\":[{}]}]}]}]}"));
}

// Bytes to the nearest accepting state, per state.
std::vector<int> distances(const Dfa& d) {
  std::vector<int> dist(static_cast<size_t>(d.num_states), 1 << 30);
  for (bool changed = true; changed;) {
    changed = false;
    for (int s = 0; s < d.num_states; ++s) {
      int best = d.accepting[static_cast<size_t>(s)] ? 0 : 1 << 30;
      for (int b = 0; b < 256; ++b) {
        int t = d.step(s, static_cast<uint8_t>(b));
        if (t >= 0) best = std::min(best, dist[static_cast<size_t>(t)] + 1);
      }
      if (best < dist[static_cast<size_t>(s)]) {
        dist[static_cast<size_t>(s)] = best;
        changed = true;
      }
    }
  }
  return dist;
}

// Random walk: uniform over live bytes, steering to the nearest accepting state after `soft` bytes.
std::string random_walk(const Dfa& d, const std::vector<int>& dist, std::mt19937_64& rng, size_t soft = 120) {
  std::string out;
  int s = d.start;
  for (;;) {
    if (d.accepting[static_cast<size_t>(s)] && (out.size() > soft || rng() % 4 == 0)) return out;
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      int t = d.step(s, static_cast<uint8_t>(b));
      if (t < 0) continue;
      if (out.size() > soft && dist[static_cast<size_t>(t)] >= dist[static_cast<size_t>(s)]) continue;
      bytes.push_back(b);
    }
    if (bytes.empty()) return out;
    int b = bytes[rng() % bytes.size()];
    out += static_cast<char>(b);
    s = d.step(s, static_cast<uint8_t>(b));
  }
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(JsonSchema, RandomWalksOfBundledSchemasAreValidDocuments) {
  const std::string dir = std::string(IB_SOURCE_DIR) + "/experiments/schemas/";
  std::mt19937_64 rng(2026);
  for (const char* name : {"tool_call", "tool_union", "person", "order", "calendar_event", "tree", "extraction"}) {
    json schema = ib::parse_json<json>(read(dir + name + ".json"));
    Dfa d = compile_dfa(schema_to_regex(schema));
    const std::vector<int> dist = distances(d);
    SchemaValidator validator(schema);
    for (int i = 0; i < 200; ++i) {
      std::string doc = random_walk(d, dist, rng);
      json parsed;
      try {
        parsed = ib::parse_json<json>(doc);
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": walk is not JSON: " << doc << " (" << e.what() << ")";
        continue;
      }
      EXPECT_TRUE(validator.valid(parsed)) << name << ": walk violates the schema: " << doc;
    }
  }
}

// --- the per-keyword completeness table (keyword_cases.h; the constrain-keywords experiment) ---

// Every keyword of issue #6's list has a case, with valid and invalid documents.
TEST(KeywordCases, CoverTheIssuesKeywordList) {
  const std::vector<std::string> issue = {"type-null",
                                          "type-boolean",
                                          "type-integer",
                                          "type-number",
                                          "type-string",
                                          "type-object",
                                          "type-array",
                                          "properties",
                                          "required",
                                          "additionalProperties-false",
                                          "additionalProperties-true",
                                          "additionalProperties-schema",
                                          "items",
                                          "prefixItems",
                                          "minItems-maxItems",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "minLength-maxLength",
                                          "pattern",
                                          "minimum-maximum",
                                          "format-date",
                                          "format-date-time",
                                          "format-uuid",
                                          "format-email",
                                          "$ref-local",
                                          "$ref-recursive",
                                          "nullable-type-array",
                                          "whitespace-compact",
                                          "whitespace-flexible",
                                          "regex",
                                          "choice"};
  for (const auto& name : issue) {
    const KeywordCase* c = find_keyword_case(name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_FALSE(c->valid.empty()) << name;
    EXPECT_FALSE(c->invalid.empty()) << name;
  }
  std::set<std::string> names;
  for (const auto& n : keyword_case_names()) EXPECT_TRUE(names.insert(n).second) << "duplicate case " << n;
}

// The DFA accepts exactly the valid documents, rejects the by-design ones, and 300 random walks
// per keyword parse and satisfy the schema by the independent validator.
TEST(KeywordCases, DfaAcceptsExactlyTheValidDocumentsAndWalksAreValid) {
  uint64_t seed = 7;
  for (const auto& c : keyword_cases()) {
    KeywordReport r = check_keyword_case(c, 300, seed++);
    EXPECT_TRUE(r.ok()) << c.name << ": " << r.summary();
    EXPECT_EQ(r.walks_valid, 300) << c.name;
  }
}

TEST(KeywordCases, EveryUnsupportedKeywordGivesItsError) {
  for (const auto& c : refusal_cases()) {
    RefusalOutcome o = check_refusal(c);
    EXPECT_TRUE(o.ok) << c.name << ": " << o.message;
    EXPECT_NE(o.message.find(c.pointer), std::string::npos) << o.message;
  }
}

// The checks can fail: a mislabelled document, a DFA that accepts more than the schema, a
// by-design document the DFA accepts, a refusal that does not happen or names the wrong place.
TEST(KeywordCases, BrokenCasesFail) {
  KeywordCase mislabelled{"broken", R"({"type":"integer"})", {"1", "1.5"}, {"\"x\""}, {}};
  KeywordReport r = check_keyword_case(mislabelled, 20, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.valid_accepted, 1);
  EXPECT_EQ(r.mislabelled, 1);
  EXPECT_NE(r.summary().find("rejects valid `1.5`"), std::string::npos) << r.summary();

  // A language wider than the schema: walks find documents that violate it (oneOf's branches
  // compiled as their union, what the compiler did before the product construction).
  KeywordCase overlapping{"oneOf-as-anyOf",
                          R"({"oneOf":[{"type":"integer","minimum":0,"maximum":9},{"enum":[1,2,"a"]}]})",
                          {"0", "\"a\""},
                          {"10"},
                          {}};
  {
    const Dfa wide = compile_dfa(
        schema_to_regex(ib::parse_json<json>(R"({"anyOf":[{"type":"integer","minimum":0,"maximum":9},{"enum":[1,2,"a"]}]})")));
    const KeywordOracle oracle(overlapping.constraint);
    int bad = 0;
    for (const char* d : {"0", "1", "2", "5", "\"a\""}) bad += wide.matches(d) && !oracle.valid(d);
    EXPECT_EQ(bad, 2);
  }
  r = check_keyword_case(overlapping, 200, 2);
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_EQ(r.walks_valid, 200);

  KeywordCase stale{"stale", R"({"type":"integer"})", {"1"}, {"\"1\""}, {"2"}};
  r = check_keyword_case(stale, 5, 3);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.summary().find("the approximation is gone"), std::string::npos) << r.summary();

  EXPECT_FALSE(check_keyword_case({"bad", R"({"type":"strin"})", {"1"}, {}, {}}, 5, 4).ok());

  EXPECT_FALSE(check_refusal({"not-refused", R"({"type":"string"})", "type", "/type"}).ok);
  RefusalOutcome o = check_refusal(
      {"wrong-pointer", R"({"properties":{"a":{"unevaluatedItems":{}}}})", "unevaluatedItems", "/unevaluatedItems"});
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.message.find("/properties/a/unevaluatedItems"), std::string::npos) << o.message;
}

// Oracle fixes the table found: enum / const compare objects as unordered maps.
TEST(SchemaValidator, EnumAndConstCompareObjectsWithoutOrder) {
  json schema = ib::parse_json<json>(R"({"const":{"a":1,"b":[1,{"c":2,"d":3}]}})");
  SchemaValidator v(schema);
  EXPECT_TRUE(v.valid(ib::parse_json<json>(R"({"b":[1,{"d":3,"c":2}],"a":1.0})")));
  EXPECT_FALSE(v.valid(ib::parse_json<json>(R"({"b":[{"d":3,"c":2},1],"a":1})")));
  EXPECT_FALSE(v.valid(ib::parse_json<json>(R"({"a":1})")));
}

// Extra keys (additionalProperties true or a schema) never repeat a named property: its value
// would have to satisfy the property's schema, not additionalProperties.
TEST(JsonSchema, AdditionalKeysAreNotNamedProperties) {
  Dfa d = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"string"},"é":{"type":"null"}},)"
                  R"("additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(d.matches("{\"a\":1,\"b\":true,\"abc\":false,\"\":true,\"\xc3\xa9\xc3\xa9\":true}"));
  EXPECT_TRUE(d.matches("{\"a\":1,\"ab\":\"x\",\"x\":true}"));
  for (const char* doc : {"{\"a\":true}", "{\"ab\":true}", "{\"a\":1,\"a\":true}", "{\"\xc3\xa9\":true}", "{\"x\\n\":true}"})
    EXPECT_FALSE(d.matches(doc)) << doc;
}

// A key holding a quote or a backslash, as JSON writers spell it, is an additional property
// (metricshub's "hw.status{hw.type=\"enclosure\"}"); beside patternProperties (read over raw
// characters) or a declared name with such a character it is left out.
TEST(JsonSchema, AdditionalKeysMayHoldQuotesAndBackslashes) {
  Dfa d = compile(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})");
  for (const char* doc : {R"({"a\"b":true})", R"({"a":1,"\"":false})", R"({"c:\\dir":true})", R"({"x\\\"":true})"})
    EXPECT_TRUE(d.matches(doc)) << doc;
  for (const char* doc : {R"({"a\"b":1})", R"({"\u0061":true})", R"({"a\n":true})"}) EXPECT_FALSE(d.matches(doc)) << doc;
  Dfa patterns =
      compile(R"({"type":"object","patternProperties":{"b":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})");
  EXPECT_FALSE(patterns.matches(R"({"a\"b":true})"));  // it matches the pattern b: an integer
  EXPECT_TRUE(patterns.matches(R"({"ab":1,"c":true})"));
  Dfa quoted_name =
      compile(R"({"type":"object","properties":{"a\"b":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})");
  EXPECT_FALSE(quoted_name.matches(R"({"a\"b":true})"));
}

// uniqueItems over a small enumeration: every order of distinct values (bxci's services), checked
// against brute force over all arrays of up to 5 items; a large enumeration keeps its own order.
TEST(JsonSchema, UniqueEnumerationArraysInAnyOrder) {
  const std::vector<std::string> values = {"\"Redis\"", "\"Mysql\"", "1", "null", "\"Postgres\""};
  Dfa d = compile(R"({"type":"array","uniqueItems":true,"items":{"enum":["Redis","Mysql",1,null,"Postgres"]}})");
  int accepted = 0;
  std::function<void(std::vector<size_t>&)> all = [&](std::vector<size_t>& picked) {
    std::string doc = "[";
    for (size_t i = 0; i < picked.size(); ++i) doc += (i ? "," : "") + values[picked[i]];
    doc += "]";
    std::set<size_t> distinct(picked.begin(), picked.end());
    EXPECT_EQ(d.matches(doc), distinct.size() == picked.size()) << doc;
    accepted += d.matches(doc);
    if (picked.size() == 5) return;
    for (size_t v = 0; v < values.size(); ++v) {
      picked.push_back(v);
      all(picked);
      picked.pop_back();
    }
  };
  std::vector<size_t> picked;
  all(picked);
  EXPECT_EQ(accepted, 1 + 5 + 20 + 60 + 120 + 120);  // ordered selections of 0..5 of 5 values
  // Twenty values: 2^20 sets are too many; the enumeration's order stands.
  std::string big = R"({"type":"array","uniqueItems":true,"items":{"enum":[)";
  for (int i = 0; i < 20; ++i) big += (i ? "," : "") + std::to_string(i);
  Dfa ordered = compile(big + "]}}");
  EXPECT_TRUE(ordered.matches("[1,5,19]"));
  EXPECT_FALSE(ordered.matches("[5,1]"));
  EXPECT_FALSE(ordered.matches("[1,1]"));
}

// --- JSON-Schema-Test-Suite (tests/data/json-schema-test-suite, MIT; see its README) ---

using testing_support::reorder;

// The suite's drafts 4, 6, 7, 2019-09 and 2020-12, each with its optional/format files (which
// assume formats are asserted, as the compiler does), in both meanings of an absent
// additionalProperties. Soundness is exact: an invalid document accepted is a failure.
using testing_support::json_files;

TEST(JsonSchema, TestSuiteSoundness) {
  const std::string base = std::string(IB_SOURCE_DIR) + "/tests/data/json-schema-test-suite/";
  std::ostringstream table;
  table << "draft | files | schemas compiled (strict / open) | invalid rejected | valid accepted (open)\n";
  int all_schemas = 0, all_compiled = 0;
  for (const char* draft : {"4", "6", "7", "2019-09", "2020-12"}) {
    const std::string dir_name = std::string("draft") + draft;
    int schemas = 0, compiled[2] = {0, 0}, invalid = 0, rejected = 0, valid = 0, accepted = 0, files_seen = 0;
    for (const char* sub : {"", "optional/format/"}) {
      const std::string dir = base + dir_name + "/" + sub;
      const auto files = json_files(dir);
      ASSERT_GE(files.size(), std::string(sub).empty() ? 20u : 5u) << dir;
      for (const auto& f : files) {
        ++files_seen;
        json groups = ib::parse_json<json>(read(dir + f));
        for (const auto& g : groups) {
          ++schemas;
          for (int open = 0; open < 2; ++open) {
            SchemaOptions o;
            o.default_draft = draft;
            o.strict_properties = open == 0;
            Dfa d;
            try {
              d = compile_dfa(schema_to_regex(g["schema"], o));
            } catch (const SchemaError&) {
              continue;  // refused with an error: counted as not compiled
            } catch (const RegexError&) {
              continue;
            }
            ++compiled[open];
            for (const auto& t : g["tests"]) {
              const std::string doc = reorder(t["data"], g["schema"]).dump();
              const bool ok = d.matches(doc);
              if (t["valid"].get<bool>()) {
                valid += open;
                accepted += open && ok;
              } else {
                ++invalid;
                rejected += !ok;
                if (ok)
                  ADD_FAILURE() << dir_name << "/" << sub << f << " (" << (open ? "open" : "strict") << "): \""
                                << g["description"].get<std::string>() << "\" accepts invalid " << doc;
              }
            }
          }
        }
      }
    }
    table << draft << " | " << files_seen << " | " << compiled[0] << " / " << compiled[1] << " of " << schemas << " | "
          << rejected << "/" << invalid << " | " << accepted << "/" << valid << "\n";
    all_schemas += schemas;
    all_compiled += compiled[1];
  }
  std::cout << table.str();
  EXPECT_GE(all_compiled, all_schemas * 7 / 10);
}

// pattern / format / lengths and oneOf past the product cap: a SchemaError naming the keyword and
// the pointer; the cap is an option.
// not and if/then/else are sound: random walks satisfy the validator, and probe documents the
// validator rejects (values of types the keywords do not name, other spellings) are rejected.
TEST(JsonSchema, NotAndIfThenElseAreSound) {
  struct SoundCase {
    const char* schema;
    std::vector<std::string> valid, invalid;
  };
  const std::vector<SoundCase> cases = {
      {R"({"not":{"type":"null"}})", {"1", "\"x\"", "[]"}, {"null"}},
      // an untyped negated schema: every type it does not constrain is negated too
      {R"({"type":["integer","object"],"additionalProperties":true,"not":{"properties":{"a":{"const":1}}}})",
       {"{\"a\":2}", "{\"a\":\"1\"}"},
       {"1", "{}", "{\"a\":1}", "{\"a\":1.0}", "{\"a\":1e0}", "{\"b\":1}"}},
      {R"({"type":"integer","not":{"enum":[1,2]}})", {"0", "3"}, {"1", "2", "1.0", "2e0"}},
      {R"({"type":"string","not":{"oneOf":[{"maxLength":1},{"minLength":3}]}})",
       {"\"ab\""},
       {"\"\"", "\"a\"", "\"abc\"", "\"\\u0061\""}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"allOf":[{"not":{"required":["a"]}},{"not":{"required":["b"]}}]})",
       {"{}"},
       {"{\"a\":1}", "{\"b\":1}", "{\"a\":1,\"b\":2}"}},
      // if untyped: a non-object satisfies it, so takes then
      {R"({"if":{"properties":{"a":{"const":1}}},"then":{"type":"string"},"else":{"type":"number"}})",
       {"\"x\""},
       {"5", "{\"a\":2}", "{\"a\":1}", "null"}},
      {R"({"type":"integer","if":{"minimum":10},"then":{"maximum":20},"else":{"maximum":5}})",
       {"10", "20", "5", "-3"},
       {"21", "7", "9", "100"}},
      {R"({"if":{"type":"string"},"then":{"maxLength":2}})", {"\"ab\"", "1", "null"}, {"\"abc\"", "\"\\u0061bc\""}},
      {R"({"type":"object","properties":{"t":{"enum":["a","b"]},"x":{"type":"integer"}},"required":["t"],)"
       R"("if":{"properties":{"t":{"const":"a"}},"required":["t"]},"then":{"required":["x"]},"else":{"not":{"required":["x"]}}})",
       {"{\"t\":\"a\",\"x\":1}", "{\"t\":\"b\"}"},
       {"{\"t\":\"a\"}", "{\"t\":\"b\",\"x\":1}"}},
      {R"({"oneOf":[{"type":"integer","not":{"const":0}},{"type":"integer","if":{"minimum":0},"then":{"maximum":3}}]})",
       {"0", "5"},
       {"2", "-1", "3"}},
  };
  std::mt19937_64 rng(7);
  for (const auto& c : cases) {
    const json schema = ib::parse_json<json>(c.schema);
    const SchemaValidator oracle(schema);
    Dfa d;
    try {
      d = compile(c.schema);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.schema << ": " << e.what();
      continue;
    }
    for (const auto& doc : c.valid) {
      EXPECT_TRUE(oracle.valid(ib::parse_json<json>(doc))) << c.schema << " case error: " << doc;
      EXPECT_TRUE(d.matches(doc)) << c.schema << " rejects " << doc;
    }
    for (const auto& doc : c.invalid) {
      EXPECT_FALSE(oracle.valid(ib::parse_json<json>(doc))) << c.schema << " case error: " << doc;
      EXPECT_FALSE(d.matches(doc)) << c.schema << " accepts invalid " << doc;
    }
    const std::vector<int32_t> dist = distance_to_accept(d);
    if (dist[static_cast<size_t>(d.start)] < 0) continue;
    for (int i = 0; i < 300; ++i) {
      const std::string doc = random_document(d, dist, d.start, rng);
      auto parsed = ib::parse_json_or_discarded<json>(doc);
      EXPECT_TRUE(!parsed.is_discarded() && oracle.valid(parsed)) << c.schema << " walk: " << doc;
    }
  }
}

TEST(JsonSchema, ProductCapIsAnErrorNamingKeywordAndPointer) {
  SchemaOptions o;
  o.max_product_states = 50;
  try {
    schema_to_regex(ib::parse_json<json>(R"({"properties":{"s":{"type":"string","pattern":"^[a-z]+$","maxLength":80}}})"), o);
    FAIL() << "no error";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), "pattern");
    EXPECT_EQ(e.pointer(), "/properties/s");
    EXPECT_NE(std::string(e.what()).find("max_product_states"), std::string::npos) << e.what();
  }
  try {
    schema_to_regex(
        ib::parse_json<json>(R"({"items":{"oneOf":[{"type":"string","maxLength":60},{"type":"string","minLength":3}]}})"), o);
    FAIL() << "no error";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), "oneOf");
    EXPECT_EQ(e.pointer(), "/items/oneOf");
  }
  // No document matches exactly one branch: refused, not an empty language.
  try {
    schema_to_regex(ib::parse_json<json>(R"({"oneOf":[{"type":"integer"},{"type":"integer"}]})"));
    FAIL() << "no error";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), "oneOf");
  }
}

// oneOf over the whole bundled-schema shapes: a nested discriminated union stays small and exact.
TEST(JsonSchema, OneOfDiscriminatedUnionIsExact) {
  const json schema = ib::parse_json<json>(
      R"({"type":"object","properties":{"shape":{"oneOf":[)"
      R"({"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},)"
      R"({"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]}},)"
      R"("required":["shape"]})");
  const Dfa d = compile_dfa(schema_to_regex(schema));
  const Dfa any = compile_dfa(schema_to_regex(ib::parse_json<json>(
      R"({"type":"object","properties":{"shape":{"anyOf":[)"
      R"({"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},)"
      R"({"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]}},)"
      R"("required":["shape"]})")));
  EXPECT_EQ(d.num_states, any.num_states);  // disjoint branches: the same language as anyOf
  EXPECT_TRUE(d.matches(R"({"shape":{"kind":"circle","r":1.5}})"));
  EXPECT_TRUE(d.matches(R"({"shape":{"kind":"square","side":2}})"));
  EXPECT_FALSE(d.matches(R"({"shape":{"kind":"circle","side":2}})"));
}

}  // namespace
}  // namespace ib::constrain
