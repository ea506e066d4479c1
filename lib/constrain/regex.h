// Regular expressions over bytes: an AST that the JSON Schema compiler builds directly and the
// pattern parser produces, with UTF-8 code-point ranges expanded into byte sequences.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ib::constrain {

using ByteSet = std::bitset<256>;

struct RegexNode;
using Re = std::shared_ptr<const RegexNode>;
struct Dfa;  // automaton.h

struct RegexNode {
  // Automaton: a language that regex operators cannot write (an intersection, a difference, built
  // by automaton.h's product_dfa) embedded as a compiled DFA; the NFA construction inlines it.
  enum class Kind { Empty, Never, Bytes, Concat, Alt, Repeat, Automaton };
  Kind kind = Kind::Empty;
  ByteSet bytes;                   // Bytes: one byte from this set
  std::vector<Re> kids;            // Concat, Alt: the parts; Repeat: kids[0]
  int min = 0, max = 0;            // Repeat: bounds, max = -1 for unbounded
  std::shared_ptr<const Dfa> dfa;  // Automaton
  // Set by the constructors below, so that a grammar reads its rule bodies in time proportional to
  // their calls, not their size (grammar_lengths.h): whether a byte no UTF-8 text holds (0xC0,
  // 0xC1, 0xF5-0xFF: what grammar.h writes calls with) is somewhere in the language; and the
  // fewest bytes of its documents written with the other bytes (kNoTextLength: none).
  bool non_text = false;
  int64_t text_length = 0;
};
constexpr int64_t kNoTextLength = int64_t{1} << 40;
// Whether b is a byte no UTF-8 text holds.
constexpr bool non_text_byte(uint8_t b) { return b == 0xC0 || b == 0xC1 || b >= 0xF5; }

Re re_empty();                    // matches ""
Re re_never();                    // matches nothing
Re re_bytes(const ByteSet& set);  // one byte
Re re_byte(uint8_t b);
Re re_literal(const std::string& s);  // exactly these bytes
Re re_concat(std::vector<Re> parts);
Re re_alt(std::vector<Re> alternatives);
Re re_repeat(Re r, int min, int max);  // max = -1: unbounded
Re re_optional(Re r);
Re re_star(Re r);
Re re_plus(Re r);
// The language of a DFA (re_never() when it accepts nothing).
Re re_automaton(std::shared_ptr<const Dfa> dfa);

// One UTF-8 encoded code point from the union of [lo, hi] ranges (surrogates excluded).
struct CodePointRange {
  uint32_t lo, hi;
};
Re re_code_points(const std::vector<CodePointRange>& ranges);
// Any valid UTF-8 character (U+0000..U+10FFFF, no surrogates).
Re re_any_char();

class RegexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParsedRegex {
  Re re;
  bool anchored_start = false;  // began with ^
  bool anchored_end = false;    // ended with $
};

// ECMAScript-style patterns (the JSON Schema `pattern` dialect) over code points: literals,
// escapes (\d \w \s \D \W \S \n \t \r \f \v \0 \xHH \uHHHH \u{H…} and escaped punctuation), `.`,
// classes with ranges and negation, groups (…) and (?:…), alternation, * + ? {n} {n,} {n,m}
// (lazy suffixes accepted: they do not change the language), and ^ / $ at the ends. Lookaround,
// backreferences and anchors elsewhere are errors naming the offset. With a `universe`, every
// character the pattern matches is restricted to it (JSON strings: characters that need no escape).
ParsedRegex parse_regex(const std::string& pattern, const std::vector<CodePointRange>* universe = nullptr);

}  // namespace ib::constrain
