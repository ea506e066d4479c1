#include "constrain/grammar_generate.h"

#include <algorithm>

#include "constrain/grammar_lengths.h"

namespace ib::constrain {

static_assert(GrammarDistances::kNone == kNoDistance, "a row of rule_state_distances is a row of distances");

GrammarDistances::GrammarDistances(const Grammar& g, const std::array<bool, 256>* usable)
    : g_(&g), all_usable_(true), rows_(g.size()) {
  // A set holding every text byte is no restriction (markers never count).
  for (int b = 0; usable && b < 256; ++b)
    if (!non_text_byte(static_cast<uint8_t>(b)) && !(*usable)[static_cast<size_t>(b)]) all_usable_ = false;
  if (usable) usable_ = *usable;
  if (all_usable_) {
    lengths_.resize(g.size());
    for (size_t r = 0; r < g.size(); ++r) lengths_[r] = g.min_length(static_cast<int32_t>(r));
    return;
  }
  // Rules whose regex hides their calls are compiled already: their lengths come off their DFA.
  std::vector<const GrammarRule*> compiled(g.size(), nullptr);
  std::vector<Re> bodies = g.bodies();
  for (size_t r = 0; r < g.size(); ++r) {
    if (!g.productive(static_cast<int32_t>(r)))
      bodies[r] = re_never();  // unreached or empty
    else if (!g.readable(static_cast<int32_t>(r)))
      compiled[r] = &g.rule(static_cast<int32_t>(r));
  }
  RegexCallReader calls;
  lengths_ = rule_min_lengths(bodies, compiled, &usable_, calls);
}

const std::vector<int32_t>& GrammarDistances::of(int32_t rule) const {
  return rows_.get(static_cast<size_t>(rule),
                   [&] { return rule_state_distances(g_->rule(rule), lengths_, all_usable_ ? nullptr : &usable_); });
}

GrammarDistances grammar_distances(const Grammar& g, const std::array<bool, 256>* usable) { return GrammarDistances(g, usable); }

int32_t GrammarDistances::finish(const GrammarStack& stack) const {
  int64_t sum = 0;
  for (const auto& f : stack) {
    const int32_t d = of(f.rule)[static_cast<size_t>(f.state)];
    if (d == kNone) return kNone;
    sum += d;
  }
  return static_cast<int32_t>(std::min<int64_t>(sum, kNone - 1));
}

int32_t GrammarDistances::finish(const GrammarStacks& stacks) const {
  int32_t best = kNone;
  for (const auto& st : stacks) best = std::min(best, finish(st));
  return best;
}

std::string random_grammar_document(const Grammar& g, const GrammarDistances& d, std::mt19937_64& rng, size_t soft_bytes) {
  std::string out;
  GrammarStacks at = grammar_start(g), next;
  if (at.empty()) return out;
  std::vector<GrammarStacks> options;
  std::vector<int> bytes;
  std::vector<double> weights;
  for (;;) {
    const bool done = grammar_accepts(g, at);
    if (done && (out.size() >= soft_bytes || rng() % 4 == 0)) return out;
    const int32_t here = d.finish(at);
    options.clear();
    bytes.clear();
    weights.clear();
    for (int b = 0; b < 256; ++b) {
      grammar_step(g, at, static_cast<uint8_t>(b), next);
      if (next.empty()) continue;
      const int32_t there = d.finish(next);
      if (there == GrammarDistances::kNone) continue;
      if (out.size() >= soft_bytes && there >= here) continue;
      options.push_back(next);
      bytes.push_back(b);
      weights.push_back(b >= 0x20 && b < 0x7F ? 20.0 : 1.0);
    }
    if (bytes.empty()) return out;  // finished, with no way on
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    const size_t i = pick(rng);
    out += static_cast<char>(bytes[i]);
    at = std::move(options[i]);
  }
}

}  // namespace ib::constrain
