// The regex engine: patterns against accept/reject tables, UTF-8 ranges, DFA minimality.
#include <regex>

#include <gtest/gtest.h>

#include "constrain/automaton.h"
#include "constrain/constraint.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "constrain/token_index.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

Dfa dfa(const std::string& pattern) {
  ParsedRegex p = parse_regex(pattern);
  return compile_dfa(p.re);
}

struct Case {
  const char* pattern;
  std::vector<std::string> accept, reject;
};

TEST(Regex, PatternTable) {
  const std::vector<Case> cases = {
      {"abc", {"abc"}, {"", "ab", "abcd", "abd"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"a*", {"", "a", "aaaa"}, {"b", "ab"}},
      {"(ab)+", {"ab", "abab"}, {"", "a", "aba"}},
      {"colou?r", {"color", "colour"}, {"colouur"}},
      {"a{3}", {"aaa"}, {"aa", "aaaa"}},
      {"a{2,}", {"aa", "aaaaaa"}, {"a"}},
      {"a{1,3}b", {"ab", "aaab"}, {"b", "aaaab"}},
      {"a{,3}", {"a{,3}"}, {"a"}},  // not a quantifier: literal braces (ECMAScript Annex B)
      {"[a-cx]+", {"abcx", "x"}, {"d", ""}},
      {"[^0-9]", {"a", "é", "\xe2\x82\xac"}, {"5", "", "ab"}},
      {"\\d{3}-\\d{4}", {"555-1234"}, {"5551234", "55-1234"}},
      {"\\w+@\\w+\\.com", {"me@example.com"}, {"me@ex-ample.com"}},
      {"\\s", {" ", "\t", "\xc2\xa0"}, {"a"}},
      {"\\D\\W\\S", {"a!b"}, {"1!b", "a_b", "a! "}},
      {".", {"a", "\xe2\x82\xac", "\xf0\x9f\x98\x80"}, {"\n", "", "\xff", "\xed\xa0\x80"}},  // no surrogates, no bad bytes
      {"[\\u00e0-\\u00ff]", {"\xc3\xa0", "\xc3\xbf"}, {"\xc3\x9f", "a"}},
      {"\\u{1F600}", {"\xf0\x9f\x98\x80"}, {"\xf0\x9f\x98\x81"}},
      {"(?:x|y)z", {"xz", "yz"}, {"z"}},
      {"(?<year>\\d{4})", {"2026"}, {"26"}},
      {"a+?b", {"ab", "aab"}, {"b"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/", {".*+?()[]{}|\\/"}, {}},
      {"[]", {}, {"", "a"}},
      {"[^]", {"a", "\n"}, {""}},
      {"[\\]a-]", {"]", "a", "-"}, {"b"}},
      {"\\x41\\t", {"A\t"}, {"A "}},
  };
  for (const auto& c : cases) {
    Dfa d = dfa(c.pattern);
    for (const auto& s : c.accept) EXPECT_TRUE(d.matches(s)) << "/" << c.pattern << "/ should accept '" << s << "'";
    for (const auto& s : c.reject) EXPECT_FALSE(d.matches(s)) << "/" << c.pattern << "/ should reject '" << s << "'";
  }
}

TEST(Regex, AnchorsAreReportedNotMatched) {
  ParsedRegex p = parse_regex("^ab$");
  EXPECT_TRUE(p.anchored_start);
  EXPECT_TRUE(p.anchored_end);
  EXPECT_TRUE(compile_dfa(p.re).matches("ab"));
  ParsedRegex q = parse_regex("a\\$");
  EXPECT_FALSE(q.anchored_end);
  EXPECT_TRUE(compile_dfa(q.re).matches("a$"));
}

TEST(Regex, UnsupportedConstructsNameTheOffset) {
  for (const auto& [pattern, what] : std::vector<std::pair<std::string, std::string>>{{"a(?=b)", "lookaround"},
                                                                                      {"(a)\\1", "backreferences"},
                                                                                      {"\\bword", "word boundaries"},
                                                                                      {"a^b", "anchors"},
                                                                                      {"(ab", "missing ')'"},
                                                                                      {"ab)", "unexpected ')'"},
                                                                                      {"[ab", "missing ']'"},
                                                                                      {"*a", "nothing to repeat"},
                                                                                      {"a{3,1}", "m < n"},
                                                                                      {"[z-a]", "out of order"},
                                                                                      {"\\q", "unknown escape"}}) {
    try {
      parse_regex(pattern);
      ADD_FAILURE() << pattern << " parsed";
    } catch (const RegexError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << pattern << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("at offset"), std::string::npos) << e.what();
    }
  }
}

TEST(Regex, Utf8RangesMatchExactlyTheirCodePoints) {
  // Every code point of a range crossing all four encoding lengths, and its neighbours.
  Re r = re_code_points({{0x70, 0x10400}});
  Dfa d = compile_dfa(r);
  auto enc = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80)
      s += static_cast<char>(cp);
    else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  for (uint32_t cp = 0; cp < 0x10500; ++cp) {
    bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    bool want = cp >= 0x70 && cp <= 0x10400 && !surrogate;
    ASSERT_EQ(d.matches(enc(cp)), want) << std::hex << cp;
  }
  EXPECT_FALSE(d.matches("\xc0\xaf"));  // overlong
}

TEST(Automaton, MinimalAndDeterministic) {
  // (a|b)*abb has a 4-state minimal DFA; the dead state is not stored.
  Dfa d = dfa("(a|b)*abb");
  EXPECT_EQ(d.num_states, 4);
  EXPECT_TRUE(d.matches("abb"));
  EXPECT_TRUE(d.matches("babaabb"));
  EXPECT_FALSE(d.matches("abba"));
  // Equivalent patterns give the same state count.
  EXPECT_EQ(dfa("(a|b)*abb").num_states, dfa("(b|a)*(a)(b)(b)").num_states);
  EXPECT_EQ(dfa("x").forced_byte(0), 'x');
  EXPECT_EQ(dfa("x|y").forced_byte(0), -1);
}

TEST(Automaton, LimitsAreErrors) {
  CompileLimits tight;
  tight.max_dfa_states = 10;
  EXPECT_THROW(compile_dfa(parse_regex("a{20}").re, tight), RegexError);
  EXPECT_EQ(compile_dfa(re_never()).num_states, 1);
  EXPECT_FALSE(compile_dfa(re_never()).matches(""));
}

// A copy of the AST in which no node is shared: the NFA builder finds no fragment to reuse, as
// when every path to a sub-expression got its own copy.
Re unshared(const Re& r) {
  auto n = std::make_shared<RegexNode>(*r);
  for (auto& k : n->kids) k = unshared(k);
  return n;
}

void expect_same_dfa(const Dfa& a, const Dfa& b, const std::string& what) {
  EXPECT_EQ(a.start, b.start) << what;
  EXPECT_EQ(a.num_states, b.num_states) << what;
  EXPECT_EQ(a.num_classes, b.num_classes) << what;
  EXPECT_EQ(a.byte_class, b.byte_class) << what;
  EXPECT_TRUE(a.next == b.next) << what;
  EXPECT_TRUE(a.accepting == b.accepting) << what;
}

// The builder reuses the NFA fragment of a sub-expression the AST shares when its continuation is
// the same; the minimal DFA (unique, numbered canonically) must not change.
TEST(Automaton, SharedSubexpressionsGiveTheDfaOfSeparateCopies) {
  const Re x = parse_regex("a|bc?").re;
  const Re nullable = parse_regex("(ab)?").re;
  const Re never = re_never();
  const std::vector<std::pair<const char*, Re>> cases = {
      {"x x x", re_concat({x, x, x})},
      {"x y | y x", re_alt({re_concat({x, nullable}), re_concat({nullable, x})})},
      {"x{2,}", re_repeat(x, 2, -1)},
      {"x{1,4} x", re_concat({re_repeat(x, 1, 4), x})},
      {"(y)* y", re_concat({re_star(nullable), nullable})},
      {"(x x{0,3}){0,2} x", re_concat({re_repeat(re_concat({x, re_repeat(x, 0, 3)}), 0, 2), x})},
      {"(x | never x) x*", re_concat({re_alt({x, re_concat({never, x})}), re_star(x)})},
      {"((x|y)*)*", re_star(re_star(re_alt({x, nullable})))},
  };
  for (const auto& [what, r] : cases) expect_same_dfa(compile_dfa(r), compile_dfa(unshared(r)), what);

  // The bundled schemas: the compiler memoizes object tails, which share every later member.
  for (const char* name : {"tool_call", "tool_union", "person", "order", "calendar_event", "extraction", "tree"}) {
    SchemaOptions o;
    if (std::string(name) == "tree") o.max_recursion = 2;  // unshared, depth 3 needs 420k NFA states
    const Re r = schema_to_regex(ib::parse_json<nlohmann::ordered_json>(constraint_source(name)), o);
    const Dfa d = compile_dfa(r);
    expect_same_dfa(d, compile_dfa(unshared(r)), name);
    // Minimal: Moore refinement run to its fixpoint tells every state apart.
    EXPECT_EQ(mask_classes(d, 1u << 20).representative.size(), static_cast<size_t>(d.num_states)) << name;
  }
}

// Minimisation against brute force: random patterns over {a, b, c}; the DFA accepts what
// std::regex accepts (every string of up to 4 letters), and every two states, dead included, are
// told apart by some string (table filling).
std::string random_pattern(uint64_t* seed, int depth) {
  auto next = [&](uint64_t mod) {
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    return (*seed >> 33) % mod;
  };
  const char* atoms[] = {"a", "b", "c", "[ab]", "[^a]", "(ab)", "(a|c)"};
  if (depth == 0) return atoms[next(7)];
  switch (next(6)) {
    case 0:
      return random_pattern(seed, depth - 1) + random_pattern(seed, depth - 1);
    case 1:
      return "(" + random_pattern(seed, depth - 1) + "|" + random_pattern(seed, depth - 1) + ")";
    case 2:
      return "(" + random_pattern(seed, depth - 1) + ")*";
    case 3:
      return "(" + random_pattern(seed, depth - 1) + ")?";
    case 4:
      return "(" + random_pattern(seed, depth - 1) + "){1,3}";
    default:
      return random_pattern(seed, depth - 1) + "(" + random_pattern(seed, depth - 1) + ")+";
  }
}

// Table filling over the states plus "dead" (index n): a pair is told apart when one accepts and
// the other not, or some class leads to a pair told apart.
std::vector<std::vector<uint8_t>> distinguishable(const Dfa& d) {
  const int32_t n = d.num_states;
  auto to = [&](int32_t s, int32_t c) {
    if (s == n) return n;
    const int32_t t = d.next[static_cast<size_t>(s) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(c)];
    return t < 0 ? n : t;
  };
  auto acc = [&](int32_t s) { return s < n && d.accepting[static_cast<size_t>(s)]; };
  std::vector<std::vector<uint8_t>> apart(static_cast<size_t>(n) + 1, std::vector<uint8_t>(static_cast<size_t>(n) + 1, 0));
  for (int32_t p = 0; p <= n; ++p)
    for (int32_t q = 0; q <= n; ++q) apart[static_cast<size_t>(p)][static_cast<size_t>(q)] = acc(p) != acc(q);
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t p = 0; p <= n; ++p)
      for (int32_t q = 0; q <= n; ++q)
        for (int32_t c = 0; c < d.num_classes && !apart[static_cast<size_t>(p)][static_cast<size_t>(q)]; ++c)
          if (apart[static_cast<size_t>(to(p, c))][static_cast<size_t>(to(q, c))])
            apart[static_cast<size_t>(p)][static_cast<size_t>(q)] = 1, changed = true;
  }
  return apart;
}

TEST(Automaton, RandomPatternsGiveMinimalDfasOfTheirLanguage) {
  uint64_t seed = 12345;
  std::vector<std::string> words = {""};
  for (size_t i = 0; i < words.size() && words[i].size() < 4; ++i)
    for (char c : {'a', 'b', 'c'}) words.push_back(words[i] + c);
  for (int trial = 0; trial < 120; ++trial) {
    const std::string pattern = random_pattern(&seed, 1 + trial % 3);
    const Dfa d = dfa(pattern);
    const std::regex want(pattern);
    for (const std::string& w : words) ASSERT_EQ(d.matches(w), std::regex_match(w, want)) << pattern << " on '" << w << "'";
    const auto apart = distinguishable(d);
    for (int32_t p = 0; p < d.num_states; ++p)
      for (int32_t q = p + 1; q <= d.num_states; ++q)  // q == num_states: dead (every stored state is live)
        ASSERT_TRUE(apart[static_cast<size_t>(p)][static_cast<size_t>(q)]) << pattern << ": states " << p << ", " << q;
  }
}

// The product construction (intersection, difference, exactly one of n) against brute force over
// every word of length <= 5 on {a, b, c}, on random patterns; the results are minimal, and a
// product embedded back into a regex (re_automaton) keeps its language inside a concatenation.
TEST(Automaton, ProductsMatchBruteForceOnAllShortWords) {
  uint64_t seed = 777;
  std::vector<std::string> words = {""};
  for (size_t i = 0; i < words.size() && words[i].size() < 5; ++i)
    for (char c : {'a', 'b', 'c'}) words.push_back(words[i] + c);
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<std::string> pats;
    for (int k = 0; k < 3; ++k) pats.push_back(random_pattern(&seed, 1 + (trial + k) % 3));
    std::vector<Dfa> d;
    std::vector<std::regex> want;
    for (const auto& p : pats) {
      d.push_back(dfa(p));
      want.emplace_back(p);
    }
    const Dfa both = intersect_dfa(d[0], d[1]);
    const Dfa minus = difference_dfa(d[0], d[1]);
    const Dfa minus2 = product_dfa({&d[0], &d[1], &d[2]}, ProductRule::Difference);
    const Dfa one = product_dfa({&d[0], &d[1], &d[2], &d[0], &d[1], &d[2]}, ProductRule::ExactlyOne);
    // Over-approximations of the others: P_1's over-approximation is (P_1)|(P_2).
    const Dfa wider = dfa("(" + pats[1] + ")|(" + pats[2] + ")");
    const Dfa one_over = product_dfa({&d[0], &d[1], &d[0], &wider}, ProductRule::ExactlyOne);
    const Dfa embedded =
        compile_dfa(re_concat({re_literal("c"), re_automaton(std::make_shared<const Dfa>(both)), re_literal("a")}));
    const std::string what = pats[0] + " / " + pats[1] + " / " + pats[2];
    for (const std::string& w : words) {
      const bool m0 = std::regex_match(w, want[0]), m1 = std::regex_match(w, want[1]), m2 = std::regex_match(w, want[2]);
      ASSERT_EQ(both.matches(w), m0 && m1) << what << " on '" << w << "'";
      ASSERT_EQ(minus.matches(w), m0 && !m1) << what << " on '" << w << "'";
      ASSERT_EQ(minus2.matches(w), m0 && !m1 && !m2) << what << " on '" << w << "'";
      ASSERT_EQ(one.matches(w), m0 + m1 + m2 == 1) << what << " on '" << w << "'";
      ASSERT_EQ(one_over.matches(w), (m0 && !(m1 || m2)) || (m1 && !m0)) << what << " on '" << w << "'";
      ASSERT_EQ(embedded.matches("c" + w + "a"), m0 && m1) << what << " on '" << w << "'";
    }
    for (const Dfa* x : {&both, &minus, &minus2, &one, &one_over}) {
      if (x->num_states == 1 && !x->accepting[0]) continue;  // the empty language: one dead state
      const auto apart = distinguishable(*x);
      for (int32_t p = 0; p < x->num_states; ++p)
        for (int32_t q = p + 1; q <= x->num_states; ++q)
          ASSERT_TRUE(apart[static_cast<size_t>(p)][static_cast<size_t>(q)]) << what << ": states " << p << ", " << q;
    }
  }
}

TEST(Automaton, ProductLimitIsAnErrorAndEmptyProductsAreEmpty) {
  const Dfa a = dfa("[ab]{0,40}"), b = dfa("(a|b)*a(a|b){6}");  // 41 x 128 reachable pairs
  CompileLimits tight;
  tight.max_dfa_states = 100;
  try {
    intersect_dfa(a, b, tight);
    FAIL() << "no error";
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 100 states"), std::string::npos) << e.what();
  }
  const Dfa none = intersect_dfa(dfa("a+"), dfa("b+"));
  EXPECT_FALSE(none.matches("a"));
  EXPECT_EQ(re_automaton(std::make_shared<const Dfa>(none))->kind, RegexNode::Kind::Never);
  EXPECT_EQ(difference_dfa(dfa("a{2,4}"), dfa("a{1,9}")).num_states, 1);
}

// #19 item 2: 30,000 nested groups overflowed the stack; past 256 levels it is an error.
TEST(Regex, DeepNestingIsAnErrorNotACrash) {
  auto nested = [](int n) { return std::string(static_cast<size_t>(n), '(') + "a" + std::string(static_cast<size_t>(n), ')'); };
  EXPECT_NO_THROW(parse_regex(nested(256)));
  try {
    parse_regex(nested(30000));
    ADD_FAILURE() << "30,000 nested groups parsed";
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("groups nest deeper than 256 levels"), std::string::npos) << e.what();
  }
}

// #19 item 5: stacked quantifiers (a??????…) nested the AST one level per character and the NFA
// construction overflowed the stack. ECMA-262 refuses them ("nothing to repeat"), and so do we.
TEST(Regex, StackedQuantifiersAreSyntaxErrors) {
  for (const char* bad : {"a**", "a+*", "a{2}{3}", "a???", "a*??", "(ab)?{2}", "a{1,2}+"}) {
    try {
      parse_regex(bad);
      ADD_FAILURE() << bad << " parsed";
    } catch (const RegexError& e) {
      EXPECT_NE(std::string(e.what()).find("nothing to repeat"), std::string::npos) << e.what();
    }
  }
  // One quantifier with its lazy mark, and a literal '{' after a quantifier, stay accepted.
  for (const char* good : {"a*?", "a+?", "a??", "a{2}?", "a{2,}?", "a*{", "a{2}{x"}) EXPECT_NO_THROW(parse_regex(good)) << good;
  EXPECT_TRUE(compile_dfa(parse_regex("a*{").re).matches("aaa{"));
  try {
    parse_regex("ab*+c");
    ADD_FAILURE();
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("at offset 3"), std::string::npos) << e.what();
  }
}

// #19 item 10: an unanchored a{20000} (a schema's `pattern`) keeps every count alive at once, so
// the DFA's state sets hold ~n²/2 NFA states: 45 bytes of schema passed 8 GB. The sets' total
// size is bounded, and past it the error says so.
TEST(Automaton, StateSetsPastTheirBoundAreAnErrorNotGigabytes) {
  const Re unanchored = re_concat({re_star(re_any_char()), parse_regex("a{20000}").re, re_star(re_any_char())});
  try {
    compile_dfa(unanchored);
    ADD_FAILURE() << "an unanchored a{20000} compiled";
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("NFA states in all"), std::string::npos) << e.what();
  }
  EXPECT_EQ(compile_dfa(parse_regex("a{20000}").re).num_states, 20001);  // anchored: linear, fine
}

// The NFA construction's own bound, for expressions built by the API rather than parsed.
TEST(Automaton, DeepExpressionIsAnErrorNotACrash) {
  Re re = re_literal("ab");
  // Alternation inside concatenation inside alternation…: neither flattens into the other.
  // (2000 levels: past the bound, and still few enough for the AST's own recursive destruction
  // in an AddressSanitizer build.)
  for (int i = 0; i < 1000; ++i) re = re_alt({re_concat({re, re_byte('d')}), re_byte('c')});
  try {
    compile_dfa(re);
    ADD_FAILURE() << "an expression 2000 levels deep compiled";
  } catch (const RegexError& e) {
    EXPECT_NE(std::string(e.what()).find("nests deeper than 1500 levels"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ib::constrain
