// Regex AST -> Thompson NFA -> DFA (subset construction over byte classes) -> minimal DFA.
// The DFA runs over bytes; states that cannot reach acceptance are dropped (transition -1).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "constrain/regex.h"

namespace ib::constrain {

struct Dfa {
  int32_t start = 0;
  int32_t num_states = 0;
  int32_t num_classes = 0;
  std::array<uint8_t, 256> byte_class{};  // byte -> equivalence class
  std::vector<int32_t> next;              // num_states × num_classes; -1: no way to acceptance
  std::vector<uint8_t> accepting;

  int32_t step(int32_t s, uint8_t b) const { return next[static_cast<size_t>(s) * num_classes + byte_class[b]]; }
  // -1 as soon as the bytes leave every accepting path.
  int32_t walk(int32_t s, const std::string& bytes) const {
    for (unsigned char c : bytes) {
      s = step(s, c);
      if (s < 0) return -1;
    }
    return s;
  }
  bool matches(const std::string& bytes) const {
    int32_t s = walk(start, bytes);
    return s >= 0 && accepting[static_cast<size_t>(s)];
  }
  // The only byte that keeps state s alive, or -1 when there are several, none, or s accepts.
  int forced_byte(int32_t s) const;
  size_t table_bytes() const { return next.size() * sizeof(int32_t); }
};

struct CompileLimits {
  int64_t max_nfa_states = 4'000'000;
  int64_t max_dfa_states = 500'000;
};

// Throws RegexError when a limit is passed (the message names it).
Dfa compile_dfa(const Re& re, const CompileLimits& limits = {});

}  // namespace ib::constrain
