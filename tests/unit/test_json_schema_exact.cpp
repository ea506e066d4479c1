// JSON Schema -> DFA, exactly: each keyword compiled is checked against the independent validator
// on every document of a small space (integers and decimals for multipleOf, every subset of the
// declared properties, every short array), and the refusals and fallbacks past what the mask holds.

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "constrain/automaton.h"
#include "constrain/constraint.h"
#include "constrain/grammar.h"
#include "constrain/json_schema.h"
#include "constrain/validator.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;

// A schema with documents it must accept and documents it must reject.
struct UnionCase {
  const char* schema;
  std::vector<std::string> valid, invalid;  // compact documents
};

Dfa schema_dfa(const std::string& schema, SchemaOptions o = {}) {
  return compile_dfa(schema_to_regex(ib::parse_json<json>(schema), o));
}

// The DFA and the validator agree on every document of `docs` (all compact, in schema key order):
// the keyword is compiled exactly on them, not just soundly.
// `by_design`: valid documents the DFA leaves out by a documented approximation (it must).
void expect_exact_on(const std::string& schema, const std::vector<std::string>& docs, size_t* accepted = nullptr,
                     const std::function<bool(const std::string&)>& by_design = nullptr) {
  const json s = ib::parse_json<json>(schema);
  const SchemaValidator oracle(s);
  const Dfa d = schema_dfa(schema);
  size_t n = 0;
  for (const auto& doc : docs) {
    const bool valid = oracle.valid(ib::parse_json<json>(doc)), left_out = valid && by_design && by_design(doc);
    EXPECT_EQ(d.matches(doc), valid && !left_out) << schema << " on " << doc << " (validator: " << (valid ? "valid" : "invalid")
                                                  << (left_out ? ", left out by design" : "") << ")";
    n += valid && !left_out;
  }
  if (accepted) *accepted = n;
}

// multipleOf over every integer in a window, for whole, decimal and large divisors, with and
// without bounds and inside oneOf (where the branches' over-approximations keep the divisibility).
TEST(JsonSchema, MultipleOfIsExactOnIntegers) {
  std::vector<std::string> docs;
  for (int x = -400; x <= 400; ++x) docs.push_back(std::to_string(x));
  for (const char* m : {"1", "2", "3", "7", "10", "12", "25", "0.5", "1.5", "0.04"})
    expect_exact_on(std::string(R"({"type":"integer","multipleOf":)") + m + "}", docs);
  expect_exact_on(R"({"type":"integer","multipleOf":6,"minimum":-100,"exclusiveMaximum":250})", docs);
  expect_exact_on(R"({"type":"integer","multipleOf":9,"minimum":-20,"maximum":30})", docs);    // listed
  expect_exact_on(R"({"type":"integer","allOf":[{"multipleOf":4},{"multipleOf":6}]})", docs);  // lcm 12
  size_t n = 0;
  expect_exact_on(R"({"oneOf":[{"type":"integer","multipleOf":2},{"type":"integer","multipleOf":3}]})", docs, &n);
  EXPECT_EQ(n, 402u);  // multiples of 2 or 3 but not of 6 in [-400, 400]: 401 + 267 - 2·133
  expect_exact_on(R"({"type":"integer","not":{"multipleOf":5}})", docs);
  expect_exact_on(R"({"type":"integer","maximum":1e300,"minimum":-1e300})", docs);  // no bound for 18-digit integers
  // 19-digit bounds (int64's range) compile in a few states per digit, not 2^19 alternatives.
  const auto start = std::chrono::steady_clock::now();
  expect_exact_on(R"({"type":"integer","minimum":-9000000000000000000,"maximum":9000000000000000000})",
                  {"9000000000000000000", "8999999999999999000", "9100000000000000000", "-9100000000000000000", "0", "-7",
                   "123456789012345678", "-9000000000000000000"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  // Long numbers: the remainder runs over every digit.
  expect_exact_on(R"({"type":"integer","multipleOf":7})",
                  {"999999999999999994", "999999999999999993", "-700000000000000007", "100000000000000006"});
}

// Decimal multipleOf on numbers: every numeral with up to three fraction digits in a window.
TEST(JsonSchema, MultipleOfIsExactOnDecimals) {
  std::vector<std::string> docs;
  for (int x = -2000; x <= 2000; x += 7)
    for (int frac_digits : {0, 1, 2, 3}) {
      const int scale = frac_digits == 0 ? 1 : frac_digits == 1 ? 10 : frac_digits == 2 ? 100 : 1000;
      const int whole = std::abs(x) / scale, part = std::abs(x) % scale;
      std::string doc = (x < 0 ? "-" : "") + std::to_string(whole);
      if (frac_digits > 0) {
        std::string f = std::to_string(part);
        doc += "." + std::string(static_cast<size_t>(frac_digits) - f.size(), '0') + f;
      }
      docs.push_back(doc);
    }
  for (const char* m : {"0.01", "0.25", "0.3", "2", "1.5", "0.125", "5"})
    expect_exact_on(std::string(R"({"type":"number","multipleOf":)") + m + "}", docs);
  expect_exact_on(R"({"type":"number","multipleOf":0.05,"minimum":-3,"exclusiveMaximum":1})", docs);
  // Exponents are not written (documented); a divisor with more than 18 digits or a zero is refused.
  EXPECT_FALSE(schema_dfa(R"({"type":"number","multipleOf":0.5})").matches("5e-1"));
  for (const char* m : {"0", "-2", "1e-30", "\"2\""})
    EXPECT_THROW(schema_to_regex(ib::parse_json<json>(std::string(R"({"type":"number","multipleOf":)") + m + "}")), SchemaError)
        << m;
}

// Every subset of the declared properties: minProperties / maxProperties / dependentRequired /
// propertyNames decide which subsets are objects of the language, exactly as the validator does.
TEST(JsonSchema, ObjectKeywordsAreExactOverEverySubsetOfProperties) {
  const std::vector<std::string> names = {"a", "b", "c", "dd"};
  std::vector<std::string> docs;
  for (unsigned mask = 0; mask < 16; ++mask) {
    std::string doc = "{";
    for (size_t i = 0; i < names.size(); ++i)
      if (mask >> i & 1u) doc += (doc.size() > 1 ? "," : "") + json(names[i]).dump() + ":1";
    docs.push_back(doc + "}");
    docs.push_back(doc + (doc.size() > 1 ? "," : "") + "\"x\":1}");  // with an extra key
    docs.push_back(doc + (doc.size() > 1 ? "," : "") + "\"x\":1,\"yy\":2}");
  }
  const std::string props = R"("properties":{"a":{},"b":{},"c":{},"dd":{}})";
  for (const char* rest :
       {R"("minProperties":2)", R"("maxProperties":1)", R"("minProperties":1,"maxProperties":3)",
        R"("minProperties":3,"additionalProperties":true)", R"("maxProperties":3,"additionalProperties":true)",
        R"("dependentRequired":{"a":["b"],"c":["a","dd"]})", R"("dependentRequired":{"dd":["a"],"a":["dd"]},"required":["b"])",
        R"("dependentRequired":{"a":["b"]},"minProperties":3,"additionalProperties":true)",
        R"("propertyNames":{"maxLength":1},"additionalProperties":true)",
        R"("propertyNames":{"enum":["a","dd","yy"]},"additionalProperties":true)",
        R"("dependentRequired":{"c":["q"]},"additionalProperties":false)"}) {
    // Without additionalProperties no extra key is written (documented): the rows say false there.
    std::string schema = std::string("{\"type\":\"object\",") + props + "," + rest;
    if (std::string(rest).find("additionalProperties") == std::string::npos) schema += ",\"additionalProperties\":false";
    // Two extra keys might be one key twice (a parser keeps one): they count once toward
    // minProperties, so documents that need both to reach it are left out.
    const json r = ib::parse_json<json>(std::string("{") + rest + "}");
    const size_t min_props = r.value("minProperties", 0u);
    auto two_extras_needed = [&](const std::string& doc) {
      const json o = ib::parse_json<json>(doc);
      return o.contains("yy") && o.size() - 1 < min_props;
    };
    size_t n = 0;
    expect_exact_on(schema + "}", docs, &n, two_extras_needed);
    EXPECT_GT(n, 0u) << rest;
  }
  const Dfa d = schema_dfa(R"({"type":"object","properties":{"a":{}},"additionalProperties":true,"minProperties":2})");
  EXPECT_TRUE(d.matches(R"({"a":1,"x":2})"));
  EXPECT_FALSE(d.matches(R"({"x":1,"x":2})"));
  EXPECT_FALSE(d.matches(R"({"x":1,"y":2})"));  // by design
  EXPECT_THROW(schema_dfa(R"({"type":"object","properties":{"a":{}},"minProperties":3})"), SchemaError);
  EXPECT_THROW(
      schema_dfa(
          R"({"type":"object","properties":{"a":{}},"required":["a"],"dependentRequired":{"a":["z"]},"additionalProperties":false})"),
      SchemaError);
}

// patternProperties and propertyNames route each key to its schema.
TEST(JsonSchema, PatternPropertiesAndPropertyNamesRouteKeys) {
  const std::string schema =
      R"({"type":"object","properties":{"n1":{"type":"integer"},"id":{"type":"integer"}},)"
      R"("patternProperties":{"^n[0-9]$":{"type":"integer","minimum":0},"^s_":{"type":"string"}},"additionalProperties":{"type":"boolean"},)"
      R"("propertyNames":{"maxLength":3}})";
  const std::vector<std::string> docs = {"{}",
                                         "{\"n1\":1}",
                                         "{\"n1\":-1}",
                                         "{\"n1\":\"x\"}",
                                         "{\"id\":5}",
                                         "{\"n2\":3}",
                                         "{\"n2\":-3}",
                                         "{\"n2\":true}",
                                         "{\"s_a\":\"x\"}",
                                         "{\"s_a\":1}",
                                         "{\"s_ab\":\"x\"}",
                                         "{\"q\":true}",
                                         "{\"q\":1}",
                                         "{\"qqqq\":true}",
                                         "{\"n1\":2,\"s_\":\"\",\"z\":false}",
                                         "{\"n22\":true}",
                                         "{\"n22\":1}"};
  expect_exact_on(schema, docs);
  // The same with additionalProperties false, and a pattern that declared names do not match.
  expect_exact_on(R"({"type":"object","patternProperties":{"^[a-c]+$":{"type":"integer"}},"additionalProperties":false})",
                  {"{}", "{\"abc\":1}", "{\"abd\":1}", "{\"a\":\"s\"}", "{\"\":1}", "{\"cab\":2,\"b\":3}"});
  try {
    schema_dfa(R"({"type":"object","patternProperties":{"^a":{},"^ab":{}}})");
    ADD_FAILURE() << "overlapping patterns compiled";
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), "patternProperties");
    EXPECT_NE(std::string(e.what()).find("'^a' and '^ab'"), std::string::npos) << e.what();
  }
}

// contains with minContains/maxContains over every array of up to four items from a small set.
TEST(JsonSchema, ContainsCountsItemsExactly) {
  const std::vector<std::string> values = {"0", "10", "\"a\"", "[10]"};
  std::vector<std::string> docs = {"[]"};
  std::vector<std::string> layer = {""};
  for (int len = 1; len <= 4; ++len) {
    std::vector<std::string> next;
    for (const auto& p : layer)
      for (const auto& v : values) {
        next.push_back(p.empty() ? v : p + "," + v);
        docs.push_back("[" + next.back() + "]");
      }
    layer = next;
  }
  for (const char* rest : {R"("contains":{"type":"integer","minimum":5})", R"("contains":{"const":10},"minContains":2)",
                           R"("contains":{"type":"integer"},"minContains":0,"maxContains":1)",
                           R"("contains":{"type":"string"},"minContains":2,"maxContains":3,"maxItems":4)",
                           R"("prefixItems":[{"type":"integer"}],"contains":{"const":10},"maxContains":1)",
                           R"("contains":{"not":{"type":"integer"}},"minItems":3)"}) {
    size_t n = 0;
    expect_exact_on(std::string("{\"type\":\"array\",") + rest + "}", docs, &n);
    EXPECT_GT(n, 0u) << rest;
  }
  // An item valid by contains in another spelling (1e1) is neither a hit nor a miss: left out.
  // Positions × counts past the cap: refused, naming contains.
  for (const char* big : {R"({"type":"array","contains":{"type":"integer"},"maxItems":5000})",
                          R"({"type":"array","contains":{"type":"integer"},"minItems":5000})"}) {
    try {
      schema_to_regex(ib::parse_json<json>(big));
      ADD_FAILURE() << big << " compiled";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword(), "contains") << e.what();
      EXPECT_EQ(e.pointer(), "/contains") << e.what();
    }
  }
  const Dfa no_ten = schema_dfa(R"({"type":"array","contains":{"const":10},"minContains":0,"maxContains":0})");
  EXPECT_FALSE(no_ten.matches("[1e1]"));
  EXPECT_FALSE(no_ten.matches("[10]"));
  EXPECT_TRUE(no_ten.matches("[1,[10]]"));
}

TEST(JsonSchema, UniqueItemsOnlyWhereRegular) {
  expect_exact_on(R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"integer"}],"items":false,"uniqueItems":true})",
                  {"[]", "[true]", "[true,1]", "[1,1]", "[true,true]"});
  expect_exact_on(R"({"type":"array","maxItems":1,"uniqueItems":true})", {"[]", "[1]", "[1,1]"});
  EXPECT_TRUE(schema_dfa(R"({"type":"array","uniqueItems":false})").matches("[1,1]"));
  for (const char* s :
       {R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})",
        R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"number"}],"items":false,"uniqueItems":true})",
        R"({"type":"array","prefixItems":[{"enum":[1,2]},{"enum":[2,3]}],"items":false,"uniqueItems":true})",
        R"({"uniqueItems":true})"}) {
    try {
      schema_to_regex(ib::parse_json<json>(s));
      ADD_FAILURE() << s << " compiled";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword(), "uniqueItems") << s;
      EXPECT_EQ(e.pointer(), "/uniqueItems") << s;
    }
  }
}

// #21: a oneOf of required branches refused every string escape, because an escape anywhere in a
// document was taken for a key spelt with escapes. Only member keys count now; the documents are
// checked against the validator (exact on them).
TEST(JsonSchema, OneOfOfRequiredBranchesKeepsEscapesInValues) {
  const std::string schema =
      R"({"oneOf":[{"required":["a"]},{"required":["b"]}],"properties":{"a":{"type":"string"},"b":{"type":"string"}}})";
  expect_exact_on(schema, {R"({"b":"x\"y"})", R"({"a":"x\"y"})", R"({"a":"\u0061"})", R"({"b":"\"a\""})", R"({"b":"xy"})",
                           R"({"a":"x","b":"y"})", R"({})", R"({"a":1})"});
  const Dfa d = schema_dfa(schema);
  EXPECT_TRUE(d.matches(R"({"b":"x\"y"})"));
  EXPECT_FALSE(d.matches(R"({"a":"x\"y","b":"z"})"));  // both branches hold: not exactly one
}

// #21: allOf members merge additionalProperties, items and if/then/else across members, exactly:
// X's additionalProperties applies to the merged keys X does not declare, X's items past X's own
// prefixItems, and two conditionals both hold.
TEST(JsonSchema, AllOfMergesAcrossMembers) {
  expect_exact_on(
      R"({"allOf":[{"properties":{"a":{"type":"integer"}}},{"properties":{"b":{"type":"string"}},"additionalProperties":false}]})",
      {"{}", R"({"b":"x"})", R"({"a":1})", R"({"a":1,"b":"x"})", R"({"c":1})", R"({"b":1})"});
  expect_exact_on(
      R"({"type":"object","allOf":[{"properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}],)"
      R"("properties":{"a":{"minimum":0},"b":{"maxLength":2}}})",
      {"{}", R"({"a":1})", R"({"a":-1})", R"({"b":"xy"})", R"({"b":"xyz"})", R"({"b":1})", R"({"a":1,"b":"q"})"});
  expect_exact_on(R"({"allOf":[{"type":"array","prefixItems":[{"type":"integer"}]},{"items":{"type":"integer","maximum":5}}]})",
                  {"[]", "[7]", "[1,2]", "[9,9]", "[1,\"a\"]", "[\"a\"]"});
  expect_exact_on(
      R"({"allOf":[{"type":"array","prefixItems":[{"type":"integer"},{"type":"integer"}],"items":false},{"items":{"minimum":1}}]})",
      {"[]", "[0]", "[0,1]", "[0,0]", "[1,2,3]"});
  expect_exact_on(
      R"({"type":"object","properties":{"k":{"type":"string"},"n":{"type":"integer"}},"allOf":[)"
      R"({"if":{"properties":{"k":{"const":"a"}},"required":["k"]},"then":{"required":["n"]}},)"
      R"({"if":{"properties":{"k":{"const":"z"}},"required":["k"]},"then":{"properties":{"n":{"const":0}},"required":["n"]}}]})",
      {"{}", R"({"k":"a"})", R"({"k":"a","n":1})", R"({"k":"a","n":0})", R"({"k":"z","n":0})", R"({"k":"z"})",
       R"({"k":"z","n":1})", R"({"n":0})", R"({"k":"b"})"});
}

// #19 item 1: a schema of 5,000 nested items overflowed the stack; past 200 levels it is a
// SchemaError naming where.
TEST(JsonSchema, DeepNestingIsAnErrorNotACrash) {
  auto nested = [](int n) {
    std::string s = R"({"type":"integer"})";
    for (int i = 0; i < n; ++i) s = R"({"type":"array","items":)" + s + "}";
    return s;
  };
  try {  // past the JSON depth any reader copies safely: refused before the compiler copies it
    schema_to_regex(ib::parse_json<json>(nested(5000)));
    ADD_FAILURE() << "compiled";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("the schema's JSON nests deeper than 512 levels"), std::string::npos) << e.what();
  }
  try {  // within it, past the compiler's own bound on subschemas: named where
    schema_to_regex(ib::parse_json<json>(nested(300)));
    ADD_FAILURE() << "compiled";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper than 200 levels"), std::string::npos);
    EXPECT_EQ(e.pointer().rfind("/items/items/", 0), 0u);
  }
  std::string ok = R"({"type":"integer"})";
  for (int i = 0; i < 100; ++i) ok = R"({"type":"array","items":)" + ok + "}";
  EXPECT_NO_THROW(schema_to_regex(ib::parse_json<json>(ok)));
}

// A pattern alone is a language of decoded strings, written as JSON writers write them: the
// characters JSON must escape (" \ and the controls) as their mandatory escapes, the others raw.
// Exact against the reference `jsonschema` package's verdicts (tests/data/json-schema/
// pattern-escapes.json, scripts/make-pattern-escape-fixtures) on every string of up to 3
// characters over an alphabet of such characters, spelt by nlohmann's dump, on both compiler
// paths; other spellings of the same strings (\u0061 for a, \/ for /) are left out by design,
// never accepted when invalid.
TEST(JsonSchema, APatternAloneTakesTheEscapesJsonWritersWrite) {
  std::ifstream in(std::string(IB_SOURCE_DIR) + "/tests/data/json-schema/pattern-escapes.json");
  ASSERT_TRUE(in) << "tests/data/json-schema/pattern-escapes.json";
  const json golden = json::parse(in);
  const auto strings = golden["strings"].get<std::vector<std::string>>();
  ASSERT_EQ(strings.size(), 400u);
  ASSERT_EQ(golden["patterns"].size(), 7u);
  for (const auto& [pattern, verdicts] : golden["patterns"].items()) {
    const json schema = {{"type", "string"}, {"pattern", pattern}};
    const Dfa d = compile_dfa(schema_to_regex(schema));
    const auto g = compile_schema(schema, {}, SchemaPath::Grammar).grammar;
    const std::string v = verdicts.get<std::string>();
    ASSERT_EQ(v.size(), strings.size()) << pattern;
    size_t accepted = 0;
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::string doc = json(strings[i]).dump();
      const bool valid = v[i] == '1';
      EXPECT_EQ(d.matches(doc), valid) << pattern << " on " << doc;
      EXPECT_EQ(grammar_matches(*g, doc), valid) << pattern << " on " << doc << " (grammar)";
      accepted += valid;
      // Another spelling: every 'a' as \u0061, every '/' as \/ (valid or not, never accepted).
      std::string other;
      for (char c : doc) other += c == 'a' ? std::string("\\u0061") : c == '/' ? std::string("\\/") : std::string(1, c);
      if (other != doc) {
        EXPECT_FALSE(d.matches(other)) << pattern << " on " << other;
      }
    }
    EXPECT_GT(accepted, 0u) << pattern;
  }
}

// validator_fallback: a keyword beyond the mask's reach is compiled as if absent (a superset) and
// the note says the validator decides; without the option the same schema is refused, and a
// malformed or unsatisfiable schema is refused either way.
TEST(JsonSchemaFallback, LookaroundPatternIsLeftToTheValidator) {
  const char* schema = R"({"type":"object","properties":{"id":{"type":"string","pattern":"^(?!x)[a-z]+$"}},"required":["id"]})";
  try {
    schema_to_regex(ib::parse_json<json>(schema));
    FAIL() << "a lookaround pattern compiled without the fallback";
  } catch (const SchemaError& e) {
    EXPECT_TRUE(e.beyond()) << e.what();
    EXPECT_EQ(e.keyword(), "pattern");
  }
  SchemaOptions o;
  o.validator_fallback = true;
  SchemaNotes notes;
  const Dfa d = compile_dfa(schema_to_regex(ib::parse_json<json>(schema), o, &notes));
  ASSERT_EQ(notes.validator_decides.count("pattern"), 1u) << describe(notes);
  EXPECT_NE(describe(notes).find("left to the validator"), std::string::npos);
  const json parsed = ib::parse_json<json>(schema);  // the validator keeps a reference to its root
  const SchemaValidator v(parsed);
  // The mask holds both; the validator keeps the valid one only.
  EXPECT_TRUE(d.matches(R"({"id":"abc"})"));
  EXPECT_TRUE(d.matches(R"({"id":"xabc"})"));
  EXPECT_TRUE(v.valid(ib::parse_json<json>(R"({"id":"abc"})")));
  EXPECT_FALSE(v.valid(ib::parse_json<json>(R"({"id":"xabc"})")));
  // The rest of the schema is still in the mask.
  EXPECT_FALSE(d.matches(R"({"id":7})"));
  EXPECT_FALSE(d.matches(R"({})"));
}

TEST(JsonSchemaFallback, OneOfPastTheProductCapBecomesAnyOf) {
  const char* schema = R"({"oneOf":[{"type":"string","pattern":"^[a-z]{1,8}$"},{"type":"string","pattern":"^[a-m0-9]{1,8}$"}]})";
  SchemaOptions o;
  o.max_product_states = 20;
  try {
    schema_to_regex(ib::parse_json<json>(schema), o);
    FAIL() << "the oneOf product compiled under a cap of 20 states";
  } catch (const SchemaError& e) {
    EXPECT_TRUE(e.beyond()) << e.what();
  }
  o.validator_fallback = true;
  SchemaNotes notes;
  const Dfa d = compile_dfa(schema_to_regex(ib::parse_json<json>(schema), o, &notes));
  EXPECT_FALSE(notes.validator_decides.empty()) << describe(notes);
  const json parsed = ib::parse_json<json>(schema);  // the validator keeps a reference to its root
  const SchemaValidator v(parsed);
  EXPECT_TRUE(d.matches("\"abc\""));  // both branches: in the union, and the validator rejects it
  EXPECT_FALSE(v.valid(ib::parse_json<json>("\"abc\"")));
  EXPECT_TRUE(d.matches("\"xyz\"") && v.valid(ib::parse_json<json>("\"xyz\"")));
  EXPECT_TRUE(d.matches("\"123\"") && v.valid(ib::parse_json<json>("\"123\"")));
  EXPECT_FALSE(d.matches("\"ABC\""));  // in neither branch: not even in the union
}

// The validator holds its root by reference: built from a temporary it would read freed memory.
static_assert(!std::is_constructible_v<SchemaValidator, json&&>, "a validator of a temporary schema dangles");
static_assert(std::is_constructible_v<SchemaValidator, const json&>);

TEST(JsonSchemaFallback, MalformedUnsatisfiableAndUnreadableStayRefused) {
  SchemaOptions o;
  o.validator_fallback = true;
  // unsatisfiable
  EXPECT_THROW(schema_to_regex(ib::parse_json<json>(R"({"type":"string","minLength":5,"maxLength":2})"), o), SchemaError);
  // malformed
  EXPECT_THROW(schema_to_regex(ib::parse_json<json>(R"({"type":"string","pattern":7})"), o), SchemaError);
  // a lookbehind the validator's std::regex cannot read either: nobody could decide it
  EXPECT_THROW(schema_to_regex(ib::parse_json<json>(R"({"type":"string","pattern":"(?<=a)b"})"), o), SchemaError);
  // unsupported keywords are not capability refusals
  EXPECT_THROW(schema_to_regex(ib::parse_json<json>(R"({"type":"object","unevaluatedProperties":false})"), o), SchemaError);
}

// if/then on objects: the then branch holds the documents if accepts whatever the place of if's keys
// in the object (they are written in the schema's order, not if's keys first).
TEST(JsonSchema, IfThenElseKeysInTheSchemasOrder) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"string"},"v":{"enum":[2,3]}},"required":["v"],)"
                       R"("if":{"properties":{"v":{"const":2}}},"then":{"properties":{"b":{"type":"integer"}}},)"
                       R"("else":{"properties":{"c":{"type":"integer"}}}})";
  for (const bool strict : {true, false}) {
    SchemaOptions o;
    o.strict_properties = strict;
    const Dfa d = schema_dfa(schema, o);
    EXPECT_TRUE(d.matches(R"({"a":"x","v":2,"b":1})")) << strict;
    EXPECT_TRUE(d.matches(R"({"v":2})")) << strict;
    EXPECT_TRUE(d.matches(R"({"a":"x","v":3,"c":1})")) << strict;
    EXPECT_FALSE(d.matches(R"({"a":"x","v":2,"b":"s"})")) << strict;
    EXPECT_FALSE(d.matches(R"({"a":"x","v":3,"c":"s"})")) << strict;
    EXPECT_FALSE(d.matches(R"({"a":"x","v":4})")) << strict;
  }
}

// An optional property no value satisfies cannot appear; the object is still satisfiable. A
// required one makes the schema unsatisfiable, refused as such.
TEST(JsonSchema, UnsatisfiableOptionalPropertyIsAbsent) {
  const char* schema = R"({"type":"object","properties":{"m":{"type":"array","enum":["a","b"]},"n":{"type":"integer"},)"
                       R"("k":{"allOf":[{"const":1},{"const":2}]}},"required":["n"]})";
  for (const bool strict : {true, false}) {
    SchemaOptions o;
    o.strict_properties = strict;
    const Dfa d = schema_dfa(schema, o);
    EXPECT_TRUE(d.matches(R"({"n":1})")) << strict;
    EXPECT_FALSE(d.matches(R"({"n":1,"m":"a"})")) << strict;
    EXPECT_FALSE(d.matches(R"({"n":1,"m":["a"]})")) << strict;
    EXPECT_FALSE(d.matches(R"({"n":1,"k":1})")) << strict;
  }
  try {
    schema_dfa(R"({"type":"object","properties":{"m":{"type":"array","enum":["a"]}},"required":["m"]})");
    FAIL() << "a required property no value satisfies compiled";
  } catch (const SchemaError& e) {
    EXPECT_TRUE(e.unsatisfiable()) << e.what();
    EXPECT_FALSE(e.beyond()) << e.what();
  }
}

// oneOf branches that keywords show to be disjoint compile as their union: no product, so a cap of a
// few states that any product passes does not refuse them, and documents of each branch are kept.
TEST(JsonSchemaDisjoint, TaggedUnionNeedsNoProduct) {
  SchemaOptions tiny;
  tiny.max_product_states = 4;
  const std::vector<UnionCase> cases = {
      // A discriminator with const values, the object type from the parent.
      {R"({"type":"object","oneOf":[{"properties":{"kind":{"const":"a"},"x":{"type":"string"}},"required":["kind"]},)"
       R"({"properties":{"kind":{"const":"b"},"y":{"type":"integer"}},"required":["kind","y"]}]})",
       {R"({"kind":"a","x":"s"})", R"({"kind":"a"})", R"({"kind":"b","y":1})"},
       {R"({"kind":"c"})", R"({"kind":"b"})", R"({"x":"s"})", "null"}},
      // Enum discriminators through $ref and allOf, the key required by one branch only.
      {R"({"$defs":{"line":{"type":"object","properties":{"t":{"enum":["line","polyline"]}},"required":["t"]},)"
       R"("bar":{"allOf":[{"type":"object"},{"properties":{"t":{"enum":["bar"]},"w":{"type":"number"}}}]}},)"
       R"("oneOf":[{"$ref":"#/$defs/line"},{"$ref":"#/$defs/bar"}]})",
       {R"({"t":"line"})", R"({"t":"polyline"})", R"({"t":"bar","w":2})", R"({"w":2})"},
       {R"({"t":"pie"})", "7"}},
      // Distinct types (integer and number overlap; string and array do not).
      {R"({"oneOf":[{"type":"string"},{"type":"array","items":{"type":"integer"}},{"type":"null"}]})",
       {"\"s\"", "[1,2]", "null"},
       {"1", "{}"}},
      // Values against types and values.
      {R"({"oneOf":[{"enum":[1,2,"x"]},{"type":"boolean"},{"const":3}]})", {"1", "\"x\"", "true", "3"}, {"4", "\"y\""}},
  };
  for (const auto& c : cases) {
    const Dfa d = schema_dfa(c.schema, tiny);
    for (const auto& doc : c.valid) EXPECT_TRUE(d.matches(doc)) << c.schema << " should accept " << doc;
    for (const auto& doc : c.invalid) EXPECT_FALSE(d.matches(doc)) << c.schema << " should reject " << doc;
  }
}

// Branches that may share a document still go through the product (a cap of 4 states refuses
// them), and with the default cap the shared documents are rejected.
TEST(JsonSchemaDisjoint, OverlappingBranchesKeepTheProduct) {
  SchemaOptions tiny;
  tiny.max_product_states = 4;
  const std::vector<UnionCase> cases = {
      // required alone: an object may hold both keys.
      {R"({"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]})",
       {R"({"a":1})", R"({"b":1})"},
       {R"({"a":1,"b":2})"}},
      // A discriminator without the object type: a non-object satisfies both branches.
      {R"({"oneOf":[{"properties":{"k":{"const":1}},"required":["k"]},{"properties":{"k":{"const":2}},"required":["k"]}]})",
       {R"({"k":1})", R"({"k":2})"},
       {"null", "\"s\""}},
      // integer within number.
      {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", {"1.5"}, {"1"}},
      // Equal values: the same number spelt twice, the same object with its keys in another order.
      {R"({"oneOf":[{"const":1},{"const":1.0},{"type":"string"}]})", {"\"s\""}, {"1"}},
      // nullable adds null to a type: both branches hold null.
      {R"({"oneOf":[{"type":"string","nullable":true},{"type":"null"}]})", {"\"s\""}, {"null"}},
  };
  for (const auto& c : cases) {
    EXPECT_THROW(schema_dfa(c.schema, tiny), SchemaError) << c.schema << " compiled without a product";
    const Dfa d = schema_dfa(c.schema);
    for (const auto& doc : c.valid) EXPECT_TRUE(d.matches(doc)) << c.schema << " should accept " << doc;
    for (const auto& doc : c.invalid) EXPECT_FALSE(d.matches(doc)) << c.schema << " should reject " << doc;
  }
  // The same object with its keys in another order is the same value: no document is valid for
  // exactly one of the two branches (a union would accept it).
  EXPECT_THROW(schema_dfa(R"({"oneOf":[{"enum":[{"a":1,"b":2}]},{"enum":[{"b":2,"a":1}]}]})"), SchemaError);
}

}  // namespace
}  // namespace ib::constrain
