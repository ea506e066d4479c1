// The grammar path (constrain/grammar.h, schema_to_grammar, grammar_mask.h): a hand-built grammar
// against brute force, free values against nlohmann's parser at any depth, recursive schemas
// against the validator, the keyword cases against the whole-schema DFA's verdicts, the
// JSON-Schema-Test-Suite's invalid instances, and token masks against stepping every token.
#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "../common/json_schema_suite.h"
#include "constrain/constraint.h"
#include "constrain/grammar.h"
#include "constrain/grammar_generate.h"
#include "constrain/grammar_mask.h"
#include "constrain/json_schema.h"
#include "constrain/keyword_cases.h"
#include "constrain/validator.h"
#include "constrain/vocab.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;

Grammar grammar_of(const std::string& schema, SchemaOptions o = {}) {
  return *schema_to_grammar(ib::parse_json<json>(schema), o).grammar;
}

TEST(Grammar, BalancedParenthesesAgainstBruteForce) {
  // S -> ( "(" S ")" )*: a rule that calls itself between bytes.
  const Grammar g = build_grammar({re_star(re_concat({re_byte('('), re_call(0), re_byte(')')}))}, {"S"}, 0);
  auto balanced = [](const std::string& s) {
    int depth = 0;
    for (char c : s) {
      depth += c == '(' ? 1 : -1;
      if (depth < 0) return false;
    }
    return depth == 0;
  };
  int checked = 0, accepted = 0;
  for (int len = 0; len <= 12; ++len)
    for (uint32_t bits = 0; bits < (1u << len); ++bits) {
      std::string s;
      for (int i = 0; i < len; ++i) s += (bits >> i) & 1 ? ')' : '(';
      const bool ours = grammar_matches(g, s);
      EXPECT_EQ(ours, balanced(s)) << s;
      ++checked;
      accepted += ours;
    }
  EXPECT_EQ(accepted, 1 + 1 + 2 + 5 + 14 + 42 + 132);  // Catalan numbers of the even lengths
  EXPECT_GT(checked, 8000);
  // A prefix is a live position exactly when it can still be balanced.
  GrammarStacks s = grammar_start(g);
  ASSERT_TRUE(grammar_walk(g, s, "(()"));
  EXPECT_FALSE(grammar_accepts(g, s));
  GrammarStacks dead = grammar_start(g);
  EXPECT_FALSE(grammar_walk(g, dead, "())"));
}

TEST(Grammar, UnproductiveRulesAreDeadAndAnUnproductiveStartHasNoDocument) {
  // Rule 1 only calls itself: no finite document; rule 0 offers it beside "x".
  const Grammar g = build_grammar(
      {re_alt({re_byte('x'), re_concat({re_byte('['), re_call(1)})}), re_concat({re_byte('['), re_call(1)})}, {}, 0);
  EXPECT_TRUE(grammar_matches(g, "x"));
  GrammarStacks s = grammar_start(g);
  EXPECT_FALSE(grammar_walk(g, s, "["));  // the only way on leads nowhere
  const Grammar none = build_grammar({re_concat({re_byte('['), re_call(0)})}, {}, 0);
  EXPECT_TRUE(grammar_start(none).empty());
  EXPECT_FALSE(grammar_matches(none, "["));
}

// Random JSON values nested up to `depth` levels, numbers and strings kept simple.
json random_value(std::mt19937_64& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 0 ? 7 : 5));
  switch (kind) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int>(rng() % 2001) - 1000;
    case 3:
      return std::string(rng() % 4, static_cast<char>('a' + rng() % 4));
    case 4:
      return 0.5 * static_cast<double>(rng() % 100);
    case 5: {
      json o = json::object();
      for (int i = static_cast<int>(rng() % 3); i > 0; --i)
        o[std::string(1, static_cast<char>('a' + rng() % 4))] = random_value(rng, depth - 1);
      return o;
    }
    default: {
      json a = json::array();
      for (int i = static_cast<int>(rng() % 3); i > 0; --i) a.push_back(random_value(rng, depth - 1));
      return a;
    }
  }
}

TEST(GrammarSchema, FreeValuesAreAnyJsonAtAnyDepthAsTheParserSays) {
  const Grammar g = grammar_of("true");
  std::mt19937_64 rng(11);
  std::string deep = "1";
  for (int i = 0; i < 40; ++i) deep = i % 2 ? "[" + deep + "]" : "{\"k\":" + deep + "}";
  EXPECT_TRUE(grammar_matches(g, deep));
  // The whole-schema path cuts free values at any_depth levels.
  EXPECT_FALSE(compile_dfa(schema_to_regex(json(true))).matches(deep));
  const std::string alphabet = "{}[],:\"0-.1abtrunlfsx";
  int agreed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string doc = random_value(rng, 6).dump();
    // One random edit: the parser is the reference for what is still JSON.
    const size_t at = rng() % (doc.size() + 1);
    switch (rng() % 4) {
      case 0:
        break;
      case 1:
        doc.insert(at, 1, alphabet[rng() % alphabet.size()]);
        break;
      case 2:
        if (at < doc.size()) doc.erase(at, 1);
        break;
      default:
        if (at < doc.size()) doc[at] = alphabet[rng() % alphabet.size()];
    }
    const bool parser = ib::json_accepts(doc);
    EXPECT_EQ(grammar_matches(g, doc), parser) << doc;
    agreed += grammar_matches(g, doc) == parser;
  }
  EXPECT_EQ(agreed, 3000);
}

TEST(GrammarSchema, RecursiveReferencesAreNotCutOff) {
  const std::string tree =
      R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},)"
      R"("required":["v"],"additionalProperties":false})";
  const json schema = ib::parse_json<json>(tree);
  const SchemaValidator validator(schema);
  const Grammar g = grammar_of(tree);
  const Dfa dfa = compile_dfa(schema_to_regex(schema));  // max_recursion 3
  std::string doc = R"({"v":0})";
  for (int level = 1; level <= 12; ++level) {
    doc = R"({"v":)" + std::to_string(level) + R"(,"kids":[)" + doc + "," + R"({"v":-1})" + "]}";
    ASSERT_TRUE(validator.valid(ib::parse_json<json>(doc)));
    EXPECT_TRUE(grammar_matches(g, doc)) << level;
    if (level > 4) {
      EXPECT_FALSE(dfa.matches(doc)) << level;
    }
  }
  for (const std::string bad : {R"({"v":1,"kids":[{"v":"x"}]})", R"({"kids":[]})", R"({"v":1,"kids":[{"v":2,"kids":[{}]}]})",
                                R"({"v":1,"kids":[{"v":2,"w":3}]})"}) {
    EXPECT_FALSE(validator.valid(ib::parse_json<json>(bad))) << bad;
    EXPECT_FALSE(grammar_matches(g, bad)) << bad;
  }
}

// Recursion that passes through allOf merges of references (an element is a base merged with the
// host whose arrays hold elements, as web-types' CSS contributions): each rule is compiled apart
// from the references its callers are inside of, so no level is cut off at max_recursion.
TEST(GrammarSchema, RecursionThroughMergedReferencesIsNotCutOff) {
  // Four kinds of element, each a base merged with the host, whose arrays a..d hold each kind.
  std::string defs = R"("base":{"type":"object","properties":{"name":{"type":"string"}}},)"
                     R"("host":{"type":"object","properties":{)";
  for (const char* k : {"a", "b", "c", "d"})
    defs += std::string(k == std::string("a") ? "" : ",") + "\"" + k + R"(":{"type":"array","items":{"$ref":"#/$defs/el_)" + k +
            "\"}}";
  defs += "}}";
  for (const char* k : {"a", "b", "c", "d"})
    defs += std::string(",\"el_") + k + R"(":{"allOf":[{"$ref":"#/$defs/base"},{"$ref":"#/$defs/host"}]})";
  const json parsed = ib::parse_json<json>(R"({"$ref":"#/$defs/el_a","$defs":{)" + defs + "}}");
  const SchemaValidator validator(parsed);
  SchemaNotes notes;
  const Grammar g = *schema_to_grammar(parsed, {}, &notes).grammar;
  EXPECT_TRUE(notes.cut_off.empty()) << describe(notes);
  std::string doc = R"({"name":"leaf"})";
  for (int level = 1; level <= 12; ++level) {
    const std::string key(1, static_cast<char>('a' + level % 4));
    doc = R"({"name":"n)" + std::to_string(level) + R"(",")" + key + R"(":[)" + doc + "]}";
    ASSERT_TRUE(validator.valid(ib::parse_json<json>(doc)));
    EXPECT_TRUE(grammar_matches(g, doc)) << level << ": " << doc;
  }
  const std::string bad = R"({"a":[{"b":[{"c":[{"d":[{"a":[{"name":1}]}]}]}]}]})";
  EXPECT_FALSE(validator.valid(ib::parse_json<json>(bad)));
  EXPECT_FALSE(grammar_matches(g, bad));
}

// Every hand-written document of the keyword table: the grammar path says what the whole-schema
// DFA says (the validator labelled them), where the DFA path compiles the case.
TEST(GrammarSchema, KeywordCasesGetTheDfaPathsVerdicts) {
  int cases = 0, docs = 0, gained = 0;
  for (const auto& c : keyword_cases()) {
    if (c.constraint.rfind("regex:", 0) == 0 || c.constraint.rfind("choice:", 0) == 0) continue;
    const json schema = ib::parse_json<json>(c.constraint);
    Dfa dfa;
    try {
      dfa = compile_dfa(schema_to_regex(schema, c.options));
    } catch (const std::exception&) {
      continue;
    }
    const Grammar g = *schema_to_grammar(schema, c.options).grammar;
    ++cases;
    for (const auto& d : c.valid) {
      EXPECT_TRUE(grammar_matches(g, d)) << c.name << ": " << d;
      ++docs;
    }
    for (const auto& d : c.invalid) {
      EXPECT_FALSE(grammar_matches(g, d)) << c.name << ": " << d;
      ++docs;
    }
    // Valid documents the DFA path leaves out by design: the grammar takes the ones a depth
    // cut-off left out (free values, recursion), and the documents it accepts are valid.
    for (const auto& d : c.by_design) {
      const bool ours = grammar_matches(g, d);
      EXPECT_TRUE(!ours || SchemaValidator(schema).valid(ib::parse_json<json>(d))) << c.name << ": " << d;
      gained += ours && !dfa.matches(d);
    }
  }
  std::cout << "by-design documents the grammar path accepts: " << gained << "\n";
  EXPECT_GT(gained, 0);
  EXPECT_GT(cases, 40);
  EXPECT_GT(docs, 200);
}

using testing_support::json_files;
using testing_support::read_text_file;
using testing_support::reorder;

// The suite in both meanings of an absent additionalProperties: no invalid instance accepted, and
// at least as many schemas compiled and valid instances accepted as the whole-schema path.
TEST(GrammarSchema, TestSuiteSoundAndAtLeastTheDfaPathsCoverage) {
  const std::string base = std::string(IB_SOURCE_DIR) + "/tests/data/json-schema-test-suite/";
  int compiled[2] = {0, 0}, accepted[2] = {0, 0};  // [dfa, grammar]
  for (const char* draft : {"4", "6", "7", "2019-09", "2020-12"})
    for (const char* sub : {"", "optional/format/"}) {
      const std::string dir = base + "draft" + draft + "/" + sub;
      for (const auto& f : json_files(dir))
        for (const auto& group : ib::parse_json<json>(read_text_file(dir + f)))
          for (int open = 0; open < 2; ++open) {
            SchemaOptions o;
            o.default_draft = draft;
            o.strict_properties = open == 0;
            std::function<bool(const std::string&)> path[2];
            Dfa d;
            std::shared_ptr<const Grammar> g;
            try {
              d = compile_dfa(schema_to_regex(group["schema"], o));
              path[0] = [&](const std::string& doc) { return d.matches(doc); };
            } catch (const std::exception&) {
            }
            try {
              g = schema_to_grammar(group["schema"], o).grammar;
              path[1] = [&](const std::string& doc) { return grammar_matches(*g, doc); };
            } catch (const std::exception&) {
            }
            if (path[0] && !path[1]) ADD_FAILURE() << "the grammar path refuses " << dir << f << ": " << group["description"];
            for (int p = 0; p < 2; ++p) {
              if (!path[p]) continue;
              ++compiled[p];
              for (const auto& t : group["tests"]) {
                const std::string doc = reorder(t["data"], group["schema"]).dump();
                const bool ok = path[p](doc);
                if (t["valid"].get<bool>())
                  accepted[p] += ok;
                else if (ok && p == 1)
                  ADD_FAILURE() << dir << f << " (" << (open ? "open" : "strict") << "): \""
                                << group["description"].get<std::string>() << "\" accepts invalid " << doc;
              }
            }
          }
    }
  std::cout << "compiled dfa/grammar " << compiled[0] << "/" << compiled[1] << ", valid accepted " << accepted[0] << "/"
            << accepted[1] << "\n";
  EXPECT_GE(compiled[1], compiled[0]);
  EXPECT_GE(accepted[1], accepted[0]);
}

// not, if/else and oneOf over objects and arrays, as real schemas write them (a negated type,
// required keys or value; a discriminator; branches apart by a key one requires and the other
// forbids, by item counts, or only within a type): the grammar path rewrites them into unions of
// schemas whose containers stay rules, none compiled inline, and every document of a generated set
// gets the reference jsonschema package's verdict (tests/data/json-schema/negations.json, made by
// scripts/make-negation-fixtures).
TEST(GrammarSchema, NegationsAndConditionalsMatchTheReference) {
  const json fx = ib::parse_json<json>(read_text_file(std::string(IB_SOURCE_DIR) + "/tests/data/json-schema/negations.json"));
  const json& docs = fx["documents"];
  SchemaOptions o;
  o.strict_properties = false;
  int checked = 0;
  for (const auto& c : fx["cases"]) {
    const SchemaGrammar sg = schema_to_grammar(c["schema"], o);
    EXPECT_EQ(sg.inlined_rules, 0) << c["schema"].dump();
    const std::string verdicts = c["valid"].get<std::string>();
    ASSERT_EQ(verdicts.size(), docs.size());
    for (size_t i = 0; i < docs.size(); ++i) {
      // Accepted in some order of its top-level keys (the documents nest no object of two keys):
      // the test is of languages, not of which order the compiler writes.
      std::vector<std::string> keys;
      if (docs[i].is_object())
        for (const auto& [k, v] : docs[i].items()) keys.push_back(k);
      std::sort(keys.begin(), keys.end());
      bool ours = false;
      do {
        json d = docs[i];
        if (d.is_object()) {
          d = json::object();
          for (const auto& k : keys) d[k] = docs[i][k];
        }
        ours = ours || grammar_matches(*sg.grammar, d.dump());
      } while (std::next_permutation(keys.begin(), keys.end()));
      EXPECT_EQ(ours, verdicts[i] == '1') << c["schema"].dump() << " on " << docs[i].dump();
      ++checked;
    }
  }
  EXPECT_GT(checked, 3000);
}

// Every token of GPT-2's vocabulary at positions of a nested document: the mask allows exactly the
// tokens whose bytes keep a stack alive, and EOS exactly where the document may end.
TEST(GrammarMask, AllowsExactlyTheTokensThatStepThroughTheGrammar) {
  auto vocab = load_vocabulary("gpt2");
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"tags":{"type":"array","items":{"$ref":"#"}},)"
      R"("n":{"type":"integer"}},"required":["name"]})";
  auto g = std::make_shared<const Grammar>(grammar_of(schema));
  GrammarTokenMasker masker(g, vocab);
  const std::string doc = R"({"name":"ab","tags":[{"name":"c","tags":[]},{"name":"d","n":12}],"n":-3})";
  ASSERT_TRUE(grammar_matches(*g, doc));
  GrammarStacks at = grammar_start(*g);
  int positions = 0;
  for (size_t i = 0; i <= doc.size(); ++i) {
    if (i % 3 == 0 || i == doc.size()) {  // every third byte: a position mid-token as well
      const uint32_t* m = masker.mask(at);
      for (int32_t t = 0; t < vocab->size(); ++t) {
        const bool allowed = t == vocab->eos ? grammar_accepts(*g, at) : !grammar_advance(*g, *vocab, at, t).empty();
        ASSERT_EQ(mask_allows(m, t), allowed)
            << "at byte " << i << " token " << t << " '" << vocab->token_bytes[static_cast<size_t>(t)] << "'";
      }
      ++positions;
    }
    if (i < doc.size()) {
      ASSERT_TRUE(grammar_walk(*g, at, doc.substr(i, 1)));
    }
  }
  EXPECT_GT(positions, 20);
}

}  // namespace
}  // namespace ib::constrain

namespace ib::constrain {
namespace {

// #49's three defects under the JSON Schema meaning (strict_properties false), on both paths: a
// keyword constrains its own type only, and an object that is not all six keys is one branch only.
TEST(GrammarSchema, TheJsonSchemaMeaningOnBothPaths) {
  struct MeaningCase {
    const char* schema;
    std::vector<std::string> valid, invalid;
  };
  const std::vector<MeaningCase> cases = {
      {R"({"format":"positiveInteger"})", {"2", "\"x\"", "null", "[1]"}, {"tru"}},
      {R"({"additionalProperties":true})", {"\"str\"", "{\"a\":[{}]}", "3"}, {"{\"a\"}"}},
      {R"({"format":"date"})", {"2", "\"2024-02-29\""}, {"\"2023-02-29\""}},
      {R"({"minLength":2,"minimum":5})", {"\"ab\"", "7", "{}"}, {"\"a\"", "4"}},
      {R"({"oneOf":[{"type":"object"},{"type":"object","required":["a","b","c","d","e","f"]}]})",
       // Lacking one of the first three keys (the over-approximation of six in any order passes the
       // product cap, three fit): {"a":1,...,"e":5} is lost by design.
       {"{}", "{\"a\":1}", "{\"d\":4,\"e\":5,\"f\":6}"},
       {"{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6}", "[]"}},
  };
  SchemaOptions o;
  o.strict_properties = false;
  for (const auto& c : cases) {
    const json schema = ib::parse_json<json>(c.schema);
    const SchemaValidator v(schema);
    const Dfa dfa = compile_dfa(schema_to_regex(schema, o));
    const Grammar g = *schema_to_grammar(schema, o).grammar;
    for (const auto& d : c.valid) {
      ASSERT_TRUE(v.valid(ib::parse_json<json>(d))) << c.schema << " " << d;
      EXPECT_TRUE(dfa.matches(d)) << c.schema << " " << d;
      EXPECT_TRUE(grammar_matches(g, d)) << c.schema << " " << d;
    }
    for (const auto& d : c.invalid) {
      EXPECT_FALSE(dfa.matches(d)) << c.schema << " " << d;
      EXPECT_FALSE(grammar_matches(g, d)) << c.schema << " " << d;
    }
  }
}

}  // namespace
}  // namespace ib::constrain

namespace ib::constrain {
namespace {

// The fewest bytes to a finished document by breadth-first search over positions (the reference
// for GrammarDistances, which sums per-frame distances instead).
int shortest_completion(const Grammar& g, const GrammarStacks& from, int limit) {
  std::vector<GrammarStacks> level = {from};
  std::set<std::string> seen;
  GrammarStacks next;
  for (int depth = 0; depth <= limit; ++depth) {
    std::vector<GrammarStacks> more;
    for (const auto& at : level) {
      if (grammar_accepts(g, at)) return depth;
      for (int b = 0; b < 256; ++b) {
        grammar_step(g, at, static_cast<uint8_t>(b), next);
        if (next.empty()) continue;
        std::string key;
        for (const auto& st : next)
          for (const auto& f : st) key += std::to_string(f.rule) + "." + std::to_string(f.state) + (&f == &st.back() ? "|" : ",");
        if (seen.insert(key).second) more.push_back(next);
      }
    }
    level = std::move(more);
  }
  return -1;
}

TEST(GrammarGenerate, DistancesAreTheShortestCompletionsAndRandomDocumentsAreValid) {
  const std::string tree =
      R"({"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}},)"
      R"("tag":{"enum":["a","bb"]}},"required":["v","tag"],"additionalProperties":false})";
  const json schema = ib::parse_json<json>(tree);
  const SchemaValidator validator(schema);
  const Grammar g = grammar_of(tree);
  const GrammarDistances d = grammar_distances(g);
  EXPECT_EQ(d.finish(grammar_start(g)), static_cast<int32_t>(std::string(R"({"v":0,"tag":"a"})").size()));
  std::mt19937_64 rng(5);
  int documents = 0, positions = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string doc = random_grammar_document(g, d, rng, 60);
    ASSERT_TRUE(grammar_matches(g, doc)) << doc;
    const json parsed = ib::parse_json_or_discarded<json>(doc);
    ASSERT_FALSE(parsed.is_discarded()) << doc;
    EXPECT_TRUE(validator.valid(parsed)) << doc;
    ++documents;
    if (i < 4) {  // every prefix of a few documents: the summed distance is the search's
      GrammarStacks at = grammar_start(g);
      for (size_t k = 0; k <= doc.size(); ++k) {
        const int32_t ours = d.finish(at);
        ASSERT_EQ(ours, shortest_completion(g, at, ours + 1)) << doc.substr(0, k);
        ++positions;
        if (k < doc.size()) {
          ASSERT_TRUE(grammar_walk(g, at, doc.substr(k, 1)));
        }
      }
    }
  }
  EXPECT_EQ(documents, 40);
  EXPECT_GT(positions, 40);
}

}  // namespace
}  // namespace ib::constrain

namespace ib::constrain {
namespace {

// A schema whose DFA has 2^17 states (the 17th byte from the end is an `a`): past a CPU budget
// its compile stops at once on both paths, naming max_compile_seconds; a small schema fits.
TEST(CompileBudget, ASchemaPastItsCpuSecondsIsRefusedOnBothPaths) {
  const json heavy = ib::parse_json<json>(R"({"type":"string","pattern":"^[ab]*a[ab]{16}$"})");
  SchemaOptions o;
  o.max_compile_seconds = 0.02;
  for (SchemaPath path : {SchemaPath::Dfa, SchemaPath::Grammar, SchemaPath::Auto}) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      compile_schema(heavy, o, path);
      ADD_FAILURE() << "compiled within 0.02 s";
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword(), "max_compile_seconds") << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  }
  EXPECT_NO_THROW(
      compile_schema(ib::parse_json<json>(R"({"type":"object","properties":{"a":{"type":"integer"}}})"), o, SchemaPath::Grammar));
  // An inner guard cannot extend an outer one's deadline.
  CompileBudget outer(0.01);
  {
    CompileBudget inner(100);
    EXPECT_THROW(compile_dfa(schema_to_regex(heavy)), CompileBudgetExceeded);
  }
}

}  // namespace
}  // namespace ib::constrain
