// The transformer engine writing documents for a constraint, under the budget-aware token mask or
// free (engine_generate.h); the kind that measures it is kinds/constrain/generate.cpp.
#include "constrain/engine_generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "constrain/generate.h"
#include "constrain/grammar_budget.h"
#include "constrain/grammar_generate.h"
#include "constrain/masked_argmax.h"
#include "core/errors.h"
#include "numerics/random.h"

namespace ib::constrain {

int32_t sample_masked(const float* logits, int32_t n, const uint32_t* mask, float temperature, float u,
                      std::vector<double>& scratch) {
  if (temperature <= 0.0f) return masked_argmax(logits, mask, n);
  auto allowed = [&](int32_t t) { return !mask || mask_allows(mask, t); };
  float top = -INFINITY;
  for (int32_t t = 0; t < n; ++t)
    if (allowed(t) && logits[t] > top) top = logits[t];         // NaN compares false: skipped
  if (top == -INFINITY) return masked_argmax(logits, mask, n);  // nothing finite: -1 or an allowed -inf
  scratch.assign(static_cast<size_t>(n), 0.0);
  const double inv_t = 1.0 / static_cast<double>(temperature);
  double sum = 0;
  for (int32_t t = 0; t < n; ++t)
    if (allowed(t) && !std::isnan(logits[t]))
      sum += scratch[static_cast<size_t>(t)] = std::exp((static_cast<double>(logits[t]) - top) * inv_t);
  // The token where u·sum falls in the cumulative weights, in index order; the last weighted
  // token when rounding leaves the target past the end.
  const double target = static_cast<double>(u) * sum;
  double cum = 0;
  int32_t last = -1;
  for (int32_t t = 0; t < n; ++t) {
    const double w = scratch[static_cast<size_t>(t)];
    if (w <= 0) continue;
    last = t;
    cum += w;
    if (cum > target) return t;
  }
  return last;
}

BudgetedConstraint::BudgetedConstraint(std::shared_ptr<const Dfa> d, const Vocabulary* vocab) : dfa(std::move(d)) {
  if (vocab) {
    const auto usable = single_byte_tokens(*vocab);
    dist = distance_to_accept(*dfa, &usable);
  } else {
    dist = distance_to_accept(*dfa);
  }
  const size_t n = static_cast<size_t>(dfa->num_states), k = static_cast<size_t>(dfa->num_classes);
  done.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    max_dist = dist[s] < 0 ? std::numeric_limits<int32_t>::max() : std::max(max_dist, dist[s]);
    bool continues = false;
    for (size_t c = 0; c < k && !continues; ++c) continues = dfa->next[s * k + c] >= 0;
    done[s] = dfa->accepting[s] && !continues;
  }
}

void budget_mask(const BudgetedConstraint& c, const Vocabulary& vocab, int32_t state, const uint32_t* mask, int left,
                 uint32_t* out) {
  const size_t words = (static_cast<size_t>(vocab.size()) + 31) / 32;
  for (size_t w = 0; w < words; ++w) {
    uint32_t keep = 0;
    for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
      const int bit = __builtin_ctz(bits);
      const int32_t t = static_cast<int32_t>(w * 32 + static_cast<size_t>(bit));
      bool ok;
      if (t == vocab.eos) {
        ok = true;  // the state's mask holds EOS only where it accepts
      } else {
        const int32_t next = advance(*c.dfa, vocab, state, t);
        ok = next >= 0 && c.dist[static_cast<size_t>(next)] >= 0 && c.dist[static_cast<size_t>(next)] <= left - 2;
      }
      if (ok) keep |= 1u << bit;
    }
    out[w] = keep;
  }
}

BudgetMasker::BudgetMasker(std::shared_ptr<const Dfa> dfa, std::shared_ptr<const Vocabulary> vocab)
    : c_(dfa, vocab.get()), vocab_(vocab), masker_(dfa, vocab), step_(masker_.words()) {}

const uint32_t* BudgetMasker::mask(int32_t state, int left) {
  const uint32_t* m = masker_.mask(state);
  if (left - 2 >= c_.max_dist) return m;  // no state is that far: the budget cannot bind
  auto it = reach_.find(state);
  if (it == reach_.end()) {
    int32_t reach = 0;
    for (size_t w = 0; w < masker_.words(); ++w)
      for (uint32_t bits = m[w]; bits; bits &= bits - 1) {
        const int32_t t = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
        if (t == vocab_->eos) continue;
        const int32_t next = advance(*c_.dfa, *vocab_, state, t);
        if (next >= 0)
          reach = c_.dist[static_cast<size_t>(next)] < 0 ? std::numeric_limits<int32_t>::max()
                                                         : std::max(reach, c_.dist[static_cast<size_t>(next)]);
      }
    it = reach_.emplace(state, reach).first;
  }
  if (left - 2 >= it->second) return m;
  budget_mask(c_, *vocab_, state, m, left, step_.data());
  return step_.data();
}

BudgetedMasks::BudgetedMasks(const CompiledConstraint& c, std::shared_ptr<const Vocabulary> vocab) : vocab_(std::move(vocab)) {
  if (c.grammar)
    grammar_ = std::make_unique<GrammarBudgetMasker>(c.grammar, vocab_);
  else
    dfa_ = std::make_unique<BudgetMasker>(c.dfa, vocab_);
}

int32_t BudgetedMasks::min_tokens() const { return grammar_ ? grammar_->min_tokens() : dfa_->constraint().min_tokens(); }

std::string BudgetedMasks::guarantee_problem() const {
  return grammar_ ? grammar_->guarantee_problem() : budget_guarantee_problem(dfa_->constraint());
}

std::unique_ptr<DocumentCursor> BudgetedMasks::cursor() {
  if (grammar_) return std::make_unique<GrammarCursor>(*grammar_, vocab_);
  return std::make_unique<DfaCursor>(*dfa_, vocab_);
}

bool DfaCursor::complete_at_start() const {
  return masker_.constraint().done[static_cast<size_t>(masker_.constraint().dfa->start)] != 0;
}

bool DfaCursor::accept(int32_t token) {
  state_ = advance(*masker_.constraint().dfa, *vocab_, state_, token);
  if (state_ < 0) throw std::logic_error(fmt::format("constrained generation: token {} left the language", token));
  return masker_.constraint().done[static_cast<size_t>(state_)] != 0;
}

std::string budget_guarantee_problem(const Vocabulary& vocab) {
  if (vocab.eos < 0) return "the vocabulary has no EOS token";
  return {};
}

std::string budget_guarantee_problem(const BudgetedConstraint& c) {
  if (c.dist[static_cast<size_t>(c.dfa->start)] >= 0) return {};
  return distance_to_accept(*c.dfa)[static_cast<size_t>(c.dfa->start)] < 0
             ? "no document satisfies the constraint (its language is empty)"
             : "the vocabulary lacks single-byte tokens for every document's bytes (the token budget counts a token per byte)";
}

// ---- the engine loop ----

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

EngineWriter::EngineWriter(model::Model& model, std::shared_ptr<const Vocabulary> vocab, std::vector<int32_t> prompt,
                           int max_tokens, float temperature)
    : model_(model), vocab_(std::move(vocab)), prompt_(std::move(prompt)), max_tokens_(max_tokens), temperature_(temperature) {
  if (model_.config().vocab < vocab_->size())
    throw InputError(fmt::format("model {} has {} token ids, fewer than the {} tokens of vocab {}", model_.config().name,
                                 model_.config().vocab, vocab_->size(), vocab_->name));
  seq_ = model_.new_sequence(static_cast<int>(prompt_.size()) + max_tokens_);
  logits_.resize(static_cast<size_t>(model_.config().vocab));
}

EngineWriter::~EngineWriter() {
  if (seq_ >= 0) model_.release(seq_);
}

void EngineWriter::start() {
  model_.truncate(seq_, 0);
  model::StepOutput out;
  out.logits = logits_.data();
  model_.prefill(seq_, prompt_.data(), static_cast<int>(prompt_.size()), 1, out);
}

void EngineWriter::next_logits(int32_t token) {
  model::StepOutput out;
  out.logits = logits_.data();
  model_.decode(&seq_, &token, 1, out);
}

EngineDocument EngineWriter::constrained(DocumentCursor& cursor, uint64_t seed) {
  const Vocabulary& v = *vocab_;
  EngineDocument doc;
  cursor.restart();
  if (cursor.complete_at_start()) {  // the empty document is the only one
    doc.ended = true;
    return doc;
  }
  start();
  for (int left = max_tokens_; left > 0; --left) {
    auto t0 = std::chrono::steady_clock::now();
    const uint32_t* mask = cursor.mask(left);
    mask_seconds_ += seconds_since(t0);
    ++mask_steps_;
    const int32_t tok =
        sample_masked(logits_.data(), v.size(), mask, temperature_, model::sample_uniform(seed, doc.tokens.size(), 0), scratch_);
    if (tok < 0)
      throw std::logic_error(
          fmt::format("constrained generation: no token allowed after {} tokens with {} left", doc.tokens.size(), left));
    doc.tokens.push_back(tok);
    if (tok == v.eos) {
      doc.ended = true;
      break;
    }
    t0 = std::chrono::steady_clock::now();
    const bool complete = cursor.accept(tok);
    mask_seconds_ += seconds_since(t0);
    doc.text += v.token_bytes[static_cast<size_t>(tok)];
    if (complete) {  // nothing may follow: complete without EOS
      doc.ended = true;
      break;
    }
    if (left > 1) next_logits(tok);
  }
  return doc;
}

EngineDocument EngineWriter::unconstrained(uint64_t seed) {
  const Vocabulary& v = *vocab_;
  EngineDocument doc;
  start();
  for (int left = max_tokens_; left > 0; --left) {
    const int32_t tok = sample_masked(logits_.data(), v.size(), nullptr, temperature_,
                                      model::sample_uniform(seed, doc.tokens.size(), 0), scratch_);
    if (tok < 0) throw std::runtime_error("unconstrained generation: every logit is NaN");
    doc.tokens.push_back(tok);
    if (tok == v.eos) {
      doc.ended = true;
      break;
    }
    doc.text += v.token_bytes[static_cast<size_t>(tok)];
    if (left > 1) next_logits(tok);
  }
  return doc;
}

}  // namespace ib::constrain
