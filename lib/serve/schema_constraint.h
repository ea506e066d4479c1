// A request's JSON Schema (the OpenAI API's response_format) as a token constraint: compiled by
// our compiler (lib/constrain) to its grammar (the default: free values are any JSON at any depth,
// recursive $ref is not expanded) or to one DFA, masked per step under a token budget, so the
// output is a document of the schema that ends within max_tokens (the budget's guarantee:
// engine_generate.h for the DFA, grammar_budget.h for the grammar).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "constrain/engine_generate.h"
#include "constrain/json_schema.h"
#include "constrain/vocab.h"
#include "serve/serve_request.h"

namespace ib::serve {

class SchemaConstraint : public TokenConstraint {
 public:
  // A schema compiled once, with its masks' caches: shared by the documents written from it (a
  // request's n choices), all on the engine loop's thread.
  struct Compiled;

  // Throws InputError with the compiler's reason (the keyword and its pointer) when the schema is
  // refused, or the vocabulary's reason when the budget's guarantee cannot hold for it.
  // `max_compile_seconds`: the compile's CPU budget (past it: refused; 0 none).
  SchemaConstraint(const std::string& schema_json, std::shared_ptr<const constrain::Vocabulary> vocab,
                   constrain::SchemaPath path = constrain::SchemaPath::Grammar, double max_compile_seconds = 0);
  // Another document of the same compiled schema, from its start.
  explicit SchemaConstraint(std::shared_ptr<Compiled> compiled);
  std::shared_ptr<Compiled> compiled() const { return c_; }

  // The fewest tokens a document of the schema takes, EOS included: a smaller max_tokens is refused.
  int min_tokens() const;
  // The compiler's options for a request's schema.
  static constrain::SchemaOptions options();
  double compile_seconds() const;
  // Whether the schema runs as a grammar (else one DFA).
  bool on_grammar() const;
  int32_t choose(const float* logits, int vocab, const model::SamplingParams& p, float u, int left) override;
  bool accept(int32_t token) override;
  std::unique_ptr<TokenConstraint> fork() const override;

 private:
  // fork(): a document of `compiled` at `cursor`'s position (no fresh cursor made and replaced).
  SchemaConstraint(std::shared_ptr<Compiled> compiled, std::unique_ptr<constrain::DocumentCursor> cursor)
      : c_(std::move(compiled)), cursor_(std::move(cursor)) {}

  std::shared_ptr<Compiled> c_;
  std::unique_ptr<constrain::DocumentCursor> cursor_;
  std::vector<double> scratch_;
};

struct SchemaConstraint::Compiled {
  std::shared_ptr<const constrain::Vocabulary> vocab;
  std::unique_ptr<constrain::BudgetedMasks> masks;
  double compile_seconds = 0;
};

}  // namespace ib::serve
