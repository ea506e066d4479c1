#include "constrain/grammar_generate.h"

#include <algorithm>

namespace ib::constrain {

GrammarDistances grammar_distances(const Grammar& g, const std::array<bool, 256>* usable) {
  GrammarDistances out;
  constexpr int32_t kNone = GrammarDistances::kNone;
  out.dist.resize(g.rules.size());
  std::vector<std::vector<uint8_t>> class_usable(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    const Dfa& d = g.rules[r].dfa;
    out.dist[r].assign(static_cast<size_t>(d.num_states), kNone);
    for (int32_t s = 0; s < d.num_states; ++s)
      if (d.accepting[static_cast<size_t>(s)]) out.dist[r][static_cast<size_t>(s)] = 0;
    class_usable[r].assign(static_cast<size_t>(d.num_classes), 0);
    for (int b = 0; b < 256; ++b)
      if (!usable || (*usable)[static_cast<size_t>(b)]) class_usable[r][d.byte_class[static_cast<size_t>(b)]] = 1;
    // The marker bytes' column is all -1 (build_grammar): no class of theirs is ever taken.
  }
  // Relaxation to a fixed point (weights are non-negative, so it ends; a grammar has few states).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      const GrammarRule& rule = g.rules[r];
      const Dfa& d = rule.dfa;
      auto& dr = out.dist[r];
      for (int32_t s = 0; s < d.num_states; ++s) {
        int64_t best = dr[static_cast<size_t>(s)];
        const size_t row = static_cast<size_t>(s) * static_cast<size_t>(d.num_classes);
        for (int32_t c = 0; c < d.num_classes; ++c) {
          const int32_t t = d.next[row + static_cast<size_t>(c)];
          if (t >= 0 && class_usable[r][static_cast<size_t>(c)] && dr[static_cast<size_t>(t)] != kNone)
            best = std::min<int64_t>(best, 1 + int64_t{dr[static_cast<size_t>(t)]});
        }
        for (int32_t k = rule.call_begin[static_cast<size_t>(s)]; k < rule.call_begin[static_cast<size_t>(s) + 1]; ++k) {
          const auto& call = rule.calls[static_cast<size_t>(k)];
          const int32_t inner =
              out.dist[static_cast<size_t>(call.rule)][static_cast<size_t>(g.rules[static_cast<size_t>(call.rule)].dfa.start)];
          const int32_t after = dr[static_cast<size_t>(call.ret)];
          if (inner != kNone && after != kNone) best = std::min<int64_t>(best, int64_t{inner} + after);
        }
        if (best < dr[static_cast<size_t>(s)]) {
          dr[static_cast<size_t>(s)] = static_cast<int32_t>(std::min<int64_t>(best, kNone - 1));
          changed = true;
        }
      }
    }
  }
  return out;
}

int32_t GrammarDistances::finish(const GrammarStack& stack) const {
  int64_t sum = 0;
  for (const auto& f : stack) {
    const int32_t d = dist[static_cast<size_t>(f.rule)][static_cast<size_t>(f.state)];
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
