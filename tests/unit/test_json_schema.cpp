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

namespace ib::constrain {
namespace {

// The DFA and the validator agree on every document of `docs` (all compact, in schema key order):
// the keyword is compiled exactly on them, not just soundly.
// `by_design`: valid documents the DFA leaves out by a documented approximation (it must).
void expect_exact_on(const std::string& schema, const std::vector<std::string>& docs, size_t* accepted = nullptr,
                     const std::function<bool(const std::string&)>& by_design = nullptr) {
  const json s = ib::parse_json<json>(schema);
  const SchemaValidator oracle(s);
  const Dfa d = compile(schema);
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
  EXPECT_FALSE(compile(R"({"type":"number","multipleOf":0.5})").matches("5e-1"));
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
  const Dfa d = compile(R"({"type":"object","properties":{"a":{}},"additionalProperties":true,"minProperties":2})");
  EXPECT_TRUE(d.matches(R"({"a":1,"x":2})"));
  EXPECT_FALSE(d.matches(R"({"x":1,"x":2})"));
  EXPECT_FALSE(d.matches(R"({"x":1,"y":2})"));  // by design
  EXPECT_THROW(compile(R"({"type":"object","properties":{"a":{}},"minProperties":3})"), SchemaError);
  EXPECT_THROW(
      compile(
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
    compile(R"({"type":"object","patternProperties":{"^a":{},"^ab":{}}})");
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
  const Dfa no_ten = compile(R"({"type":"array","contains":{"const":10},"minContains":0,"maxContains":0})");
  EXPECT_FALSE(no_ten.matches("[1e1]"));
  EXPECT_FALSE(no_ten.matches("[10]"));
  EXPECT_TRUE(no_ten.matches("[1,[10]]"));
}

TEST(JsonSchema, UniqueItemsOnlyWhereRegular) {
  expect_exact_on(R"({"type":"array","prefixItems":[{"type":"boolean"},{"type":"integer"}],"items":false,"uniqueItems":true})",
                  {"[]", "[true]", "[true,1]", "[1,1]", "[true,true]"});
  expect_exact_on(R"({"type":"array","maxItems":1,"uniqueItems":true})", {"[]", "[1]", "[1,1]"});
  EXPECT_TRUE(compile(R"({"type":"array","uniqueItems":false})").matches("[1,1]"));
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
  const Dfa d = compile(schema);
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
    const Dfa d = compile(schema, o);
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
    const Dfa d = compile(schema, o);
    EXPECT_TRUE(d.matches(R"({"n":1})")) << strict;
    EXPECT_FALSE(d.matches(R"({"n":1,"m":"a"})")) << strict;
    EXPECT_FALSE(d.matches(R"({"n":1,"m":["a"]})")) << strict;
    EXPECT_FALSE(d.matches(R"({"n":1,"k":1})")) << strict;
  }
  try {
    compile(R"({"type":"object","properties":{"m":{"type":"array","enum":["a"]}},"required":["m"]})");
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
  const std::vector<TableCase> cases = {
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
    const Dfa d = compile(c.schema, tiny);
    for (const auto& doc : c.valid) EXPECT_TRUE(d.matches(doc)) << c.schema << " should accept " << doc;
    for (const auto& doc : c.invalid) EXPECT_FALSE(d.matches(doc)) << c.schema << " should reject " << doc;
  }
}

// Branches that may share a document still go through the product (a cap of 4 states refuses
// them), and with the default cap the shared documents are rejected.
TEST(JsonSchemaDisjoint, OverlappingBranchesKeepTheProduct) {
  SchemaOptions tiny;
  tiny.max_product_states = 4;
  const std::vector<TableCase> cases = {
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
    EXPECT_THROW(compile(c.schema, tiny), SchemaError) << c.schema << " compiled without a product";
    const Dfa d = compile(c.schema);
    for (const auto& doc : c.valid) EXPECT_TRUE(d.matches(doc)) << c.schema << " should accept " << doc;
    for (const auto& doc : c.invalid) EXPECT_FALSE(d.matches(doc)) << c.schema << " should reject " << doc;
  }
  // The same object with its keys in another order is the same value: no document is valid for
  // exactly one of the two branches (a union would accept it).
  EXPECT_THROW(compile(R"({"oneOf":[{"enum":[{"a":1,"b":2}]},{"enum":[{"b":2,"a":1}]}]})"), SchemaError);
}

}  // namespace
}  // namespace ib::constrain
