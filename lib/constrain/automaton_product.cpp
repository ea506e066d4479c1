// Products of DFAs (intersection, difference, exactly one of n): the reachable tuples of the
// parts' states, pruned by the rule and minimised; apart from compiling a regex to a DFA.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/automaton_internal.h"
#include "constrain/interner.h"

namespace ib::constrain {

namespace {

using detail::minimize_raw;
using detail::RawDfa;

}  // namespace

Dfa product_dfa(const std::vector<const Dfa*>& parts, ProductRule rule, const CompileLimits& limits) {
  const size_t k = parts.size();
  if (k == 0) throw RegexError("a product of no automata");
  if (rule == ProductRule::ExactlyOne && k % 2 != 0) throw RegexError("ExactlyOne takes the parts and their over-approximations");
  const size_t n = rule == ProductRule::ExactlyOne ? k / 2 : k;

  // Byte classes of the product: the tuples of the parts' classes.
  std::array<uint8_t, 256> byte_class{};
  std::vector<std::vector<int32_t>> class_of;  // product class -> each part's class
  {
    std::map<std::vector<int32_t>, int> seen;
    std::vector<int32_t> key(k);
    for (int b = 0; b < 256; ++b) {
      for (size_t i = 0; i < k; ++i) key[i] = parts[i]->byte_class[static_cast<size_t>(b)];
      auto it = seen.find(key);
      if (it == seen.end()) {
        it = seen.emplace(key, static_cast<int>(class_of.size())).first;
        class_of.push_back(key);
      }
      byte_class[static_cast<size_t>(b)] = static_cast<uint8_t>(it->second);
    }
  }
  const int nclass = static_cast<int>(class_of.size());

  auto accepts = [&](size_t i, int32_t s) { return s >= 0 && parts[i]->accepting[static_cast<size_t>(s)] != 0; };
  auto accepting = [&](const int32_t* t) {
    switch (rule) {
      case ProductRule::Intersection:
        for (size_t i = 0; i < k; ++i)
          if (!accepts(i, t[i])) return false;
        return true;
      case ProductRule::Difference:
        if (!accepts(0, t[0])) return false;
        for (size_t i = 1; i < k; ++i)
          if (accepts(i, t[i])) return false;
        return true;
      case ProductRule::ExactlyOne: {
        // Some P_i accepts and no O_j (j != i) does: count the accepting O_j once.
        int over = 0;
        for (size_t j = 0; j < n; ++j) over += accepts(n + j, t[n + j]);
        for (size_t i = 0; i < n; ++i)
          if (accepts(i, t[i]) && over - (accepts(n + i, t[n + i]) ? 1 : 0) == 0) return true;
        return false;
      }
    }
    return false;
  };
  // A tuple that can never accept again: a needed part is dead.
  auto hopeless = [&](const std::vector<int32_t>& t) {
    switch (rule) {
      case ProductRule::Intersection:
        return std::any_of(t.begin(), t.end(), [](int32_t s) { return s < 0; });
      case ProductRule::Difference:
        return t[0] < 0;
      case ProductRule::ExactlyOne:
        return std::all_of(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n), [](int32_t s) { return s < 0; });
    }
    return false;
  };

  TupleInterner tuples;
  RawDfa raw;
  raw.nclass = nclass;
  std::vector<int32_t> t(k);
  for (size_t i = 0; i < k; ++i) t[i] = parts[i]->start;
  if (hopeless(t)) {
    RawDfa none;
    none.nclass = 1;
    none.accept = {0};
    none.end_row();
    return minimize_raw(none, std::array<uint8_t, 256>{});
  }
  tuples.intern(t);
  raw.accept.push_back(accepting(tuples.begin(0)) ? 1 : 0);
  std::vector<int32_t> from(k);
  for (size_t d = 0; d < tuples.size(); ++d) {
    std::copy(tuples.begin(static_cast<int32_t>(d)), tuples.end(static_cast<int32_t>(d)), from.begin());
    for (int c = 0; c < nclass; ++c) {
      const auto& cls = class_of[static_cast<size_t>(c)];
      for (size_t i = 0; i < k; ++i)
        t[i] =
            from[i] < 0 ? -1 : parts[i]->next[static_cast<size_t>(from[i]) * parts[i]->num_classes + static_cast<size_t>(cls[i])];
      if (hopeless(t)) continue;
      bool fresh = false;
      const int32_t id = tuples.intern(t, &fresh);
      if (fresh) {
        if (static_cast<int64_t>(tuples.size()) > limits.max_dfa_states)
          throw RegexError("the product automaton needs more than " + std::to_string(limits.max_dfa_states) + " states");
        if (static_cast<int64_t>(tuples.entries()) > limits.max_set_entries)
          throw RegexError("the product automaton's " + std::to_string(tuples.size()) + " states of " + std::to_string(k) +
                           " parts pass " + std::to_string(limits.max_set_entries) + " entries");
        raw.accept.push_back(accepting(tuples.begin(id)) ? 1 : 0);
      }
      raw.add(c, id);
    }
    raw.end_row();
    compile_budget_tick();
  }
  return minimize_raw(raw, byte_class);
}

}  // namespace ib::constrain
