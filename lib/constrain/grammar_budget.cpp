#include "constrain/grammar_budget.h"

#include <stdexcept>

namespace ib::constrain {
namespace {

std::shared_ptr<const GrammarDistances> usable_distances(const Grammar& g, const Vocabulary& vocab) {
  const auto usable = single_byte_tokens(vocab);
  return std::make_shared<const GrammarDistances>(grammar_distances(g, &usable));
}

}  // namespace

GrammarBudgetMasker::GrammarBudgetMasker(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(std::move(grammar)),
      dist_(usable_distances(*grammar_, *vocab)),
      masker_(grammar_, vocab, dist_),
      step_(masker_.words()) {}

const uint32_t* GrammarBudgetMasker::mask(const GrammarStacks& stacks, int left) {
  int32_t reach = 0;
  const uint32_t* m = masker_.mask(stacks, &reach);
  if (reach != GrammarDistances::kNone && int64_t{left} - 2 >= reach) return m;  // the budget cannot bind here
  ++filtered_steps_;
  masker_.mask_within(stacks, left - 2, step_.data());
  return step_.data();
}

int32_t GrammarBudgetMasker::min_tokens() const {
  const int32_t d = dist_->finish(grammar_start(*grammar_));
  return d == GrammarDistances::kNone ? d : d + 1;
}

std::string GrammarBudgetMasker::guarantee_problem() const {
  const GrammarStacks start = grammar_start(*grammar_);
  if (start.empty()) return "no document satisfies the constraint (its language is empty)";
  if (dist_->finish(start) != GrammarDistances::kNone) return {};
  return grammar_distances(*grammar_).finish(start) == GrammarDistances::kNone
             ? "no document satisfies the constraint (its language is empty)"
             : "the vocabulary lacks single-byte tokens for every document's bytes (the token budget counts a token per byte)";
}

bool GrammarCursor::complete_at_start() const { return grammar_complete(masker_.grammar(), stacks_); }

bool GrammarCursor::accept(int32_t token) {
  GrammarStacks next = grammar_advance(masker_.grammar(), *vocab_, stacks_, token);
  if (next.empty()) throw std::logic_error("constrained generation: token " + std::to_string(token) + " left the language");
  stacks_ = std::move(next);
  return grammar_complete(masker_.grammar(), stacks_);
}

bool grammar_complete(const Grammar& g, const GrammarStacks& stacks) {
  if (!grammar_accepts(g, stacks)) return false;
  for (const auto& st : stacks) {
    const GrammarRule& r = g.rule(st.back().rule);
    const size_t row = static_cast<size_t>(st.back().state) * static_cast<size_t>(r.dfa.num_classes);
    for (int32_t c = 0; c < r.dfa.num_classes; ++c) {
      const int32_t t = r.dfa.next[row + static_cast<size_t>(c)];
      if (t >= 0 && r.live[static_cast<size_t>(t)]) return false;
    }
  }
  return true;
}

}  // namespace ib::constrain
