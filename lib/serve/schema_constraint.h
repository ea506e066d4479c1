// A request's JSON Schema (the OpenAI API's response_format) as a token constraint: compiled by
// our compiler to a DFA (lib/constrain), masked per step under a token budget, so the output is a
// document of the schema that ends within max_tokens (the budget's guarantee, engine_generate.h).
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
  // Throws InputError with the compiler's reason (the keyword and its pointer) when the schema is
  // refused, or the vocabulary's reason when the budget's guarantee cannot hold for it.
  SchemaConstraint(const std::string& schema_json, std::shared_ptr<const constrain::Vocabulary> vocab);
  // The fewest tokens a document of the schema takes, EOS included: a smaller max_tokens is refused.
  int min_tokens() const { return masker_->constraint().min_tokens(); }
  // The compiler's options for a request's schema.
  static constrain::SchemaOptions options();
  double compile_seconds() const { return compile_seconds_; }
  int32_t choose(const float* logits, int vocab, const model::SamplingParams& p, float u, int left) override;
  bool accept(int32_t token) override;

 private:
  std::shared_ptr<const constrain::Vocabulary> vocab_;
  std::unique_ptr<constrain::BudgetMasker> masker_;
  int32_t state_ = 0;
  std::vector<double> scratch_;
  double compile_seconds_ = 0;
};

}  // namespace ib::serve
