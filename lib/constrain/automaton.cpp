// Regex AST to DFA: the subset construction over the Thompson NFA's byte classes (the NFA itself is
// in automaton_nfa.h, minimisation in automaton_minimize.cpp, products in automaton_product.cpp).
#include "constrain/automaton.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <ctime>
#include <deque>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "constrain/automaton_internal.h"
#include "constrain/automaton_nfa.h"
#include "constrain/interner.h"

namespace ib::constrain {

namespace {
thread_local double tl_deadline = 0;  // this thread's CPU seconds at which the budget ends; 0: none
thread_local double tl_budget = 0;    // the budget's seconds, for the message
thread_local uint32_t tl_ticks = 0;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
}  // namespace

CompileBudget::CompileBudget(double cpu_seconds) : saved_deadline_(tl_deadline), saved_seconds_(tl_budget) {
  if (cpu_seconds <= 0) return;
  const double deadline = thread_cpu_seconds() + cpu_seconds;
  if (tl_deadline == 0 || deadline < tl_deadline) {
    tl_deadline = deadline;
    tl_budget = cpu_seconds;
  }
}

CompileBudget::~CompileBudget() {
  tl_deadline = saved_deadline_;
  tl_budget = saved_seconds_;
}

void compile_budget_tick() {
  if (tl_deadline == 0 || (++tl_ticks & 255) != 0) return;
  if (thread_cpu_seconds() > tl_deadline)
    throw CompileBudgetExceeded(fmt::format("compiling took more than {:g} s of CPU (the compile budget)", tl_budget));
}

int Dfa::forced_byte(int32_t s) const {
  if (accepting[static_cast<size_t>(s)]) return -1;
  int found = -1;
  for (int b = 0; b < 256; ++b) {
    if (step(s, static_cast<uint8_t>(b)) < 0) continue;
    if (found >= 0) return -1;
    found = b;
  }
  return found;
}

namespace {

using detail::minimize_raw;
using detail::Nfa;
using detail::RawDfa;

// Byte classes: bytes that no byte-set in `sets` tells apart.
std::array<uint8_t, 256> classes_of(const std::vector<ByteSet>& sets, int* count) {
  std::array<int, 256> cls{};
  int n = 1;
  std::array<int, 512> renumber;  // (class, in the set) -> new class
  for (const auto& s : sets) {
    renumber.fill(-1);
    int fresh = 0;
    for (int b = 0; b < 256; ++b) {
      int& to = renumber[static_cast<size_t>(2 * cls[static_cast<size_t>(b)] + (s.test(static_cast<size_t>(b)) ? 1 : 0))];
      if (to < 0) to = fresh++;
      cls[static_cast<size_t>(b)] = to;
    }
    n = fresh;
  }
  std::array<uint8_t, 256> out{};
  for (int b = 0; b < 256; ++b) out[static_cast<size_t>(b)] = static_cast<uint8_t>(cls[static_cast<size_t>(b)]);
  *count = n;
  return out;
}

}  // namespace

Dfa compile_dfa(const Re& re, const CompileLimits& limits) {
  Nfa nfa;
  nfa.limit = limits.max_nfa_states;
  const int32_t accept = nfa.add();  // no edge out: reaching it means the input matched
  const int32_t top_in = nfa.build(re, accept);

  // Byte classes of the NFA's edges.
  int nclass = 0;
  const std::vector<ByteSet>& sets = nfa.sets.sets();
  const std::array<uint8_t, 256> nfa_class = classes_of(sets, &nclass);
  std::vector<uint8_t> rep(static_cast<size_t>(nclass));  // a representative byte per class
  for (int b = 255; b >= 0; --b) rep[nfa_class[static_cast<size_t>(b)]] = static_cast<uint8_t>(b);

  // The byte classes of each distinct edge set (edges usually cover one or two classes).
  std::vector<int32_t> set_classes_at(sets.size() + 1, 0);
  std::vector<uint16_t> set_classes;
  for (size_t i = 0; i < sets.size(); ++i) {
    for (int c = 0; c < nclass; ++c)
      if (sets[i].test(rep[static_cast<size_t>(c)])) set_classes.push_back(static_cast<uint16_t>(c));
    set_classes_at[i + 1] = static_cast<int32_t>(set_classes.size());
  }

  // Subset construction. A DFA state is the sorted set of NFA states with a byte edge, plus
  // the accept state when it is reachable.
  const size_t nn = nfa.size();
  const std::vector<int32_t>& eps_at = nfa.eps_at;
  const std::vector<int32_t>& eps_n = nfa.eps_n;
  const std::vector<int32_t>& eps = nfa.pool;
  const std::vector<int32_t>& edge_set = nfa.set;
  std::vector<int32_t>& to = nfa.to;
  to[static_cast<size_t>(accept)] = std::numeric_limits<int32_t>::max();  // kept in closures too
  std::vector<uint32_t> mark(nn, 0);
  uint32_t epoch = 0;
  std::vector<int32_t> stack;
  auto closure = [&](const std::vector<int32_t>& seeds, std::vector<int32_t>* out) {
    ++epoch;
    out->clear();
    stack.assign(seeds.begin(), seeds.end());
    for (int32_t s : stack) mark[static_cast<size_t>(s)] = epoch;
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (to[static_cast<size_t>(s)] >= 0) out->push_back(s);
      for (int32_t x = eps_at[static_cast<size_t>(s)], x_end = x + eps_n[static_cast<size_t>(s)]; x < x_end; ++x)
        if (const int32_t e = eps[static_cast<size_t>(x)]; mark[static_cast<size_t>(e)] != epoch) {
          mark[static_cast<size_t>(e)] = epoch;
          stack.push_back(e);
        }
    }
    std::sort(out->begin(), out->end());
  };

  TupleInterner sets_of;  // DFA state -> its NFA state set
  RawDfa raw;
  raw.nclass = nclass;
  auto intern = [&](const std::vector<int32_t>& set) {
    bool fresh = false;
    const int32_t id = sets_of.intern(set, &fresh);
    if (fresh) {
      if (static_cast<int64_t>(sets_of.size()) > limits.max_dfa_states)
        throw RegexError("the automaton needs more than " + std::to_string(limits.max_dfa_states) + " DFA states");
      if (static_cast<int64_t>(sets_of.entries()) > limits.max_set_entries)
        throw RegexError("the automaton's DFA states hold more than " + std::to_string(limits.max_set_entries) +
                         " NFA states in all (a long repetition inside an unanchored pattern?)");
      raw.accept.push_back(std::binary_search(set.begin(), set.end(), accept) ? 1 : 0);
    }
    return id;
  };
  std::vector<int32_t> scratch;
  closure({top_in}, &scratch);
  intern(scratch);
  // A class's move from d is fixed by which of d's NFA states have an edge on it: classes are
  // grouped by that (a bit per state, d rarely has more than a few), so each distinct move set is
  // found once, its closure taken and interned once per state d. Past 64 edge states, each class's
  // move set is compared as a list.
  std::vector<uint64_t> sig(static_cast<size_t>(nclass), 0);
  std::vector<std::vector<int32_t>> moved(static_cast<size_t>(nclass));
  std::vector<int> used;
  std::vector<int32_t> edge_states, mv;
  std::vector<int32_t> single(nn, -1);                         // NFA state t -> the DFA state of the move {t}, once found
  std::vector<std::pair<uint64_t, int32_t>> seen_sigs;         // (signature, DFA state)
  std::vector<std::tuple<uint64_t, int, int32_t>> seen_moves;  // (hash, class, DFA state)
  for (size_t d = 0; d < sets_of.size(); ++d) {
    edge_states.clear();
    for (const int32_t* it = sets_of.begin(static_cast<int32_t>(d)); it != sets_of.end(static_cast<int32_t>(d)); ++it)
      if (edge_set[static_cast<size_t>(*it)] >= 0) edge_states.push_back(*it);
    if (edge_states.size() <= 64) {
      for (size_t i = 0; i < edge_states.size(); ++i) {
        const size_t sid = static_cast<size_t>(edge_set[static_cast<size_t>(edge_states[i])]);
        for (int32_t y = set_classes_at[sid]; y < set_classes_at[sid + 1]; ++y) {
          const uint16_t c = set_classes[static_cast<size_t>(y)];
          if (sig[c] == 0) used.push_back(c);
          sig[c] |= uint64_t{1} << i;
        }
      }
      std::sort(used.begin(), used.end());
      seen_sigs.clear();
      for (int c : used) {
        const uint64_t g = sig[static_cast<size_t>(c)];
        sig[static_cast<size_t>(c)] = 0;
        int32_t id = -1;
        for (const auto& [sg, sid] : seen_sigs)
          if (sg == g) {
            id = sid;
            break;
          }
        if (id < 0) {
          mv.clear();
          for (uint64_t bits = g; bits; bits &= bits - 1)
            mv.push_back(to[static_cast<size_t>(edge_states[static_cast<size_t>(__builtin_ctzll(bits))])]);
          // A move to one NFA state (the usual case) leads where it led before.
          int32_t* known = mv.size() == 1 ? &single[static_cast<size_t>(mv[0])] : nullptr;
          if (known && *known >= 0) {
            id = *known;
          } else {
            closure(mv, &scratch);
            id = intern(scratch);
            if (known) *known = id;
          }
          seen_sigs.emplace_back(g, id);
        }
        raw.add(c, id);
      }
    } else {
      for (const int32_t s : edge_states) {
        const size_t sid = static_cast<size_t>(edge_set[static_cast<size_t>(s)]);
        for (int32_t y = set_classes_at[sid]; y < set_classes_at[sid + 1]; ++y) {
          const uint16_t c = set_classes[static_cast<size_t>(y)];
          if (moved[c].empty()) used.push_back(c);
          moved[c].push_back(to[static_cast<size_t>(s)]);
        }
      }
      std::sort(used.begin(), used.end());
      seen_moves.clear();
      for (int c : used) {
        const auto& m = moved[static_cast<size_t>(c)];
        uint64_t h = 0x9E3779B97F4A7C15ull ^ m.size();
        for (int32_t x : m) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ull;
        int32_t id = -1;
        for (const auto& [hc, other, oid] : seen_moves)
          if (hc == h && moved[static_cast<size_t>(other)] == m) {
            id = oid;
            break;
          }
        if (id < 0) {
          closure(m, &scratch);
          id = intern(scratch);
          seen_moves.emplace_back(h, c, id);
        }
        raw.add(c, id);
      }
      for (int c : used) moved[static_cast<size_t>(c)].clear();
    }
    raw.end_row();
    used.clear();
    compile_budget_tick();
  }
  sets_of = TupleInterner();
  return minimize_raw(raw, nfa_class);
}

std::vector<int32_t> distance_to_accept(const Dfa& dfa, const std::array<bool, 256>* usable) {
  const size_t n = static_cast<size_t>(dfa.num_states), k = static_cast<size_t>(dfa.num_classes);
  // A class is usable when one of its bytes is (every byte of a class moves the same way).
  std::vector<uint8_t> class_usable(k, usable ? 0 : 1);
  if (usable)
    for (int b = 0; b < 256; ++b)
      if ((*usable)[static_cast<size_t>(b)]) class_usable[dfa.byte_class[static_cast<size_t>(b)]] = 1;
  std::vector<std::vector<int32_t>> rev(n);
  for (size_t s = 0; s < n; ++s)
    for (size_t c = 0; c < k; ++c)
      if (int32_t t = dfa.next[s * k + c]; t >= 0 && class_usable[c])
        rev[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
  std::vector<int32_t> dist(n, -1);
  std::deque<int32_t> q;
  for (size_t s = 0; s < n; ++s)
    if (dfa.accepting[s]) {
      dist[s] = 0;
      q.push_back(static_cast<int32_t>(s));
    }
  while (!q.empty()) {
    int32_t t = q.front();
    q.pop_front();
    for (int32_t p : rev[static_cast<size_t>(t)])
      if (dist[static_cast<size_t>(p)] < 0) {
        dist[static_cast<size_t>(p)] = dist[static_cast<size_t>(t)] + 1;
        q.push_back(p);
      }
  }
  return dist;
}

}  // namespace ib::constrain
