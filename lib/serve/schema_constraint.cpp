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

SchemaConstraint::SchemaConstraint(const std::string& schema_json, std::shared_ptr<const constrain::Vocabulary> vocab,
                                   constrain::SchemaPath path, double max_compile_seconds) {
  if (std::string why = constrain::budget_guarantee_problem(*vocab); !why.empty())
    throw InputError("response_format: this model's vocabulary cannot hold the constraint's guarantee: " + why);
  constrain::CompiledConstraint cc;
  try {
    // Structured outputs' meaning: no keys but the declared ones where additionalProperties is
    // absent (OpenAI's strict mode requires additionalProperties: false anyway); an object that
    // declares none takes the model's keys (a tool call's arguments, json_object).
    constrain::SchemaOptions o = options();
    o.max_compile_seconds = max_compile_seconds;
    cc = constrain::compile_constraint("response_format", schema_json, o, path);
    // Every rule now, within the budget: a rule compiled on first use inside a decoding step
    // could fail past the automaton limits there, and a step's error fails every request in flight.
    if (cc.grammar) {
      constrain::CompileBudget budget(max_compile_seconds);
      cc.grammar->compile_all();
    }
  } catch (const std::exception& e) {
    throw InputError(fmt::format("response_format: the schema is refused: {}", e.what()));
  }
  auto c = std::make_shared<Compiled>();
  c->vocab = std::move(vocab);
  c->compile_seconds = cc.regex_seconds + cc.dfa_seconds;
  c->masks = std::make_unique<constrain::BudgetedMasks>(cc, c->vocab);
  // Known at admission, so refused then: decoding it would fail at its first token.
  if (std::string why = c->masks->guarantee_problem(); !why.empty())
    throw InputError(why.rfind("no document", 0) == 0
                         ? "response_format: no JSON document satisfies the schema (its language is empty)"
                         : "response_format: this model's vocabulary cannot hold the constraint's guarantee: " + why);
  c_ = std::move(c);
  cursor_ = c_->masks->cursor();
}

SchemaConstraint::SchemaConstraint(std::shared_ptr<Compiled> compiled) : c_(std::move(compiled)), cursor_(c_->masks->cursor()) {}

int SchemaConstraint::min_tokens() const { return c_->masks->min_tokens(); }
double SchemaConstraint::compile_seconds() const { return c_->compile_seconds; }
bool SchemaConstraint::on_grammar() const { return c_->masks->grammar() != nullptr; }

int32_t SchemaConstraint::choose(const float* logits, int vocab, const model::SamplingParams& p, float u, int left) {
  (void)vocab;  // ids past the tokenizer's vocabulary are no tokens: never chosen
  return constrain::sample_masked(logits, c_->vocab->size(), cursor_->mask(left), p.greedy() ? 0.0f : p.temperature, u, scratch_);
}

std::unique_ptr<TokenConstraint> SchemaConstraint::fork() const {
  return std::unique_ptr<TokenConstraint>(new SchemaConstraint(c_, cursor_->clone()));
}

bool SchemaConstraint::accept(int32_t token) {
  if (token == c_->vocab->eos) return true;
  try {
    return cursor_->accept(token);
  } catch (const std::logic_error&) {
    throw std::logic_error(fmt::format("response_format: token {} left the schema's language", token));
  }
}

}  // namespace ib::serve
