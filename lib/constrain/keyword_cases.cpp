#include "constrain/keyword_cases.h"

#include <algorithm>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/validator.h"
#include "core/json_input.h"

namespace ib::constrain {

SchemaOptions flexible_whitespace() {
  SchemaOptions o;
  o.whitespace = SchemaOptions::Whitespace::Flexible;
  return o;
}

SchemaOptions open_properties() {
  SchemaOptions o;
  o.strict_properties = false;
  return o;
}

SchemaOptions recursion(int levels) {
  SchemaOptions o;
  o.max_recursion = levels;
  return o;
}

const std::vector<KeywordCase>& keyword_cases() {
  // One case per row, laid out by hand (clang-format would give every field a line of its own).
  // clang-format off
  static const std::vector<KeywordCase> cases = {
      {"type-null", R"({"type":"null"})", {"null"}, {"nul", "0", "\"null\"", "false"}, {}},
      {"type-boolean", R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "\"true\""}, {}},
      {"type-integer", R"({"type":"integer"})", {"0", "-7", "1234567890123"}, {"01", "1.5", "+1", "\"1\"", "true"},
       // integer-valued floats, -0, and more digits than a double holds are not generated
       {"1.0", "-0", "1e3", "12345678901234567890"}},
      {"type-number", R"({"type":"number"})", {"0", "-0", "-0.5", "3.25e-7", "1E+9"}, {".5", "1.", "01", "1e", "NaN", "\"1\""},
       {"1234567890123456789012", "1e123"}},
      {"type-string", R"({"type":"string"})",
       {"\"\"", "\"a b\"", "\"\\\"\\\\\\n\\u00e9\"", "\"\xc3\xa9\xe2\x82\xac\""},
       {"\"a", "\"\\x\"", "\"\\ud800\"", "\"\x01\"", "'a'", "\"\xc3\""},
       {"\"\\ud83d\\ude00\""}},  // surrogate-pair escapes: the character is written as UTF-8 instead
      {"type-object", R"({"type":"object"})", {"{}"}, {"[]", "null", "{", "{\"a\"}"},
       {"{\"a\":1}"}},  // without properties / additionalProperties no key is generated
      {"type-array", R"({"type":"array"})", {"[]", "[1,\"a\",null,[true],{\"k\":{}}]"}, {"[1,]", "{}", "["},
       {"[[[[1]]]]"}},  // items of any value are nested at most `any_depth` levels
      {"properties", R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}}})",
       {"{}", "{\"name\":\"Ada\"}", "{\"age\":36}", "{\"name\":\"Ada\",\"age\":36}"},
       {"{\"name\":1}", "{\"age\":\"x\"}", "{\"name\":\"Ada\",}", "{\"name\":\"Ada\"\"age\":36}"},
       {"{\"age\":36,\"name\":\"Ada\"}", "{\"name\":\"Ada\",\"x\":1}"}},  // schema order; no unnamed keys
      {"required", R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"]})",
       {"{\"name\":\"Ada\"}", "{\"name\":\"Ada\",\"age\":36}"}, {"{}", "{\"age\":36}", "{\"name\":null}"},
       {"{\"age\":36,\"name\":\"Ada\"}"}},
      {"additionalProperties-false", R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false})",
       {"{}", "{\"a\":1}"}, {"{\"b\":1}", "{\"a\":1,\"b\":2}", "{\"a\":\"x\"}"}, {}},
      {"additionalProperties-true", R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
       {"{}", "{\"a\":1,\"b\":[null]}", "{\"z\":\"x\"}"}, {"{\"a\":\"x\"}", "{\"a\":1,\"a\":\"x\"}"},
       {"{\"b\":1,\"a\":1}", "{\"a\\nb\":1}"}},  // named keys first; extra keys without escapes
      {"additionalProperties-schema",
       R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
       {"{}", "{\"a\":1,\"zz\":true}", "{\"q\":false,\"r\":true}", "{\"ab\":true}"},
       {"{\"q\":1}", "{\"a\":1,\"q\":\"x\"}", "{\"a\":true}"}, {"{\"q\":true,\"a\":1}"}},
      // minProperties/maxProperties: the named members counted as they are chosen; extra keys count
      // toward maxProperties, and at most one toward minProperties (extra keys may repeat one another).
      {"minProperties-maxProperties",
       R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"minProperties":1,"maxProperties":2})",
       {"{\"a\":1}", "{\"c\":3}", "{\"a\":1,\"b\":2}", "{\"b\":2,\"c\":3}"}, {"{}", "{\"a\":1,\"b\":2,\"c\":3}", "{\"a\":\"x\"}"},
       {"{\"b\":2,\"a\":1}"}},
      {"minProperties-additional",
       R"({"type":"object","properties":{"id":{"type":"integer"}},"additionalProperties":{"type":"string"},"minProperties":2,"maxProperties":3})",
       {"{\"id\":1,\"x\":\"a\"}", "{\"id\":1,\"x\":\"a\",\"y\":\"b\"}"},
       {"{}", "{\"id\":1}", "{\"x\":\"a\"}", "{\"id\":1,\"x\":\"a\",\"y\":\"b\",\"z\":\"c\"}", "{\"id\":1,\"x\":2}", "{\"x\":\"a\",\"x\":\"b\"}"},
       {"{\"x\":\"a\",\"y\":\"b\"}"}},  // two extra keys count once toward minProperties: they might be one key twice
      // dependentRequired: the presence of the properties it relates is tracked while members are chosen.
      {"dependentRequired",
       R"({"type":"object","properties":{"card":{"type":"string"},"billing":{"type":"string"},"cvv":{"type":"integer"}},)"
       R"("dependentRequired":{"card":["billing","cvv"],"cvv":["card"]}})",
       {"{}", "{\"billing\":\"x\"}", "{\"card\":\"4\",\"billing\":\"x\",\"cvv\":123}"},
       {"{\"card\":\"4\"}", "{\"card\":\"4\",\"billing\":\"x\"}", "{\"cvv\":1}", "{\"billing\":\"x\",\"cvv\":1}"}, {}},
      // A name dependentRequired mentions but properties does not declare: its value follows
      // additionalProperties (here any value).
      {"dependentRequired-undeclared", R"({"type":"object","properties":{"a":{"type":"integer"}},"dependentRequired":{"a":["b"]}})",
       {"{}", "{\"b\":null}", "{\"a\":1,\"b\":[true]}"}, {"{\"a\":1}", "{\"a\":\"1\",\"b\":1}"}, {}},
      // dependentSchemas: with the key present, the dependent schema holds too (a case split on presence).
      {"dependentSchemas",
       R"({"type":"object","properties":{"card":{"type":"string"},"zip":{"type":"string"},"n":{"type":"integer"}},)"
       R"("dependentSchemas":{"card":{"required":["zip"],"properties":{"n":{"minimum":1}}}}})",
       {"{}", "{\"zip\":\"x\"}", "{\"n\":0}", "{\"card\":\"4\",\"zip\":\"x\"}", "{\"card\":\"4\",\"zip\":\"x\",\"n\":2}"},
       {"{\"card\":\"4\"}", "{\"card\":\"4\",\"zip\":\"x\",\"n\":0}", "{\"card\":1,\"zip\":\"x\"}"}, {}},
      // Draft 7: array-form items with additionalItems, dependencies of both kinds.
      {"draft7-items-array",
       R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"array","items":[{"type":"string"},{"type":"integer"}],)"
       R"("additionalItems":false})",
       {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",1,2]", "[\"a\",\"b\"]"}, {}},
      {"draft7-dependencies",
       R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{},"b":{},"c":{"type":"integer"}},)"
       R"("dependencies":{"a":["b"],"b":{"properties":{"c":{"maximum":5}}}}})",
       {"{}", "{\"a\":1,\"b\":2}", "{\"b\":1,\"c\":5}", "{\"c\":9}"}, {"{\"a\":1}", "{\"b\":1,\"c\":6}"}, {}},
      // Draft 7: $ref beside other keywords is alone (its siblings are ignored, as the draft says).
      {"draft7-ref-siblings",
       R"({"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"i":{"type":"integer"}},"$ref":"#/definitions/i","maximum":3})",
       {"1", "7"}, {"\"a\"", "1.5"}, {}},
      // Draft 4: boolean exclusiveMinimum / exclusiveMaximum modify minimum / maximum; id is an identifier.
      {"draft4-exclusive",
       R"({"$schema":"http://json-schema.org/draft-04/schema#","id":"http://x.org/s","type":"integer","minimum":0,)"
       R"("exclusiveMinimum":true,"maximum":5,"exclusiveMaximum":false})",
       {"1", "5"}, {"0", "6", "-1"}, {}},
      // Keys that are no keyword of the draft (x-*, vendor keys, a later draft's keyword) are ignored.
      {"unknown-keywords-ignored",
       R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"object","self":{"vendor":"x"},"x-order":2,)"
       R"("properties":{"a":{"type":"integer","x-kubernetes-int-or-string":true},"b":{"const":1}}})",
       {"{}", "{\"a\":1}", "{\"b\":2}", "{\"a\":1,\"b\":\"s\"}"}, {"{\"a\":\"1\"}", "[]"}, {"{\"c\":1}"}},  // const is not draft 4's
      // $anchor and a reference through the root's $id.
      {"$ref-anchor",
       R"({"$id":"https://x.org/root.json","$defs":{"n":{"$anchor":"num","type":"integer","minimum":0}},)"
       R"("type":"array","prefixItems":[{"$ref":"https://x.org/root.json#num"}],"items":{"$ref":"#num"}})",
       {"[]", "[0]", "[3,4]"}, {"[-1]", "[\"x\"]", "[1,-2]"}, {}},
      // Absent additionalProperties in the JSON Schema meaning: any other keys, after the declared ones.
      {"additionalProperties-absent-open", R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
       {"{\"a\":1}", "{\"a\":1,\"b\":[2]}", "{\"a\":1,\"b\":null,\"c\":\"x\"}"}, {"{\"b\":1}", "{\"a\":\"1\"}"},
       {"{\"b\":1,\"a\":1}"}, open_properties()},  // extra keys follow the declared ones
      // propertyNames: extra keys are intersected with its language; a declared name outside it is dropped.
      {"propertyNames",
       R"({"type":"object","properties":{"id":{"type":"integer"},"LONGNAME":{"type":"integer"}},"additionalProperties":{"type":"boolean"},)"
       R"("propertyNames":{"pattern":"^[a-z]+$","maxLength":4}})",
       {"{}", "{\"id\":1}", "{\"id\":1,\"ok\":true}", "{\"abcd\":false,\"x\":true}"},
       {"{\"LONGNAME\":1}", "{\"abcde\":true}", "{\"Ab\":true}", "{\"a1\":true}", "{\"\":true}", "{\"id\":1,\"ok\":1}"},
       {"{\"ok\":true,\"id\":1}"}},
      // patternProperties: keys a pattern matches take its schema, other extra keys additionalProperties';
      // a declared name a pattern matches takes both.
      {"patternProperties",
       R"({"type":"object","properties":{"x-id":{"type":"integer"}},"patternProperties":{"^x-":{"type":"string"},"^[0-9]+$":{"type":"boolean"}},)"
       R"("additionalProperties":false})",
       {"{}", "{\"x-a\":\"s\"}", "{\"12\":true,\"x-\":\"\"}", "{\"x-a\":\"s\",\"7\":false}"},
       {"{\"x-id\":1}", "{\"x-id\":\"s\"}", "{\"x-a\":1}", "{\"12\":\"s\"}", "{\"y\":\"s\"}", "{\"1a\":true}"},
       {"{\"x-\\u0061\":\"s\"}"}},  // extra keys are written without escapes
      {"patternProperties-additional",
       R"({"type":"object","patternProperties":{"_n$":{"type":"number"}},"additionalProperties":{"type":"string"},"maxProperties":2})",
       {"{}", "{\"a_n\":1.5}", "{\"a\":\"s\",\"b_n\":2}", "{\"_n\":0}"},
       {"{\"a_n\":\"s\"}", "{\"a\":1}", "{\"a\":\"s\",\"b\":\"t\",\"c\":\"u\"}"}, {}},
      {"items", R"({"type":"array","items":{"type":"integer"}})", {"[]", "[1]", "[1,-2,3]"},
       {"[1,\"a\"]", "[1.5]", "[1,]", "{}"}, {"[1.0]"}},
      {"prefixItems", R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {"[]", "[\"a\"]", "[\"a\",1]"}, {"[1]", "[\"a\",\"b\"]", "[\"a\",1,2]"}, {}},
      {"minItems-maxItems", R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3})",
       {"[true]", "[true,false,true]"}, {"[]", "[true,true,true,true]", "[1]"}, {}},
      // contains: each item a hit (∩ contains' language) or a miss (minus its over-approximation),
      // the hits counted: minContains defaults to 1.
      {"contains", R"({"type":"array","items":{"type":"integer"},"contains":{"minimum":10}})",
       {"[10]", "[1,2,30]", "[10,10]", "[-5,123456]"}, {"[]", "[1,2]", "[1,\"x\",10]", "[9]"}, {"[1e1]"}},
      {"minContains-maxContains", R"({"type":"array","contains":{"type":"string"},"minContains":2,"maxContains":3})",
       {"[\"a\",\"b\"]", "[1,\"a\",null,\"b\",\"c\"]", "[\"\",[\"x\"],\"\\n\"]"},
       {"[\"a\"]", "[\"a\",\"b\",\"c\",\"d\"]", "[1,2]", "[]", "[[\"a\"],\"b\"]"},
       {"[[[[1]]],\"a\",\"b\"]"}},  // items of any value are nested at most `any_depth` levels
      {"contains-prefixItems",
       R"({"type":"array","prefixItems":[{"type":"boolean"}],"items":{"enum":["a","b",1]},"contains":{"const":"a"},"maxContains":1,"maxItems":4})",
       {"[true,\"a\"]", "[false,1,\"a\",\"b\"]", "[true,\"b\",\"a\"]"},
       {"[true]", "[true,\"a\",\"a\"]", "[true,\"b\",1,\"a\",\"b\"]", "[\"a\"]", "[true,1,\"b\"]"}, {}},
      // uniqueItems: true where it is regular: at most one item, or prefixItems only whose languages
      // are pairwise disjoint (no item's exact language meets another's over-approximation).
      {"uniqueItems-single", R"({"type":"array","items":{"type":"integer"},"maxItems":1,"uniqueItems":true})", {"[]", "[5]"},
       {"[1,2]", "[1,1]", "[\"a\"]"}, {}},
      // uniqueItems over a finite enumeration: each value at most once, in the enumeration's order.
      {"uniqueItems-enum", R"({"type":"array","items":{"enum":["read","write","admin"]},"uniqueItems":true,"maxItems":2})",
       {"[]", "[\"read\"]", "[\"read\",\"admin\"]", "[\"write\",\"admin\"]", "[\"admin\",\"read\"]"},
       {"[\"read\",\"read\"]", "[\"read\",\"write\",\"admin\"]", "[\"x\"]"}, {}},  // any order (a small enumeration)
      {"uniqueItems-prefixItems",
       R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"},{"enum":[null,true]}],"items":false,"uniqueItems":true})",
       {"[]", "[1]", "[1,\"a\"]", "[-3,\"\",true]"}, {"[1,1]", "[\"a\",\"a\"]", "[1,\"a\",null,2]"}, {}},
      {"enum", R"({"enum":["red","green",1,null,{"k":[true]}]})", {"\"red\"", "\"green\"", "1", "null", "{\"k\":[true]}"},
       {"\"blue\"", "\"Red\"", "2", "{\"k\":[]}", "[1]"}, {"1.0"}},  // each value in its compact form only
      {"const", R"({"const":{"tool":"search","n":2}})", {"{\"tool\":\"search\",\"n\":2}"},
       {"{\"tool\":\"search\",\"n\":3}", "{\"tool\":\"search\"}", "\"search\""}, {"{\"n\":2,\"tool\":\"search\"}"}},
      {"anyOf", R"({"anyOf":[{"type":"integer","minimum":0},{"type":"string","maxLength":2}]})", {"0", "42", "\"ab\"", "\"\""},
       {"-1", "\"abc\"", "null"}, {}},
      {"oneOf", R"({"oneOf":[{"type":"integer"},{"type":"string","format":"date"}]})", {"7", "\"2026-01-31\""},
       {"\"x\"", "1.5", "null"}, {}},
      // oneOf by product construction: a document of two branches is rejected.
      {"oneOf-overlapping", R"({"oneOf":[{"type":"integer","minimum":0,"maximum":9},{"enum":[1,2,"a"]}]})",
       {"0", "3", "9", "\"a\""}, {"1", "2", "10", "\"b\"", "null"}, {}},
      // The other branch is subtracted in every spelling of its values (here: any number with an
      // exponent may be an integer), so 2e-1 is lost by design.
      // (Bounded: a 17-digit number parses to an integer-valued double, which the oracle counts as
      // an integer.)
      {"oneOf-integer-number", R"({"oneOf":[{"type":"integer"},{"type":"number","minimum":-1000,"maximum":1000}]})", {"1.5", "-0.25", "3.0001"},
       {"1", "0", "-7", "1.0", "-0", "1e2", "\"1.5\""}, {"2e-1"}},
      // Objects: the other branch's members in any order, its required keys as member keys (raw or
      // with escapes; an escape in a value is not a key).
      {"oneOf-objects",
       R"({"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":true},)"
       R"({"type":"object","properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":true}]})",
       {"{\"a\":1}", "{\"a\":1,\"c\":true}", "{\"b\":2}", "{\"b\":2,\"c\":[]}", "{\"a\":1,\"c\":\"\\\"b\\\"\"}"},
       {"{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}", "{}", "{\"a\":\"x\"}", "{\"c\":1}"},
       {"{\"a\":1,\"\\u0063\":true}"}},  // an extra key spelt with escapes (extra keys are written raw)
      {"allOf",
       R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]})",
       {"{\"a\":1,\"b\":\"x\"}"}, {"{\"a\":1}", "{\"b\":\"x\"}", "{\"a\":\"1\",\"b\":\"x\"}"}, {}},
      // not: the rest of the schema minus the negated schema's over-approximation; a string with
      // escapes might spell "admin...", so every escaped name is lost by design.
      {"not",
       R"({"type":"object","properties":{"id":{"not":{"type":"null"}},"name":{"type":"string","not":{"pattern":"^admin"}}}})",
       {"{}", "{\"id\":1}", "{\"id\":\"x\"}", "{\"id\":[null]}", "{\"name\":\"bob\"}", "{\"id\":false,\"name\":\"adm\"}"},
       {"{\"id\":null}", "{\"name\":\"admin\"}", "{\"name\":\"administrator\"}", "{\"name\":1}", "{\"id\":null,\"name\":\"x\"}"},
       {"{\"name\":\"\\u0062ob\"}"}},
      // if/then/else: (rest ∧ then) ∩ if, or (rest ∧ else) minus if's over-approximation.
      {"if-then-else",
       R"({"type":"object","properties":{"kind":{"enum":["circle","square"]},"r":{"type":"number"},"side":{"type":"number"}},)"
       R"("required":["kind"],"additionalProperties":false,)"
       R"("if":{"properties":{"kind":{"const":"circle"}}},"then":{"required":["r"]},"else":{"required":["side"]}})",
       {"{\"kind\":\"circle\",\"r\":1.5}", "{\"kind\":\"square\",\"side\":2}", "{\"kind\":\"circle\",\"r\":1,\"side\":2}",
        "{\"kind\":\"square\",\"r\":1,\"side\":2}"},
       {"{\"kind\":\"circle\",\"side\":2}", "{\"kind\":\"square\",\"r\":1}", "{\"kind\":\"circle\"}",
        "{\"kind\":\"triangle\",\"side\":1}", "{\"kind\":\"square\",\"side\":2,\"x\":1}", "{\"side\":2}"},
       {"{\"side\":2,\"kind\":\"square\"}"}},  // members in schema order
      {"minLength-maxLength", R"({"type":"string","minLength":2,"maxLength":4})",
       {"\"ab\"", "\"abcd\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\n\\t\""}, {"\"a\"", "\"abcde\"", "\"\""}, {}},
      {"pattern", R"({"type":"string","pattern":"^[a-z]+-[0-9]{2,3}$"})", {"\"abc-12\"", "\"x-999\""},
       {"\"abc-1\"", "\"ABC-12\"", "\"abc-1234\"", "\"-12\""}, {"\"abc-\\u0031\\u0032\""}},  // no escapes under a pattern
      // pattern, format and minLength/maxLength together: the intersection (product construction);
      // lengths count code points of the written (unescaped) string.
      {"pattern+maxLength", R"({"type":"string","pattern":"^[A-Z]{2}[0-9]+$","maxLength":6})",
       {"\"AB1\"", "\"XY1234\""}, {"\"AB12345\"", "\"AB\"", "\"A1\"", "\"ab12\"", "\"AB1x\""},
       {"\"\\u0041B12\""}},  // no escapes under a pattern
      {"pattern+minLength-unicode", R"({"type":"string","pattern":"\u00e9","minLength":3,"maxLength":4})",
       {"\"x\xc3\xa9y\"", "\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\"", "\"ab\xc3\xa9\""},
       {"\"\xc3\xa9\xc3\xa9\"", "\"xx\xc3\xa9xxx\"", "\"abc\""}, {"\"\\u00e9ab\""}},
      {"format+pattern", R"({"type":"string","format":"date","pattern":"^2026-"})", {"\"2026-01-31\""},
       {"\"2025-01-31\"", "\"2026-13-01\"", "\"2026-\""}, {}},
      {"format+maxLength", R"({"type":"string","format":"email","minLength":6,"maxLength":10})", {"\"a@b.co\"", "\"abc@de.fg\""},
       {"\"abcdef@b.co\"", "\"a@b.c\"", "\"a@bcdefgh\""}, {}},
      {"pattern-unanchored", R"({"type":"string","pattern":"[0-9]{3}"})", {"\"123\"", "\"ab123cd\""}, {"\"12\"", "\"1a2b3\""}, {}},
      {"minimum-maximum", R"({"type":"integer","minimum":-15,"maximum":123})", {"-15", "-1", "0", "9", "99", "123"},
       {"-16", "124", "1000", "-100"}, {"123.0"}},
      {"exclusiveMinimum-exclusiveMaximum", R"({"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10})", {"1", "9"},
       {"0", "10", "-1"}, {}},
      {"number-bounds", R"({"type":"number","minimum":-2,"exclusiveMaximum":3})", {"-2", "-1.5", "0", "2.999", "-0.25"},
       {"-2.5", "3", "3.0", "7"}, {"2.5e-1"}},  // bounded numbers are written without exponent
      // multipleOf: integers by a divisibility automaton (remainder states) intersected with the bounds.
      {"multipleOf-integer", R"({"type":"integer","multipleOf":15,"minimum":-100})",
       {"0", "15", "-90", "300", "1234567890", "999999999999999990"}, {"5", "-105", "-91", "301", "7.5", "\"15\""},
       {"30.0", "3e1", "-0"}},  // integers in their canonical spelling only
      // A few multiples within the bounds: listed.
      {"multipleOf-integer-bounded", R"({"type":"integer","multipleOf":7,"exclusiveMinimum":7,"maximum":50})", {"14", "21", "49"},
       {"7", "0", "56", "15", "50"}, {}},
      // Decimal multipleOf on numbers: the digits past the k-th fraction digit are zeros and the
      // rest is divisible; written without exponent, at most 15 digits (so a parser reads the value written).
      {"multipleOf-number", R"({"type":"number","multipleOf":0.25,"maximum":100})",
       {"0", "0.25", "-1.5", "100", "0.750", "-0.75", "99.75", "-123456789012.25"},
       {"0.3", "0.125", "100.25", "-0.1", "0.2500001", "101", "1.1"},
       {"2.5e-1", "1e2", "1.00000000000000000"}},
      // Calendar days per month, 29 February in leap years only (2000 is one, 1900 and 2100 are not).
      {"format-date", R"({"type":"string","format":"date"})", {"\"2026-11-30\"", "\"2024-02-29\"", "\"2000-02-29\"", "\"0004-02-29\""},
       {"\"2026-13-01\"", "\"2026-1-01\"", "\"26-01-01\"", "\"2026-02-29\"", "\"1900-02-29\"", "\"2100-02-29\"", "\"2026-04-31\"",
        "\"2026-02-30\"", "\"0000-01-01\""},
       {}},
      // The leap second: valid only at 23:59:60 UTC, and left out by design.
      {"format-time", R"({"type":"string","format":"time"})", {"\"12:30:00Z\"", "\"23:59:59.5+05:30\""},
       {"\"24:00:00Z\"", "\"12:30\"", "\"22:59:60Z\"", "\"12:30:00\""}, {"\"23:59:60Z\"", "\"05:29:60+05:30\""}},
      {"format-date-time", R"({"type":"string","format":"date-time"})",
       {"\"2026-11-30T12:30:00Z\"", "\"2026-11-30t23:59:59.5+05:30\""},
       {"\"2026-11-30 12:30:00Z\"", "\"2026-11-30T24:00:00Z\"", "\"2026-02-29T00:00:00Z\""}, {"\"2016-12-31T23:59:60Z\""}},
      {"format-hostname", R"({"type":"string","format":"hostname"})", {"\"example.com\"", "\"a-b.c9.example\"", "\"localhost\""},
       {"\"-a.com\"", "\"a-.com\"", "\"a..com\"", "\"a_b.com\"", "\"\"",
        "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com\""},  // a label of 64
       {"\"example.com.\"", "\"1.2.3.4.5.com\"", "\"x.123\""}},  // a subset: no root dot, at most 4 labels, a last label of letters
      {"format-ipv4", R"({"type":"string","format":"ipv4"})", {"\"0.0.0.0\"", "\"192.168.1.255\""},
       {"\"256.1.1.1\"", "\"01.2.3.4\"", "\"1.2.3\"", "\"1.2.3.4.5\"", "\"1.2.3.a\""}, {}},
      {"format-ipv6", R"({"type":"string","format":"ipv6"})", {"\"::1\"", "\"::\"", "\"fe80::1:2\"", "\"1:2:3:4:5:6:7:8\""},
       {"\"1:2:3:4:5:6:7:8:9\"", "\"1::2::3\"", "\"12345::\"", "\"g::1\"", "\":1\""},
       {"\"::ffff:1.2.3.4\"", "\"1:2:3:4:5:6:7::\""}},  // no IPv4 tail; "::" with at most six groups written
      {"format-uri", R"({"type":"string","format":"uri"})",
       {"\"https://example.com/a/b?x=1#top\"", "\"urn:isbn:0451450523\"", "\"mailto:a@b.org\"", "\"file:///etc/hosts\""},
       {"\"//example.com\"", "\"/a/b\"", "\"1http://x\"", "\"http://a b\"", "\"http://%zz\""},
       {"\"http://[::1]/\""}},  // no IP literal host
      {"format-uri-reference", R"({"type":"string","format":"uri-reference"})", {"\"../a?b\"", "\"#frag\"", "\"http://x.org\"", "\"\""},
       {"\"a b\"", "\"%g0\""}, {}},
      {"format-duration", R"({"type":"string","format":"duration"})", {"\"P1Y2M3DT4H5M6S\"", "\"PT1H\"", "\"P2W\"", "\"P1D\""},
       {"\"P\"", "\"PT\"", "\"P1H\"", "\"1Y\"", "\"P1M1Y\"", "\"P0.5Y\""}, {}},
      {"format-json-pointer", R"({"type":"string","format":"json-pointer"})", {"\"\"", "\"/a/b~0c~1d\"", "\"/\""},
       {"\"a/b\"", "\"/a~2\"", "\"/~\""}, {}},
      // Integer formats (OpenAPI) bound the integers.
      {"format-int32", R"({"type":"integer","format":"int32"})", {"0", "-2147483648", "2147483647"}, {"1.5", "\"1\""},
       {"2147483648", "-2147483649"}},  // JSON Schema does not assert int32 (OpenAPI does): left out by design
      // A format no table holds is not asserted (as validators do); the row's note names it.
      {"format-unknown", R"({"type":"string","format":"x-color","maxLength":3})", {"\"red\"", "\"\""}, {"\"blue\"", "1"}, {}},
      {"format-uuid", R"({"type":"string","format":"uuid"})",
       {"\"123e4567-e89b-12d3-a456-426614174000\"", "\"123E4567-E89B-12D3-A456-426614174000\""},
       {"\"123e4567e89b12d3a456426614174000\"", "\"123e4567-e89b-12d3-a456-42661417400g\""}, {}},
      {"format-email", R"({"type":"string","format":"email"})", {"\"a.b+c@example.co.uk\"", "\"x@y.org\""},
       {"\"@example.com\"", "\"a@b\"", "\"a b@c.de\"", "\"a@-b.com\""},
       {"\"user@[192.168.0.1]\"", "\"a.b.c@x.org\""}},  // a practical subset of RFC 5321: no domain literal, one dot in the local part
      {"$ref-local", R"({"$defs":{"qty":{"type":"integer","minimum":1}},"type":"array","items":{"$ref":"#/$defs/qty"}})",
       {"[]", "[1,5]"}, {"[0]", "[\"1\"]"}, {}},
      {"$ref-recursive",
       R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})",
       {"{\"v\":1}", "{\"v\":1,\"kids\":[]}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}"},
       {"{}", "{\"v\":\"x\"}", "{\"v\":1,\"kids\":[{}]}"},
       {"{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3,\"kids\":[{\"v\":4}]}]}]}"},  // deeper than max_recursion
       recursion(2)},
      {"nullable-type-array", R"({"type":["string","null"],"maxLength":3})", {"\"abc\"", "null"}, {"1", "\"abcd\"", "\"null\""}, {}},
      {"nullable-openapi", R"({"type":"integer","nullable":true})", {"null", "3"}, {"\"3\"", "false"}, {}},
      {"empty-schema", R"({})", {"1", "\"s\"", "[1,{\"a\":null}]", "{}"}, {"", "[1,", "tru"},
       {"[[[1]]]"}},  // any value, nested at most `any_depth` levels
      {"whitespace-compact", R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})",
       {"{\"a\":[1,2]}"}, {"{\"a\":[1,2,]}", "{}"}, {"{ \"a\": [1, 2] }", "{\"a\":[1,2]}\n"}},
      {"whitespace-flexible", R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}},"required":["a"]})",
       {"{ \"a\" : [ 1, 2 ] }", "{\n \"a\": [1,2]\n}", "{\"a\":[1,2]}"}, {"{ \"a\" : [ 1, ] }", "{ }"},
       {"{\"a\":   [1]}", " {\"a\":[1]}"},  // at most max_whitespace between tokens, none outside
       flexible_whitespace()},
      {"regex", R"(regex:[a-z]{1,8}@[a-z]+\.(com|org))", {"ada@example.com", "x@y.org"},
       {"Ada@example.com", "abcdefghi@x.com", "a@b.net", "a@b.com "}, {}},
      {"choice", "choice:yes|no|maybe", {"yes", "no", "maybe"}, {"Yes", "yesno", "", "may"}, {}},
  };
  // clang-format on
  return cases;
}

const std::vector<RefusalCase>& refusal_cases() {
  // One case per row, laid out by hand (clang-format would give every field a line of its own).
  // clang-format off
  static const std::vector<RefusalCase> cases = {
      // More dependentSchemas in one object than kMaxDependentSchemas (each doubles the cases).
      {"dependentSchemas-too-many",
       R"({"type":"object","dependentSchemas":{"a":{},"b":{},"c":{},"d":{},"e":{},"f":{},"g":{}}})", "dependentSchemas",
       "/dependentSchemas"},
      {"uniqueItems", R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})", "uniqueItems", "/uniqueItems"},
      // contains counts past kMaxContainsCount.
      {"minContains-too-large", R"({"type":"array","contains":{"type":"integer"},"minContains":100})", "minContains", "/minContains"},
      // multipleOf whose divisibility automaton passes SchemaOptions::max_product_states.
      {"multipleOf-too-large", R"({"type":"integer","multipleOf":1000003})", "multipleOf", "/multipleOf"},
      // Overlapping patterns would need both schemas for the keys they share: refused.
      {"patternProperties-overlapping", R"({"type":"object","patternProperties":{"^a":{"type":"string"},"b$":{"type":"integer"}}})",
       "patternProperties", "/patternProperties"},
      // maxProperties where extra keys may appear: the automaton grows with the bound.
      {"maxProperties-too-large", R"({"type":"object","additionalProperties":{"type":"integer"},"maxProperties":1000})",
       "maxProperties", "/maxProperties"},
      {"unevaluatedProperties", R"({"type":"object","unevaluatedProperties":false})", "unevaluatedProperties",
       "/unevaluatedProperties"},
      {"$dynamicRef", R"({"items":{"$dynamicRef":"#meta"}})", "$dynamicRef", "/items/$dynamicRef"},
      {"$ref-remote", R"({"type":"object","properties":{"addr":{"$ref":"https://example.com/address.json"}}})", "$ref",
       "/properties/addr/$ref"},
      {"$ref-anchor-missing", R"({"$defs":{"a":{"type":"integer"}},"$ref":"#a"})", "$ref", "/$ref"},
      {"$schema-draft-03", R"({"$schema":"http://json-schema.org/draft-03/schema#","type":"object"})", "$schema", "/$schema"},
      {"pattern-lookahead", R"({"type":"string","pattern":"^(?!admin)[a-z]+$"})", "pattern", "/pattern"},
      // The product automaton above SchemaOptions::max_product_states (the pattern alone needs 2^18 states).
      {"pattern-product-too-large", R"({"properties":{"code":{"type":"string","pattern":"[ab]*a[ab]{17}","maxLength":64}}})",
       "pattern", "/properties/code"},
      {"maximum-fractional", R"({"type":"number","maximum":2.5})", "maximum", "/maximum"},
  };
  // clang-format on
  return cases;
}

const KeywordCase* find_keyword_case(const std::string& name) {
  for (const auto& c : keyword_cases())
    if (c.name == name) return &c;
  return nullptr;
}

const RefusalCase* find_refusal_case(const std::string& name) {
  for (const auto& c : refusal_cases())
    if (c.name == name) return &c;
  return nullptr;
}

// Every row name: the supported keywords, then the refused ones.
std::vector<std::string> keyword_case_names() {
  std::vector<std::string> out;
  for (const auto& c : keyword_cases()) out.push_back(c.name);
  for (const auto& c : refusal_cases()) out.push_back(c.name);
  return out;
}

struct KeywordOracle::Pattern {
  std::regex regex;
};

KeywordOracle::KeywordOracle(const std::string& constraint) {
  if (constraint.rfind("regex:", 0) == 0) {
    regex_ = std::make_shared<const Pattern>(Pattern{std::regex(constraint.substr(6), std::regex::ECMAScript)});
    kind_ = Kind::Regex;
  } else if (constraint.rfind("choice:", 0) == 0) {
    const std::string rest = constraint.substr(7);
    for (size_t pos = 0;;) {
      const size_t bar = rest.find('|', pos);
      choices_.insert(rest.substr(pos, bar == std::string::npos ? std::string::npos : bar - pos));
      if (bar == std::string::npos) break;
      pos = bar + 1;
    }
    kind_ = Kind::Choice;
  } else {
    schema_ = ib::parse_json<nlohmann::ordered_json>(constraint);
    kind_ = Kind::Schema;
  }
}

bool KeywordOracle::valid(const std::string& doc, std::string* why) const {
  if (kind_ == Kind::Regex) return std::regex_match(doc, regex_->regex);
  if (kind_ == Kind::Choice) return choices_.count(doc) != 0;
  auto parsed = ib::parse_json_or_discarded<nlohmann::ordered_json>(doc);
  if (parsed.is_discarded()) {
    if (why) *why = "not JSON";
    return false;
  }
  if (why) *why = "violates the schema";
  return SchemaValidator(schema_).valid(parsed);
}

// A document as a row's note shows it: control and non-ASCII bytes as \xHH, long ones cut.
std::string show_document(const std::string& doc, size_t max_bytes) {
  std::string out = "`";
  for (size_t i = 0; i < doc.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(doc[i]);
    out += c >= 0x20 && c < 0x7F && c != '`' ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  if (doc.size() > max_bytes) out += "…";
  return out + "`";
}

std::string KeywordReport::summary() const {
  std::string s =
      fmt::format("valid accepted {}/{}, invalid rejected {}/{}, by design rejected {}/{}, walks valid {}/{}", valid_accepted,
                  valid_docs, invalid_rejected, invalid_docs, by_design_rejected, by_design_docs, walks_valid, walks);
  if (mislabelled) s += fmt::format(", mislabelled documents {}", mislabelled);
  const size_t shown = std::min<size_t>(problems.size(), 3);
  for (size_t i = 0; i < shown; ++i) s += (i == 0 ? ": " : "; ") + problems[i];
  if (problems.size() > shown) s += fmt::format("; and {} more", problems.size() - shown);
  return s;
}

// Compiles the case and checks it against the oracle (see the top of this file); `walks`
// random documents from the DFA, drawn with generate.h's random_document from `seed`.
KeywordReport check_keyword_case(const KeywordCase& c, int walks, uint64_t seed) {
  KeywordReport r;
  const bool schema = c.constraint.rfind("regex:", 0) != 0 && c.constraint.rfind("choice:", 0) != 0;
  CompiledConstraint compiled;
  std::unique_ptr<KeywordOracle> oracle;
  try {
    compiled = compile_constraint(schema ? "keyword case " + c.name : c.constraint, c.constraint, c.options);
    oracle = std::make_unique<KeywordOracle>(c.constraint);
  } catch (const std::exception& e) {
    r.problems.push_back(std::string("does not compile: ") + e.what());
    return r;
  }
  r.compiled = true;
  const Dfa& dfa = *compiled.dfa;
  r.dfa_states = dfa.num_states;

  for (const auto& d : c.valid) {
    ++r.valid_docs;
    if (dfa.matches(d))
      ++r.valid_accepted;
    else
      r.problems.push_back("rejects valid " + show_document(d));
    if (!oracle->valid(d)) {
      ++r.mislabelled;
      r.problems.push_back("case error: the oracle rejects 'valid' " + show_document(d));
    }
  }
  for (const auto& d : c.invalid) {
    ++r.invalid_docs;
    if (!dfa.matches(d))
      ++r.invalid_rejected;
    else
      r.problems.push_back("accepts invalid " + show_document(d));
    if (oracle->valid(d)) {
      ++r.mislabelled;
      r.problems.push_back("case error: the oracle accepts 'invalid' " + show_document(d));
    }
  }
  for (const auto& d : c.by_design) {
    ++r.by_design_docs;
    if (!dfa.matches(d))
      ++r.by_design_rejected;
    else
      r.problems.push_back("accepts by-design " + show_document(d) + " (the approximation is gone: update the case)");
    if (!oracle->valid(d)) {
      ++r.mislabelled;
      r.problems.push_back("case error: the oracle rejects by-design " + show_document(d) + " (it is simply invalid)");
    }
  }

  const std::vector<int32_t> dist = distance_to_accept(dfa);
  std::mt19937_64 rng(seed);
  r.walks = walks;
  if (dist[static_cast<size_t>(dfa.start)] < 0) {
    r.problems.push_back("the DFA accepts no document");
    return r;
  }
  for (int i = 0; i < walks; ++i) {
    const std::string doc = random_document(dfa, dist, dfa.start, rng);
    std::string why = "does not match";
    if (oracle->valid(doc, &why))
      ++r.walks_valid;
    else
      r.problems.push_back("walk " + why + ": " + show_document(doc));
  }
  return r;
}

// The schema must be refused with a SchemaError whose keyword and pointer are the expected ones
// and whose message names both.
RefusalOutcome check_refusal(const RefusalCase& c) {
  try {
    schema_to_regex(ib::parse_json<nlohmann::ordered_json>(c.schema));
    return {false, "compiled: '" + c.keyword + "' was not refused"};
  } catch (const SchemaError& e) {
    const std::string what = e.what();
    if (e.keyword() != c.keyword || e.pointer() != c.pointer)
      return {false, fmt::format("refused as keyword '{}' at '{}', expected '{}' at '{}': {}", e.keyword(), e.pointer(),
                                 c.keyword, c.pointer, what)};
    if (what.find(c.keyword) == std::string::npos || what.find(c.pointer.empty() ? "/" : c.pointer) == std::string::npos)
      return {false, "the message does not name the keyword and the pointer: " + what};
    return {true, what};
  } catch (const std::exception& e) {
    return {false, std::string("refused with another error than SchemaError: ") + e.what()};
  }
}

}  // namespace ib::constrain
