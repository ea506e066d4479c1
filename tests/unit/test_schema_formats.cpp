// `format` languages (constrain/schema_formats.h) against the reference: the jsonschema package's
// format checker on real-world regular expressions and edits of them
// (tests/data/json-schema/regex-format.json, scripts/make-regex-format-fixtures).
#include <string>

#include <gtest/gtest.h>

#include "../common/json_schema_suite.h"
#include "constrain/automaton.h"
#include "constrain/format_check.h"
#include "constrain/grammar.h"
#include "constrain/json_schema.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;
using testing_support::read_text_file;

TEST(SchemaFormats, RegexFormatHoldsNoStringThePythonCheckerRejects) {
  const json fx = ib::parse_json<json>(read_text_file(std::string(IB_SOURCE_DIR) + "/tests/data/json-schema/regex-format.json"));
  const json schema = ib::parse_json<json>(R"({"type":"string","format":"regex"})");
  const Dfa dfa = compile_dfa(schema_to_regex(schema));
  const SchemaGrammar sg = schema_to_grammar(schema);
  int valid = 0, accepted = 0;
  for (const auto& c : fx["cases"]) {
    const std::string s = c["string"].get<std::string>();
    const std::string doc = json(s).dump();  // as JSON writers spell it: backslashes escaped
    const bool ours = dfa.matches(doc);
    EXPECT_EQ(grammar_matches(*sg.grammar, doc), ours) << doc;
    if (ours) {
      EXPECT_TRUE(c["valid"].get<bool>()) << "the format's language holds " << doc << ", which Python's re refuses";
      // And ECMA 262 (std::regex, what our validator checks the format with) compiles it too.
      EXPECT_TRUE(format_valid("regex", s)) << doc;
      ++accepted;
    }
    valid += c["valid"].get<bool>();
  }
  // Real expressions with escapes, groups, classes and counted quantifiers are in the language:
  // 2,831 of the 3,091 valid strings when written (the rest: '{' as a literal, which ECMA 262
  // refuses, ranges such as [A-z], lookbehind, named groups, nesting past three).
  EXPECT_GT(valid, 3000);
  EXPECT_GE(accepted, 2800);
}

TEST(SchemaFormats, PatternAndLengthsTogetherTakeEscapedCharacters) {
  // linutil's string-property: a pattern beside minLength. A description with a newline is
  // written "\n" by every JSON writer; the length counts it as one character.
  const json schema = ib::parse_json<json>(R"({"type":"string","minLength":2,"maxLength":4,"pattern":"[^ ]"})");
  const Dfa dfa = compile_dfa(schema_to_regex(schema));
  EXPECT_TRUE(dfa.matches(R"("a\nb")"));
  EXPECT_TRUE(dfa.matches(R"("\"\\")"));
  EXPECT_FALSE(dfa.matches(R"("a\nbcd")"));   // 5 characters
  EXPECT_FALSE(dfa.matches(R"("  ")"));       // no character but a space
  EXPECT_FALSE(dfa.matches(R"("\u0041b")"));  // not how JSON writers spell 'A'
  const SchemaGrammar sg = schema_to_grammar(schema);
  EXPECT_TRUE(grammar_matches(*sg.grammar, R"("a\nb")"));
}

}  // namespace
}  // namespace ib::constrain
