// constrain-generate: the transformer engine (CPU, deep-narrow, random weights) writing documents
// under the budget-aware token mask, and without it.
#include <random>

#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../common/run_kind.h"

#include "constrain/engine_generate.h"
#include "constrain/grammar_budget.h"
#include "constrain/masked_argmax.h"
#include "constrain/validity_check.h"
#include "core/errors.h"
#include "model/model_choice.h"
#include "numerics/random.h"

namespace ib::constrain {
namespace {

// One engine and vocabulary for the tests: deep-narrow's 32000 ids are llama2's.
struct Engine {
  std::shared_ptr<const Vocabulary> vocab = load_vocabulary("llama2");
  std::unique_ptr<model::Model> model;
  Engine() {
    model::ModelChoice m = model::choose_model("deep-narrow", "random", 7);
    model = model::make_cpu_model(m.config, *m.weights);
  }
};
Engine& engine() {
  static Engine e;
  return e;
}

std::shared_ptr<const Dfa> dfa_of(const std::string& constraint) {
  return compile_constraint(constraint, constraint_source(constraint), SchemaOptions{}).dfa;
}

const std::vector<int32_t> kPrompt = {1, 450, 1234, 29901};

// Every token of a constrained document was allowed by its state's mask (EOS only where the
// state accepts) and the document ends accepted: the mask, not luck, made it valid.
void expect_every_token_allowed(const EngineDocument& doc, BudgetMasker& masker, const Vocabulary& v, int max_tokens) {
  const BudgetedConstraint& c = masker.constraint();
  int32_t s = c.dfa->start;
  for (size_t i = 0; i < doc.tokens.size(); ++i) {
    const int32_t t = doc.tokens[i];
    ASSERT_TRUE(mask_allows(masker.state_mask(s), t)) << "token " << i << " (" << t << ") was not allowed";
    ASSERT_TRUE(mask_allows(masker.mask(s, max_tokens - static_cast<int>(i)), t))
        << "token " << i << " (" << t << ") broke the budget";
    if (t == v.eos) {
      EXPECT_EQ(i + 1, doc.tokens.size()) << "EOS before the end";
      EXPECT_TRUE(c.dfa->accepting[static_cast<size_t>(s)]);
      return;
    }
    s = advance(*c.dfa, v, s, t);
    ASSERT_GE(s, 0);
  }
  EXPECT_TRUE(c.done[static_cast<size_t>(s)]) << "ended without EOS in a state that could go on";
}

TEST(EngineGenerate, BudgetMaskEndsEveryDocumentValidWithinMaxTokens) {
  Engine& e = engine();
  for (const std::string constraint : {"regex:[a-z]{2,12}@[a-z]{2,8}\\.(com|org)", "extraction"}) {
    BudgetMasker masker(dfa_of(constraint), e.vocab);
    const BudgetedConstraint& c = masker.constraint();
    auto valid = validity_check(compile_constraint(constraint, constraint_source(constraint), SchemaOptions{}));
    // The tightest budget (every token a single byte, then EOS) and a looser one.
    for (int max_tokens : {c.min_tokens(), c.min_tokens() + 24}) {
      EngineWriter writer(*e.model, e.vocab, kPrompt, max_tokens, 1.0f);
      DfaCursor cursor(masker, e.vocab);
      for (uint64_t d = 0; d < 3; ++d) {
        const EngineDocument doc = writer.constrained(cursor, random_bits(99, d));
        SCOPED_TRACE(constraint + " max_tokens " + std::to_string(max_tokens) + ": '" + doc.text + "'");
        EXPECT_TRUE(doc.ended);
        EXPECT_LE(static_cast<int>(doc.tokens.size()), max_tokens);
        EXPECT_TRUE(valid(doc.text));
        expect_every_token_allowed(doc, masker, *e.vocab, max_tokens);
      }
      EXPECT_GT(writer.mask_steps(), 0);
    }
  }
}

// A vocabulary without single-byte tokens for some bytes (SmolLM2's has none for most control
// bytes): the budget counts only the bytes it can spell one token each, so documents still end
// valid within the tightest budget; a constraint whose every document needs a missing byte is
// refused by name, not decoded into a dead end.
TEST(EngineGenerate, BudgetHoldsWithSingleByteTokensMissing) {
  Engine& e = engine();
  auto without = [&](const std::string& bytes) {
    auto v = std::make_shared<Vocabulary>(*e.vocab);
    for (int32_t t = 0; t < v->size(); ++t) {
      const std::string& b = v->token_bytes[static_cast<size_t>(t)];
      if (b.size() == 1 && bytes.find(b[0]) != std::string::npos) v->special[static_cast<size_t>(t)] = 1;
    }
    return std::shared_ptr<const Vocabulary>(v);
  };
  const std::string constraint = "regex:[a-z]{2,12}@[a-z]{2,8}\\.(com|org)";
  auto valid = validity_check(compile_constraint(constraint, constraint_source(constraint), SchemaOptions{}));
  {
    auto v = without("qxz");  // letters no shortest path needs
    BudgetMasker masker(dfa_of(constraint), v);
    const BudgetedConstraint& c = masker.constraint();
    EXPECT_EQ(budget_guarantee_problem(c), "");
    EXPECT_EQ(c.min_tokens(), BudgetedConstraint(dfa_of(constraint)).min_tokens());
    EngineWriter writer(*e.model, v, kPrompt, c.min_tokens(), 1.0f);
    DfaCursor cursor(masker, v);
    for (uint64_t d = 0; d < 3; ++d) {
      const EngineDocument doc = writer.constrained(cursor, random_bits(98, d));
      SCOPED_TRACE("'" + doc.text + "'");
      EXPECT_TRUE(doc.ended);
      EXPECT_TRUE(valid(doc.text));
      expect_every_token_allowed(doc, masker, *v, c.min_tokens());
    }
  }
  {
    auto v = without("o");  // every document ends in .com or .org
    const BudgetedConstraint c(dfa_of(constraint), v.get());
    EXPECT_NE(budget_guarantee_problem(c).find("lacks single-byte tokens"), std::string::npos) << budget_guarantee_problem(c);
    EXPECT_EQ(budget_guarantee_problem(BudgetedConstraint(dfa_of("regex:(|a)b"), v.get())), "");
  }
}

// The same engine, prompt and random numbers without the mask write text the validator rejects:
// the constrained documents above are the mask's doing.
TEST(EngineGenerate, UnmaskedOnTheSameSeedIsInvalid) {
  Engine& e = engine();
  const std::string constraint = "regex:[a-z]{2,12}@[a-z]{2,8}\\.(com|org)";
  auto valid = validity_check(compile_constraint(constraint, constraint_source(constraint), SchemaOptions{}));
  BudgetMasker masker(dfa_of(constraint), e.vocab);
  EngineWriter writer(*e.model, e.vocab, kPrompt, 32, 1.0f);
  DfaCursor cursor(masker, e.vocab);
  for (uint64_t d = 0; d < 2; ++d) {
    const EngineDocument free = writer.unconstrained(random_bits(99, d));
    const EngineDocument masked = writer.constrained(cursor, random_bits(99, d));
    EXPECT_FALSE(valid(free.text)) << free.text;
    EXPECT_TRUE(valid(masked.text)) << masked.text;
    EXPECT_NE(free.tokens, masked.tokens);
  }
}

// Where a schema's language is the same on both paths (no free values, no recursion), the grammar
// path's masks and budget are the DFA's: the engine writes the same documents, token for token,
// at a loose budget and at the tightest (where the budget filters).
TEST(EngineGenerate, GrammarPathWritesTheDfaPathsDocuments) {
  Engine& e = engine();
  for (const std::string constraint : {"extraction", "tool_call"}) {
    const std::string source = constraint_source(constraint);
    const CompiledConstraint on_dfa = compile_constraint(constraint, source, SchemaOptions{}, SchemaPath::Dfa);
    const CompiledConstraint on_grammar = compile_constraint(constraint, source, SchemaOptions{}, SchemaPath::Grammar);
    ASSERT_TRUE(on_dfa.dfa && on_grammar.grammar);
    ASSERT_TRUE(on_dfa.notes.cut_off.empty());
    BudgetMasker dfa_masker(on_dfa.dfa, e.vocab);
    GrammarBudgetMasker grammar_masker(on_grammar.grammar, e.vocab);
    ASSERT_EQ(grammar_masker.min_tokens(), dfa_masker.constraint().min_tokens());
    DfaCursor dfa(dfa_masker, e.vocab);
    GrammarCursor grammar(grammar_masker, e.vocab);
    auto valid = validity_check(on_dfa);
    for (int max_tokens : {grammar_masker.min_tokens(), grammar_masker.min_tokens() + 40}) {
      EngineWriter writer(*e.model, e.vocab, kPrompt, max_tokens, 1.0f);
      for (uint64_t d = 0; d < 2; ++d) {
        const EngineDocument a = writer.constrained(dfa, random_bits(97, d));
        const EngineDocument b = writer.constrained(grammar, random_bits(97, d));
        SCOPED_TRACE(constraint + " max_tokens " + std::to_string(max_tokens) + ": '" + a.text + "'");
        EXPECT_EQ(a.tokens, b.tokens);
        EXPECT_TRUE(b.ended);
        EXPECT_TRUE(valid(b.text));
      }
    }
  }
}

// A cursor's clone (speculative decoding drafts along one) starts where its original is and then
// moves apart from it: after the clone takes the rest of a document, the original still gives
// the masks of a cursor that took only the first half, and the clone those of one that took all.
TEST(EngineGenerate, CursorClonesMoveApartFromTheirOriginal) {
  Engine& e = engine();
  const std::string source = constraint_source("tool_call");
  for (const SchemaPath path : {SchemaPath::Dfa, SchemaPath::Grammar}) {
    SCOPED_TRACE(path == SchemaPath::Dfa ? "dfa" : "grammar");
    BudgetedMasks masks(compile_constraint("tool_call", source, SchemaOptions{}, path), e.vocab);
    const int max_tokens = masks.min_tokens() + 40;
    EngineWriter writer(*e.model, e.vocab, kPrompt, max_tokens, 1.0f);
    std::unique_ptr<DocumentCursor> writing = masks.cursor();
    std::vector<int32_t> doc = writer.constrained(*writing, random_bits(96, 0)).tokens;
    if (!doc.empty() && doc.back() == e.vocab->eos) doc.pop_back();
    ASSERT_GE(doc.size(), 8u);
    const size_t half = doc.size() / 2, words = (static_cast<size_t>(e.vocab->size()) + 31) / 32;
    auto mask_after = [&](DocumentCursor& c, size_t taken) {
      const uint32_t* m = c.mask(max_tokens - static_cast<int>(taken));
      return std::vector<uint32_t>(m, m + words);
    };
    auto fresh_after = [&](size_t n) {
      std::unique_ptr<DocumentCursor> c = masks.cursor();
      for (size_t i = 0; i < n; ++i) c->accept(doc[i]);
      return mask_after(*c, n);
    };
    std::unique_ptr<DocumentCursor> original = masks.cursor();
    for (size_t i = 0; i < half; ++i) original->accept(doc[i]);
    std::unique_ptr<DocumentCursor> clone = original->clone();
    EXPECT_EQ(mask_after(*clone, half), fresh_after(half));
    for (size_t i = half; i < doc.size(); ++i) ASSERT_NO_THROW(clone->accept(doc[i])) << "token " << i;
    EXPECT_EQ(mask_after(*clone, doc.size()), fresh_after(doc.size()));
    EXPECT_EQ(mask_after(*original, half), fresh_after(half));
    EXPECT_NE(fresh_after(half), fresh_after(doc.size()));  // the two positions differ: the test can fail
    ASSERT_NO_THROW(original->accept(doc[half]));           // it is still where the clone left it
  }
}

TEST(EngineGenerate, SampleMaskedDrawsOnlyAllowedTokens) {
  const int32_t n = 1000;
  std::vector<float> logits(n);
  for (int32_t t = 0; t < n; ++t) logits[static_cast<size_t>(t)] = 4.0f * random_uniform(3, static_cast<uint64_t>(t));
  std::vector<uint32_t> mask((n + 31) / 32, 0);
  for (int32_t t = 0; t < n; t += 7) mask[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
  std::vector<double> scratch;
  EXPECT_EQ(sample_masked(logits.data(), n, mask.data(), 0.0f, 0.5f, scratch), masked_argmax(logits.data(), mask.data(), n));
  std::vector<int> hits(n, 0);
  for (int i = 0; i < 4000; ++i) {
    const int32_t t =
        sample_masked(logits.data(), n, mask.data(), 1.0f, model::sample_uniform(5, static_cast<uint64_t>(i), 0), scratch);
    ASSERT_TRUE(t >= 0 && mask_allows(mask.data(), t)) << t;
    ++hits[static_cast<size_t>(t)];
  }
  // The most likely allowed token is drawn most often.
  const int32_t best = masked_argmax(logits.data(), mask.data(), n);
  EXPECT_EQ(std::max_element(hits.begin(), hits.end()) - hits.begin(), best);
  std::vector<uint32_t> none(mask.size(), 0);
  EXPECT_EQ(sample_masked(logits.data(), n, none.data(), 1.0f, 0.5f, scratch), -1);
  logits[5] = NAN;
  EXPECT_NE(sample_masked(logits.data(), n, nullptr, 0.0f, 0.5f, scratch), 5);
}

TEST(EngineGenerate, BudgetNeedsEosAndATokenPerByte) {
  EXPECT_EQ(budget_guarantee_problem(*load_vocabulary("llama2")), "");
  EXPECT_EQ(budget_guarantee_problem(*load_vocabulary("gpt2")), "");
  Vocabulary v = *load_vocabulary("gpt2");
  v.eos = -1;
  EXPECT_NE(budget_guarantee_problem(v).find("no EOS"), std::string::npos);
}

// Through the runner: the constrained row passes its gate at 100% valid, the unmasked row is
// measured (random weights: nothing valid), and a budget below the shortest document is refused.
TEST(EngineGenerate, KindRowsThroughTheRunner) {
  auto r = testing::run_spec_text(
      "{warmup: 0, min_samples: 1, min_time: 0, timeout: 1s}",
      "  - {name: g, kind: constrain-generate, variants: [cpu_unconstrained_retry, cpu_constrained],"
      " constraint: 'regex:[a-z]{2,12}@[a-z]{2,8}\\.(com|org)', documents: 2, retries: 2, max_tokens: 24}\n");
  testing::expect_all_ok(r, 2);
  EXPECT_EQ(testing::metric(r.rows[1], "valid"), 100);
  EXPECT_EQ(testing::metric(r.rows[1], "attempts_per_doc"), 1);
  EXPECT_GT(testing::metric(r.rows[1], "mask_per_step"), 0);
  EXPECT_LT(testing::metric(r.rows[0], "valid"), 100);
  EXPECT_GT(testing::metric(r.rows[0], "wasted_tokens_per_doc"), 0);
  // The documents themselves are in the row (results.json "texts"), each marked: the masked ones
  // are addresses, valid; an unmasked one marked valid must be one too.
  const std::regex address("[a-z]{2,12}@[a-z]{2,8}\\.(com|org)");
  for (const Row* row : {&r.rows[0], &r.rows[1]}) {
    ASSERT_EQ(row->texts.size(), 2u) << row->variant;
    for (size_t d = 0; d < 2; ++d) {
      const auto& [label, text] = row->texts[d];
      EXPECT_EQ(label.rfind(fmt::format("document {} (", d + 1), 0), 0u) << label;
      if (label.find("(valid)") != std::string::npos) {
        EXPECT_TRUE(std::regex_match(text, address)) << text;
      }
      if (row == &r.rows[1]) {
        EXPECT_NE(label.find("(valid)"), std::string::npos) << label;
      }
    }
  }
  auto small = testing::run_spec_text(
      "{warmup: 0, min_samples: 1, min_time: 0, timeout: 1s}",
      "  - {name: g, kind: constrain-generate, variants: [cpu_constrained], constraint: tool_call, max_tokens: 8}\n");
  ASSERT_EQ(small.rows.size(), 1u);
  EXPECT_EQ(small.rows[0].status, RowStatus::Unsupported);
  EXPECT_NE(small.rows[0].message.find("max_tokens 8 is below"), std::string::npos) << small.rows[0].message;
}

std::string spec_error_of(const std::string& body) {
  try {
    parse_spec("experiments:\n" + body, "t.yaml", SpecOptions{});
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

// A model whose vocabulary is smaller than the tokenizer's is refused at spec validation,
// pointing at the model key (file:line:col) and naming both sizes.
TEST(EngineGenerate, SmallerModelVocabularyIsASpecError) {
  EXPECT_EQ(
      spec_error_of("  - name: g\n    kind: constrain-generate\n    model: tiny\n")
          .rfind(
              "t.yaml:4:12: experiments[0].model: model 'tiny' has 512 token ids, fewer than the 32000 tokens of vocab 'llama2'",
              0),
      0u)
      << spec_error_of("  - name: g\n    kind: constrain-generate\n    model: tiny\n");
  // In an axis too, pointing at the key the spec writes; the defaults fit (deep-narrow: llama2's 32000).
  EXPECT_NE(spec_error_of("  - name: g\n    kind: constrain-generate\n    vocab: [llama2, gpt2]\n")
                .find("t.yaml:4:12: experiments[0].vocab: model 'deep-narrow' has 32000 token ids, fewer than the 50257 tokens "
                      "of vocab 'gpt2'"),
            std::string::npos);
  EXPECT_EQ(spec_error_of("  - name: g\n    kind: constrain-generate\n"), "no error");
  EXPECT_NE(spec_error_of("  - name: g\n    kind: constrain-generate\n    model: checkpoint\n")
                .find("experiments[0].model: model checkpoint needs weights: DIR"),
            std::string::npos);
}

}  // namespace
}  // namespace ib::constrain
