// A grammar compiles its rules on first use (constrain/grammar.h), with whether each rule can
// finish, and how few bytes finish it, read off the bodies' regexes (grammar_lengths.h). Checked
// against the eager method it replaced: every rule's DFA compiled, liveness and distances relaxed
// to a fixed point over all of them together, reachability followed through the DFAs' call edges.
#include <array>
#include <cstdio>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "constrain/constraint.h"
#include "constrain/grammar.h"
#include "constrain/grammar_generate.h"
#include "constrain/grammar_lengths.h"
#include "constrain/schema_corpus.h"
#include "core/json_input.h"

namespace ib::constrain {
namespace {

using json = nlohmann::ordered_json;

// The eager reference: reachability through compiled call edges, then liveness and distances to
// a fixed point over every reached rule's DFA.
struct EagerGrammarFacts {
  std::set<int32_t> reached;
  std::vector<std::vector<uint8_t>> live;
  std::vector<std::vector<int32_t>> dist;
};

EagerGrammarFacts eager_facts(const Grammar& g, const std::array<bool, 256>* usable) {
  EagerGrammarFacts f;
  std::vector<int32_t> todo = {g.start};
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    if (!f.reached.insert(r).second) continue;
    for (const auto& c : g.rule(r).calls) todo.push_back(c.rule);
  }
  f.live.resize(g.size());
  f.dist.resize(g.size());
  for (int32_t r : f.reached) {
    const Dfa& d = g.rule(r).dfa;
    f.live[static_cast<size_t>(r)].assign(static_cast<size_t>(d.num_states), 0);
    f.dist[static_cast<size_t>(r)].assign(static_cast<size_t>(d.num_states), kNoDistance);
    for (int32_t s = 0; s < d.num_states; ++s)
      if (d.accepting[static_cast<size_t>(s)]) {
        f.live[static_cast<size_t>(r)][static_cast<size_t>(s)] = 1;
        f.dist[static_cast<size_t>(r)][static_cast<size_t>(s)] = 0;
      }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t r : f.reached) {
      const GrammarRule& rule = g.rule(r);
      const Dfa& d = rule.dfa;
      auto& live = f.live[static_cast<size_t>(r)];
      auto& dist = f.dist[static_cast<size_t>(r)];
      // A class is usable when one of its bytes is (the marker bytes' class leads nowhere).
      std::vector<uint8_t> class_usable(static_cast<size_t>(d.num_classes), 0);
      for (int b = 0; b < 256; ++b)
        if (!usable || (*usable)[static_cast<size_t>(b)]) class_usable[d.byte_class[static_cast<size_t>(b)]] = 1;
      for (int32_t s = d.num_states - 1; s >= 0; --s) {
        int64_t best = dist[static_cast<size_t>(s)];
        bool l = live[static_cast<size_t>(s)] != 0;
        for (int32_t c = 0; c < d.num_classes; ++c) {
          const int32_t t = d.next[static_cast<size_t>(s) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(c)];
          if (t < 0) continue;
          l = l || live[static_cast<size_t>(t)];
          if (class_usable[static_cast<size_t>(c)] && dist[static_cast<size_t>(t)] != kNoDistance)
            best = std::min<int64_t>(best, 1 + int64_t{dist[static_cast<size_t>(t)]});
        }
        for (int32_t k = rule.call_begin[static_cast<size_t>(s)]; k < rule.call_begin[static_cast<size_t>(s) + 1]; ++k) {
          const auto& c = rule.calls[static_cast<size_t>(k)];
          const int32_t start = g.rule(c.rule).dfa.start;
          l = l || (live[static_cast<size_t>(c.ret)] && f.live[static_cast<size_t>(c.rule)][static_cast<size_t>(start)]);
          const int32_t inner = f.dist[static_cast<size_t>(c.rule)][static_cast<size_t>(start)];
          if (inner != kNoDistance && dist[static_cast<size_t>(c.ret)] != kNoDistance)
            best = std::min<int64_t>(best, int64_t{inner} + dist[static_cast<size_t>(c.ret)]);
        }
        if (l && !live[static_cast<size_t>(s)]) {
          live[static_cast<size_t>(s)] = 1;
          changed = true;
        }
        if (best < dist[static_cast<size_t>(s)]) {
          dist[static_cast<size_t>(s)] = static_cast<int32_t>(best);
          changed = true;
        }
      }
    }
  }
  return f;
}

// Compares a lazily built grammar's facts with the eager reference's; returns the rules checked.
size_t expect_eager_facts(const Grammar& g, const std::string& what) {
  std::array<bool, 256> printable{};
  for (int b = 0x20; b < 0x7F; ++b) printable[static_cast<size_t>(b)] = true;
  const GrammarDistances all(g, nullptr), usable(g, &printable);  // before any rule is compiled
  g.compile_all();
  EXPECT_EQ(g.compiled_rules(), g.reachable_rules()) << what;
  const EagerGrammarFacts ref = eager_facts(g, nullptr), ref_usable = eager_facts(g, &printable);
  EXPECT_EQ(ref.reached.size(), g.reachable_rules()) << what;
  for (int32_t r : ref.reached) {
    const GrammarRule& rule = g.rule(r);
    const auto i = static_cast<size_t>(r);
    EXPECT_EQ(g.productive(r), ref.live[i][static_cast<size_t>(rule.dfa.start)] != 0) << what << " rule " << r;
    const int32_t start_dist = ref.dist[i][static_cast<size_t>(rule.dfa.start)];
    EXPECT_EQ(g.min_length(r), start_dist == kNoDistance ? Grammar::kNoLength : start_dist) << what << " rule " << r;
    EXPECT_EQ(rule.live, ref.live[i]) << what << " rule " << r;
    EXPECT_EQ(all.of(r), ref.dist[i]) << what << " rule " << r;
    EXPECT_EQ(usable.of(r), ref_usable.dist[i]) << what << " rule " << r;
  }
  return ref.reached.size();
}

TEST(LazyGrammar, LivenessAndDistancesAreTheEagerFixedPointsOnCorpusSchemas) {
  SchemaOptions o;
  o.strict_properties = false;
  size_t schemas = 0, rules = 0;
  for (const auto& e : load_corpus(corpus_path())) {
    if (rules >= 600) break;
    SchemaGrammar sg;
    try {
      CompileBudget budget(0.2);  // the test's time: schemas whose regexes alone take longer are left out
      sg = schema_to_grammar(e.schema, o);
    } catch (const std::exception&) {
      continue;
    }
    if (sg.grammar->reachable_rules() > 120) continue;  // the test's time
    ++schemas;
    rules += expect_eager_facts(*sg.grammar, e.id);
  }
  EXPECT_GE(schemas, 60u);
  EXPECT_GE(rules, 600u);
  std::printf("%zu schemas, %zu rules\n", schemas, rules);
}

TEST(LazyGrammar, UnproductiveRulesAndBodiesThatHideTheirCalls) {
  // Rule 1 only calls itself (no finite document), rule 2 is an automaton that holds a call
  // marker (its calls cannot be read off the regex: compiled at construction), rule 3 is never
  // reached.
  const Dfa hidden = compile_dfa(re_concat({re_byte('<'), re_call(0), re_byte('>')}));
  const Grammar g = build_grammar(
      {re_alt({re_byte('x'), re_concat({re_byte('['), re_call(1)}), re_concat({re_byte('('), re_call(2), re_byte(')')})}),
       re_concat({re_byte('['), re_call(1)}), re_automaton(std::make_shared<const Dfa>(hidden)), re_literal("unused")},
      {}, 0);
  EXPECT_FALSE(g.readable(2));
  EXPECT_EQ(g.compiled_rules(), 2u);  // the start and the hidden body
  EXPECT_EQ(g.reachable_rules(), 3u);
  EXPECT_FALSE(g.productive(1));
  EXPECT_TRUE(g.productive(2));
  EXPECT_FALSE(g.productive(3));
  EXPECT_EQ(g.min_length(2), 3);  // "<x>"
  EXPECT_TRUE(grammar_matches(g, "(<(<x>)>)"));
  EXPECT_FALSE(grammar_matches(g, "[x"));
  EXPECT_EQ(expect_eager_facts(g, "hand-built"), 3u);
}

TEST(LazyGrammar, RulesCompileWhenAParseFirstEntersThem) {
  // Twelve object properties, each its own rule (schemas of different text: equal text is one
  // rule): compiling the schema compiles the start rule only.
  json schema = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 12; ++i)
    schema["properties"]["p" + std::to_string(i)] = {{"type", "object"},
                                                     {"properties", {{"v" + std::to_string(i), {{"type", "integer"}}}}}};
  SchemaOptions o;
  o.strict_properties = false;
  const auto sg = schema_to_grammar(schema, o);
  const Grammar& g = *sg.grammar;
  EXPECT_EQ(g.compiled_rules(), 1u);
  EXPECT_GE(g.reachable_rules(), 13u);
  EXPECT_TRUE(grammar_matches(g, R"({"p3":{"v3":1}})"));
  const size_t after_one = g.compiled_rules();
  EXPECT_GT(after_one, 1u);
  EXPECT_LT(after_one, g.reachable_rules());
  EXPECT_FALSE(grammar_matches(g, R"({"p3":{"v3":"x"}})"));
  // Many threads entering the same rules first: each rule is compiled once, the same for all.
  const auto fresh = std::make_shared<const Grammar>(g);
  EXPECT_EQ(fresh->compiled_rules(), 1u);
  std::vector<std::thread> threads;
  std::vector<std::vector<const GrammarRule*>> seen(4);
  for (size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&, t] {
      for (int32_t r = 0; r < static_cast<int32_t>(fresh->size()); ++r) seen[t].push_back(&fresh->rule(r));
    });
  for (auto& t : threads) t.join();
  for (size_t t = 1; t < seen.size(); ++t) EXPECT_EQ(seen[t], seen[0]);
  EXPECT_EQ(fresh->compiled_rules(), fresh->size());
}

}  // namespace
}  // namespace ib::constrain
