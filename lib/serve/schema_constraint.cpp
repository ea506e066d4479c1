#include "serve/schema_constraint.h"

#include <exception>

#include <fmt/format.h>

#include "constrain/constraint.h"
#include "constrain/token_index.h"
#include "core/errors.h"

namespace ib::serve {

constrain::SchemaOptions SchemaConstraint::options() {
  constrain::SchemaOptions o;
  o.open_undeclared_objects = true;
  return o;
}

SchemaConstraint::SchemaConstraint(const std::string& schema_json, std::shared_ptr<const constrain::Vocabulary> vocab)
    : vocab_(std::move(vocab)) {
  if (std::string why = constrain::budget_guarantee_problem(*vocab_); !why.empty())
    throw InputError("response_format: this model's vocabulary cannot hold the constraint's guarantee: " + why);
  constrain::CompiledConstraint c;
  try {
    // Structured outputs' meaning: no keys but the declared ones where additionalProperties is
    // absent (OpenAI's strict mode requires additionalProperties: false anyway); an object that
    // declares none takes the model's keys (a tool call's arguments, json_object).
    c = constrain::compile_constraint("response_format", schema_json, options());
  } catch (const std::exception& e) {
    throw InputError(fmt::format("response_format: the schema is refused: {}", e.what()));
  }
  compile_seconds_ = c.regex_seconds + c.dfa_seconds;
  masker_ = std::make_unique<constrain::BudgetMasker>(c.dfa, vocab_);
  state_ = c.dfa->start;
  // Known at admission, so refused then: decoding it would fail at its first token.
  if (std::string why = constrain::budget_guarantee_problem(masker_->constraint()); !why.empty())
    throw InputError(why.rfind("no document", 0) == 0
                         ? "response_format: no JSON document satisfies the schema (its language is empty)"
                         : "response_format: this model's vocabulary cannot hold the constraint's guarantee: " + why);
}

int32_t SchemaConstraint::choose(const float* logits, int vocab, const model::SamplingParams& p, float u, int left) {
  (void)vocab;  // ids past the tokenizer's vocabulary are no tokens: never chosen
  const uint32_t* mask = masker_->mask(state_, left);
  return constrain::sample_masked(logits, vocab_->size(), mask, p.greedy() ? 0.0f : p.temperature, u, scratch_);
}

bool SchemaConstraint::accept(int32_t token) {
  if (token == vocab_->eos) return true;
  state_ = constrain::advance(*masker_->constraint().dfa, *vocab_, state_, token);
  if (state_ < 0) throw std::logic_error(fmt::format("response_format: token {} left the schema's language", token));
  return masker_->constraint().done[static_cast<size_t>(state_)] != 0;
}

}  // namespace ib::serve
