#include "constrain/regex.h"

#include <algorithm>
#include <array>

#include "constrain/automaton.h"

namespace ib::constrain {

namespace {

int64_t add_lengths(int64_t a, int64_t b) { return std::min(a + b, kNoTextLength); }

ByteSet non_text_bytes() {
  ByteSet m;
  for (int b = 0; b < 256; ++b)
    if (non_text_byte(static_cast<uint8_t>(b))) m.set(static_cast<size_t>(b));
  return m;
}

// Whether a DFA takes a non-text byte, and the fewest text bytes of its language (automaton.h's
// distance_to_accept, from its start).
void measure_dfa(const Dfa& d, RegexNode& n) {
  std::array<bool, 256> text{};
  for (int b = 0; b < 256; ++b) text[static_cast<size_t>(b)] = !non_text_byte(static_cast<uint8_t>(b));
  n.non_text = false;
  for (int b = 0; b < 256 && !n.non_text; ++b)
    for (int32_t s = 0; !text[static_cast<size_t>(b)] && s < d.num_states && !n.non_text; ++s)
      n.non_text = d.step(s, static_cast<uint8_t>(b)) >= 0;
  const int32_t len = distance_to_accept(d, &text)[static_cast<size_t>(d.start)];
  n.text_length = len < 0 ? kNoTextLength : len;
}

Re make(RegexNode n) {
  switch (n.kind) {
    case RegexNode::Kind::Empty:
      n.text_length = 0;
      break;
    case RegexNode::Kind::Never:
      n.text_length = kNoTextLength;
      break;
    case RegexNode::Kind::Bytes: {
      static const ByteSet other = non_text_bytes();
      n.non_text = (n.bytes & other).any();
      n.text_length = (n.bytes & ~other).any() ? 1 : kNoTextLength;
      break;
    }
    case RegexNode::Kind::Concat:
      n.text_length = 0;
      for (const auto& k : n.kids) {
        n.non_text = n.non_text || k->non_text;
        n.text_length = add_lengths(n.text_length, k->text_length);
      }
      break;
    case RegexNode::Kind::Alt:
      n.text_length = kNoTextLength;
      for (const auto& k : n.kids) {
        n.non_text = n.non_text || k->non_text;
        n.text_length = std::min(n.text_length, k->text_length);
      }
      break;
    case RegexNode::Kind::Repeat: {
      const RegexNode& k = *n.kids[0];
      n.non_text = k.non_text;
      n.text_length = n.min == 0                       ? 0
                      : k.text_length >= kNoTextLength ? kNoTextLength
                                                       : std::min(k.text_length * n.min, kNoTextLength);
      break;
    }
    case RegexNode::Kind::Automaton:
      measure_dfa(*n.dfa, n);
      break;
  }
  return std::make_shared<const RegexNode>(std::move(n));
}

}  // namespace

Re re_empty() {
  static const Re e = make(RegexNode{});
  return e;
}

Re re_never() {
  static const Re n = [] {
    RegexNode r;
    r.kind = RegexNode::Kind::Never;
    return make(std::move(r));
  }();
  return n;
}

Re re_bytes(const ByteSet& set) {
  if (set.none()) return re_never();
  RegexNode r;
  r.kind = RegexNode::Kind::Bytes;
  r.bytes = set;
  return make(std::move(r));
}

Re re_byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return re_bytes(s);
}

Re re_literal(const std::string& s) {
  std::vector<Re> parts;
  for (unsigned char c : s) parts.push_back(re_byte(c));
  return re_concat(std::move(parts));
}

Re re_concat(std::vector<Re> parts) {
  std::vector<Re> flat;
  for (auto& p : parts) {
    if (p->kind == RegexNode::Kind::Never) return re_never();
    if (p->kind == RegexNode::Kind::Empty) continue;
    if (p->kind == RegexNode::Kind::Concat)
      flat.insert(flat.end(), p->kids.begin(), p->kids.end());
    else
      flat.push_back(std::move(p));
  }
  if (flat.empty()) return re_empty();
  if (flat.size() == 1) return flat[0];
  RegexNode r;
  r.kind = RegexNode::Kind::Concat;
  r.kids = std::move(flat);
  return make(std::move(r));
}

Re re_alt(std::vector<Re> alternatives) {
  std::vector<Re> flat;
  for (auto& a : alternatives) {
    if (a->kind == RegexNode::Kind::Never) continue;
    if (a->kind == RegexNode::Kind::Alt)
      flat.insert(flat.end(), a->kids.begin(), a->kids.end());
    else
      flat.push_back(std::move(a));
  }
  if (flat.empty()) return re_never();
  if (flat.size() == 1) return flat[0];
  RegexNode r;
  r.kind = RegexNode::Kind::Alt;
  r.kids = std::move(flat);
  return make(std::move(r));
}

Re re_repeat(Re x, int min, int max) {
  if (max == 0) return re_empty();
  if (x->kind == RegexNode::Kind::Empty) return x;
  if (x->kind == RegexNode::Kind::Never) return min == 0 ? re_empty() : re_never();
  if (min == 1 && max == 1) return x;
  RegexNode r;
  r.kind = RegexNode::Kind::Repeat;
  r.kids = {std::move(x)};
  r.min = min;
  r.max = max;
  return make(std::move(r));
}

Re re_optional(Re r) { return re_repeat(std::move(r), 0, 1); }
Re re_star(Re r) { return re_repeat(std::move(r), 0, -1); }
Re re_plus(Re r) { return re_repeat(std::move(r), 1, -1); }

Re re_automaton(std::shared_ptr<const Dfa> dfa) {
  // compile_dfa and product_dfa give an empty language as one dead, non-accepting state.
  if (dfa->num_states == 1 && !dfa->accepting[0] &&
      std::all_of(dfa->next.begin(), dfa->next.end(), [](int32_t t) { return t < 0; }))
    return re_never();
  RegexNode r;
  r.kind = RegexNode::Kind::Automaton;
  r.dfa = std::move(dfa);
  return make(std::move(r));
}

// ---- UTF-8 ----

namespace {

int utf8_encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

ByteSet byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return s;
}

// Splits [lo, hi] (one encoding length, no surrogates) until every byte position ranges
// independently, then emits the product of byte ranges.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<Re>* out) {
  if (lo > hi) return;
  for (uint32_t top : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= top && hi > top) {
      utf8_sequences(lo, top, out);
      utf8_sequences(top + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out->push_back(re_bytes(byte_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi))));
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = utf8_encode(lo, a);
  utf8_encode(hi, b);
  std::vector<Re> parts;
  for (int k = 0; k < n; ++k) parts.push_back(re_bytes(byte_range(a[k], b[k])));
  out->push_back(re_concat(std::move(parts)));
}

std::vector<CodePointRange> normalize(std::vector<CodePointRange> r) {
  std::sort(r.begin(), r.end(), [](const auto& x, const auto& y) { return x.lo < y.lo; });
  std::vector<CodePointRange> out;
  for (const auto& x : r) {
    if (x.lo > x.hi) continue;
    if (!out.empty() && x.lo <= out.back().hi + 1)
      out.back().hi = std::max(out.back().hi, x.hi);
    else
      out.push_back(x);
  }
  return out;
}

std::vector<CodePointRange> complement(const std::vector<CodePointRange>& r) {
  std::vector<CodePointRange> out;
  uint32_t next = 0;
  for (const auto& x : normalize(r)) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

std::vector<CodePointRange> intersect(const std::vector<CodePointRange>& a, const std::vector<CodePointRange>& b) {
  std::vector<CodePointRange> out;
  for (const auto& x : normalize(a))
    for (const auto& y : normalize(b)) {
      uint32_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  return normalize(out);
}

}  // namespace

Re re_code_points(const std::vector<CodePointRange>& ranges) {
  // Surrogates are not characters: cut them out of every range.
  std::vector<CodePointRange> clean = intersect(ranges, {{0, 0xD7FF}, {0xE000, 0x10FFFF}});
  std::vector<Re> alts;
  for (const auto& r : clean) utf8_sequences(r.lo, std::min<uint32_t>(r.hi, 0x10FFFF), &alts);
  return re_alt(std::move(alts));
}

Re re_any_char() { return re_code_points({{0, 0x10FFFF}}); }

// ---- pattern parser ----

namespace {

class PatternParser {
 public:
  PatternParser(const std::string& p, const std::vector<CodePointRange>* universe) : src_(p), universe_(universe) { decode(); }

  ParsedRegex parse() {
    ParsedRegex out;
    size_t end = cps_.size();
    if (!cps_.empty() && cps_[0] == '^') {
      out.anchored_start = true;
      pos_ = 1;
    }
    if (end > pos_ && cps_[end - 1] == '$' && !(end >= 2 && escaped_dollar(end - 1))) {
      out.anchored_end = true;
      end_ = end - 1;
    } else {
      end_ = end;
    }
    out.re = alternation();
    if (pos_ != end_) fail("unexpected ')'");
    return out;
  }

 private:
  std::string src_;
  const std::vector<CodePointRange>* universe_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> offsets_;  // byte offset of each code point
  size_t pos_ = 0, end_ = 0;
  static constexpr int kMaxGroupDepth = 256;
  int depth_ = 0;  // groups open at pos_

  [[noreturn]] void fail(const std::string& what) const {
    size_t off = pos_ < offsets_.size() ? offsets_[pos_] : src_.size();
    throw RegexError("pattern /" + src_ + "/ at offset " + std::to_string(off) + ": " + what);
  }

  void decode() {
    size_t i = 0;
    while (i < src_.size()) {
      offsets_.push_back(i);
      unsigned char c = static_cast<unsigned char>(src_[i]);
      int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || i + static_cast<size_t>(n) > src_.size()) throw RegexError("pattern is not valid UTF-8");
      uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(src_[i + static_cast<size_t>(k)]) & 0x3F);
      cps_.push_back(cp);
      i += static_cast<size_t>(n);
    }
  }

  // Is the '$' at index i escaped by an odd run of backslashes?
  bool escaped_dollar(size_t i) const {
    size_t n = 0;
    while (i > n && cps_[i - 1 - n] == '\\') ++n;
    return n % 2 == 1;
  }

  bool more() const { return pos_ < end_; }
  uint32_t peek() const { return cps_[pos_]; }

  Re alternation() {
    std::vector<Re> alts = {concatenation()};
    while (more() && peek() == '|') {
      ++pos_;
      alts.push_back(concatenation());
    }
    return alts.size() == 1 ? alts[0] : re_alt(std::move(alts));
  }

  Re concatenation() {
    std::vector<Re> parts;
    while (more() && peek() != '|' && peek() != ')') parts.push_back(repetition());
    return re_concat(std::move(parts));
  }

  bool read_int(int* out) {
    size_t start = pos_;
    long v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<long>(peek() - '0');
      if (v > 100000) fail("repetition count too large");
      ++pos_;
    }
    *out = static_cast<int>(v);
    return pos_ > start;
  }

  // Reads a quantifier at pos_ (* + ? {n} {n,} {n,m}, with an optional lazy '?') into lo/hi
  // (hi = -1: unbounded); false, with pos_ unchanged, when none is there.
  bool quantifier(int* lo, int* hi) {
    if (!more()) return false;
    const uint32_t c = peek();
    if (c == '*' || c == '+' || c == '?') {
      *lo = c == '+' ? 1 : 0;
      *hi = c == '?' ? 1 : -1;
      ++pos_;
    } else if (c == '{') {
      const size_t save = pos_;
      ++pos_;
      if (!read_int(lo)) {  // a literal '{' (ECMAScript Annex B)
        pos_ = save;
        return false;
      }
      *hi = *lo;
      if (more() && peek() == ',') {
        ++pos_;
        if (!read_int(hi)) *hi = -1;
      }
      if (!more() || peek() != '}') fail("unterminated {n,m}");
      ++pos_;
      if (*hi != -1 && *hi < *lo) fail("{n,m} with m < n");
    } else {
      return false;
    }
    if (more() && peek() == '?') ++pos_;  // lazy: same language
    return true;
  }

  Re repetition() {
    Re atom = this->atom();
    int lo = 0, hi = 0;
    if (!quantifier(&lo, &hi)) return atom;
    // ECMA-262 (and Python's re) take one quantifier per atom: a{2}{3} and a*** are syntax errors
    // ("nothing to repeat"). Stacked, they would also nest the AST without bound.
    const size_t second = pos_;
    int lo2 = 0, hi2 = 0;
    if (quantifier(&lo2, &hi2)) {
      pos_ = second;
      fail("nothing to repeat: a quantifier follows a quantifier");
    }
    return re_repeat(atom, lo, hi);
  }

  std::vector<CodePointRange> class_escape(uint32_t e) {
    switch (e) {
      case 'd':
        return {{'0', '9'}};
      case 'D':
        return complement({{'0', '9'}});
      case 'w':
        return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 'W':
        return complement({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
      case 's':
        return spaces();
      case 'S':
        return complement(spaces());
      default:
        return {};
    }
  }

  static std::vector<CodePointRange> spaces() {
    return {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
            {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (!more()) fail("truncated hex escape");
      uint32_t c = peek();
      int d = c >= '0' && c <= '9'   ? static_cast<int>(c - '0')
              : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
              : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                                     : -1;
      if (d < 0) fail("bad hex digit");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // A single-character escape after '\' (pos_ at the character after the backslash).
  uint32_t char_escape() {
    uint32_t c = peek();
    ++pos_;
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        return 0;
      case 'x':
        return hex_digits(2);
      case 'u':
        if (more() && peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int n = 0;
          while (more() && peek() != '}') {
            v = v * 16 + hex_digits(1);
            if (++n > 6) fail("\\u{...} too long");
          }
          if (!more()) fail("unterminated \\u{");
          ++pos_;
          return v;
        }
        return hex_digits(4);
      case 'b':
      case 'B':
        --pos_;
        fail("word boundaries (\\b, \\B) are not regular over bytes here");
      default:
        if (c >= '1' && c <= '9') {
          --pos_;
          fail("backreferences are not regular");
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          --pos_;
          fail(std::string("unknown escape \\") + static_cast<char>(c));
        }
        return c;  // escaped punctuation
    }
  }

  Re atom() {
    uint32_t c = peek();
    if (c == '(') {
      ++pos_;
      if (more() && peek() == '?') {
        ++pos_;
        if (more() && peek() == ':')
          ++pos_;
        else if (more() && peek() == '<' && pos_ + 1 < end_ && cps_[pos_ + 1] != '=' && cps_[pos_ + 1] != '!') {
          while (more() && peek() != '>') ++pos_;  // named group: the name does not matter
          if (!more()) fail("unterminated group name");
          ++pos_;
        } else {
          fail("lookaround is not supported");
        }
      }
      // Groups nest at most kMaxGroupDepth deep: the parser (and the automaton built from it)
      // recurses once per level, and 30,000 nested groups overflowed the stack.
      if (++depth_ > kMaxGroupDepth) fail("groups nest deeper than " + std::to_string(kMaxGroupDepth) + " levels");
      Re inner = alternation();
      --depth_;
      if (!more() || peek() != ')') fail("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return chars(char_class());
    if (c == '.') {
      ++pos_;
      return chars(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '\\') {
      ++pos_;
      if (!more()) fail("trailing backslash");
      auto cls = class_escape(peek());
      if (!cls.empty()) {
        ++pos_;
        return chars(cls);
      }
      const uint32_t cp = char_escape();
      return chars({{cp, cp}});
    }
    if (c == '^' || c == '$') fail("anchors are only supported at the start and end of the pattern");
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == ')') fail("unexpected ')'");
    ++pos_;
    return chars({{c, c}});
  }

  // Every character the pattern can match, restricted to the universe when one is given.
  Re chars(const std::vector<CodePointRange>& ranges) const {
    return re_code_points(universe_ ? intersect(ranges, *universe_) : ranges);
  }

  std::vector<CodePointRange> char_class() {
    ++pos_;  // '['
    bool negate = false;
    if (more() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;  // ECMAScript: [] matches nothing, [^] any character
    while (more() && peek() != ']') {
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++pos_;
        if (!more()) fail("trailing backslash");
        auto cls = class_escape(peek());
        if (!cls.empty()) {
          ++pos_;
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
        if (peek() == 'b') {
          ++pos_;
          lo = '\b';
        } else {
          lo = char_escape();
        }
      } else {
        lo = peek();
        ++pos_;
      }
      uint32_t hi = lo;
      if (more() && peek() == '-' && pos_ + 1 < end_ && cps_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          if (!more()) fail("trailing backslash");
          if (!class_escape(peek()).empty()) fail("a class escape cannot end a range");
          hi = char_escape();
        } else {
          hi = peek();
          ++pos_;
        }
        if (hi < lo) fail("range out of order");
      }
      ranges.push_back({lo, hi});
    }
    if (!more()) fail("missing ']'");
    ++pos_;
    return negate ? complement(ranges) : normalize(ranges);
  }
};

}  // namespace

ParsedRegex parse_regex(const std::string& pattern, const std::vector<CodePointRange>* universe) {
  return PatternParser(pattern, universe).parse();
}

}  // namespace ib::constrain
