// Integers and numbers: decimal ranges (integer bounds, whole bounds on numbers), multipleOf's divisibility
// automaton and the other spellings of a numeric value that an over-approximation holds.
#include "constrain/json_schema_internal.h"

#include "constrain/schema_formats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <memory>

namespace ib::constrain {

namespace detail {

namespace {

constexpr int64_t kNoLower = std::numeric_limits<int64_t>::min();
constexpr int64_t kNoUpper = std::numeric_limits<int64_t>::max();

Re digit() { return re_bytes(range_set('0', '9')); }
Re nonzero_digit() { return re_bytes(range_set('1', '9')); }

// Equal-length decimal strings lo <= hi, leading zeros allowed (they are suffixes).
Re same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return re_empty();
  // Every string of this length: one repeat, not the two recursions below, which double per digit
  // (a 19-digit bound, maximum: 9000000000000000000, built 2^19 alternatives and ran past the caps).
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos)
    return re_repeat(digit(), static_cast<int>(lo.size()), static_cast<int>(lo.size()));
  if (lo[0] == hi[0]) return re_concat({re_byte(static_cast<uint8_t>(lo[0])), same_length_range(lo.substr(1), hi.substr(1))});
  const size_t rest = lo.size() - 1;
  std::vector<Re> alts;
  alts.push_back(re_concat({re_byte(static_cast<uint8_t>(lo[0])), same_length_range(lo.substr(1), std::string(rest, '9'))}));
  if (hi[0] - lo[0] > 1)
    alts.push_back(re_concat({re_bytes(range_set(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1))),
                              re_repeat(digit(), static_cast<int>(rest), static_cast<int>(rest))}));
  alts.push_back(re_concat({re_byte(static_cast<uint8_t>(hi[0])), same_length_range(std::string(rest, '0'), hi.substr(1))}));
  return re_alt(std::move(alts));
}

uint64_t pow10(size_t n) {
  uint64_t p = 1;
  for (size_t i = 0; i < n; ++i) p *= 10;
  return p;
}

// Non-negative integers in [a, b] without leading zeros; `unbounded`: [a, ∞).
Re nonneg_range(uint64_t a, uint64_t b, bool unbounded) {
  if (!unbounded && a > b) return re_never();
  const size_t la = std::to_string(a).size(), lb = unbounded ? la : std::to_string(b).size();
  std::vector<Re> alts;
  for (size_t len = la; len <= lb; ++len) {
    const uint64_t lo = len == la ? a : pow10(len - 1);
    const uint64_t top = len >= 20 ? std::numeric_limits<uint64_t>::max() : pow10(len) - 1;
    const uint64_t hi = (len == lb && !unbounded) ? b : top;
    alts.push_back(same_length_range(std::to_string(lo), std::to_string(hi)));
  }
  // Past the bound's own length: any longer number, up to 18 digits (see kMaxIntegerDigits).
  if (unbounded && lb < 18) alts.push_back(re_concat({nonzero_digit(), re_repeat(digit(), static_cast<int>(lb), 17)}));
  return re_alt(std::move(alts));
}

// Digits a generated number may have: a double holds 15-17 significant digits and overflows
// past 1e308, so longer mantissas and exponents would only produce values that parse wrongly.
constexpr int kMaxIntegerDigits = 18, kMaxFractionDigits = 18, kMaxExponentDigits = 2;
// Digits of a number under multipleOf (type number): see short_numeral.
constexpr int kMaxMultipleDigits = 15;

Re unsigned_integer_regex() {
  return re_alt({re_byte('0'), re_concat({nonzero_digit(), re_repeat(digit(), 0, kMaxIntegerDigits - 1)})});
}

// A positive decimal a / 10^k: multipleOf's value, read from its JSON text (0.01 -> a = 1, k = 2;
// 5 -> a = 5, k = 0). False when it is not positive or needs more than 18 digits either way.
bool decimal_fraction(const nlohmann::ordered_json& m, uint64_t* a, int* k) {
  if (!m.is_number()) return false;
  const std::string text = m.dump();  // integers as written, doubles as their shortest round trip
  std::string digits;
  int exp10 = 0;
  bool dot = false;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') return false;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.')
      dot = true;
    else {
      digits += text[i];
      if (dot) --exp10;
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) exp10 += std::stoi(text.substr(i + 1));
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size()));
  if (digits.empty()) return false;  // zero
  while (digits.back() == '0') {
    digits.pop_back();
    ++exp10;
  }
  if (exp10 > 0) digits += std::string(static_cast<size_t>(exp10), '0');
  if (digits.size() > 18 || exp10 < -18) return false;
  *a = std::stoull(digits);
  *k = exp10 < 0 ? -exp10 : 0;
  return true;
}

// Decimal numerals -?(0|[1-9][0-9]*)(.[0-9]+)? whose value is a multiple of a / 10^k (no
// exponent: the other spellings are left out). x / (a / 10^k) is whole iff x·10^k is a whole
// multiple of a: the fraction digits past the k-th are zeros and the number formed by the integer
// digits and the first k fraction digits (padded with zeros) is 0 mod a. States: the remainder
// of the digits so far mod a, and how many fraction digits were read (at most k).
Dfa multiple_of_dfa(uint64_t a, int k) {
  Dfa d;
  // Classes: the ten digits, '-', '.', everything else.
  d.num_classes = 13;
  for (int b = 0; b < 256; ++b) d.byte_class[static_cast<size_t>(b)] = 12;
  for (int c = 0; c < 10; ++c) d.byte_class[static_cast<size_t>('0' + c)] = static_cast<uint8_t>(c);
  d.byte_class['-'] = 10;
  d.byte_class['.'] = 11;
  const auto A = static_cast<int32_t>(a);
  // start, after '-', the integer part "0", then per remainder r: integer part (r), just after
  // '.' (r), and j fraction digits read (r, j) for j = 0..k (j = 0 only when k = 0).
  const int32_t start = 0, minus = 1, zero = 2;
  auto integer = [&](int32_t r) { return 3 + r; };
  auto dot = [&](int32_t r) { return 3 + A + r; };
  auto frac = [&](int32_t r, int j) { return 3 + 2 * A + r * (k + 1) + j; };
  d.num_states = 3 + 2 * A + A * (k + 1);
  d.next.assign(static_cast<size_t>(d.num_states) * 13, -1);
  d.accepting.assign(static_cast<size_t>(d.num_states), 0);
  auto set = [&](int32_t from, int cls, int32_t to) { d.next[static_cast<size_t>(from) * 13 + static_cast<size_t>(cls)] = to; };
  // pow10_mod[j] = 10^j mod a: a remainder r with j fraction digits to go is whole iff r·10^j = 0 mod a.
  std::vector<uint64_t> pow10_mod(static_cast<size_t>(k) + 1, 1 % a);
  for (int j = 1; j <= k; ++j) pow10_mod[static_cast<size_t>(j)] = pow10_mod[static_cast<size_t>(j) - 1] * 10 % a;
  auto whole = [&](int32_t r, int to_go) { return static_cast<uint64_t>(r) * pow10_mod[static_cast<size_t>(to_go)] % a == 0; };
  d.start = start;
  set(start, 10, minus);
  set(start, 0, zero);
  set(minus, 0, zero);
  for (int c = 1; c < 10; ++c) {
    set(start, c, integer(static_cast<int32_t>(c % a)));
    set(minus, c, integer(static_cast<int32_t>(c % a)));
  }
  d.accepting[static_cast<size_t>(zero)] = 1;
  set(zero, 11, dot(0));
  for (int32_t r = 0; r < A; ++r) {
    d.accepting[static_cast<size_t>(integer(r))] = whole(r, k);
    for (int c = 0; c < 10; ++c)
      set(integer(r), c, integer(static_cast<int32_t>((static_cast<uint64_t>(r) * 10 + static_cast<uint64_t>(c)) % a)));
    set(integer(r), 11, dot(r));
    // After the dot and after j fraction digits: the next digit joins the remainder while j < k;
    // past the k-th fraction digit only zeros keep the value a multiple.
    auto digit_from = [&](int32_t from, int j) {
      for (int c = 0; c < 10; ++c) {
        if (j < k)
          set(from, c, frac(static_cast<int32_t>((static_cast<uint64_t>(r) * 10 + static_cast<uint64_t>(c)) % a), j + 1));
        else if (c == 0 && r == 0)
          set(from, c, frac(r, k));
      }
    };
    digit_from(dot(r), 0);
    for (int j = 0; j <= k; ++j) {
      d.accepting[static_cast<size_t>(frac(r, j))] = whole(r, k - j);
      digit_from(frac(r, j), j);
    }
  }
  return d;
}

}  // namespace

ByteSet range_set(char a, char b) {
  ByteSet s;
  for (int c = static_cast<unsigned char>(a); c <= static_cast<unsigned char>(b); ++c) s.set(static_cast<size_t>(c));
  return s;
}

Re number_regex(bool allow_negative) {
  ByteSet e, sign;
  e.set('e');
  e.set('E');
  sign.set('+');
  sign.set('-');
  Re frac = re_optional(re_concat({re_byte('.'), re_repeat(digit(), 1, kMaxFractionDigits)}));
  Re exp = re_optional(re_concat({re_bytes(e), re_optional(re_bytes(sign)), re_repeat(digit(), 1, kMaxExponentDigits)}));
  std::vector<Re> parts;
  if (allow_negative) parts.push_back(re_optional(re_byte('-')));
  parts.push_back(unsigned_integer_regex());
  parts.push_back(frac);
  parts.push_back(exp);
  return re_concat(std::move(parts));
}

uint64_t gcd_u64(uint64_t x, uint64_t y) {
  while (y != 0) {
    const uint64_t t = x % y;
    x = y;
    y = t;
  }
  return x;
}

std::optional<double> Compiler::num(const json& s, const char* k, const std::string& ptr) {
  if (!s.contains(k)) return std::nullopt;
  if (!s[k].is_number()) fail(k, ptr + "/" + k, std::string(k) + " must be a number");
  return s[k].get<double>();
}

struct Compiler::MultipleOf {
  uint64_t a = 1;
  int k = 0;  // multipleOf = a / 10^k
};

Re Compiler::integer(const json& s, const std::string& ptr) {
  int64_t lo = kNoLower, hi = kNoUpper;
  // Bounds past the 64-bit integers: one that leaves room (maximum 1e300) is no bound, as a
  // generated integer has at most 18 digits anyway (kMaxIntegerDigits); one that leaves none here
  // (maximum -1e300: every document has 301 digits) is refused. Clamped to the 64-bit limit, the
  // latter took -9223372036854775808, which is above it, and its compile ran to the automaton
  // cap (390 MB, a second).
  constexpr double kBeyond = 9.2e18;
  auto lower = [&](double v, const char* k) {
    if (v > kBeyond) beyond(k, ptr + "/" + k, std::string(k) + " is past the 64-bit integers this compiler bounds");
    return v < -kBeyond ? kNoLower : static_cast<int64_t>(v);
  };
  auto upper = [&](double v, const char* k) {
    if (v < -kBeyond) beyond(k, ptr + "/" + k, std::string(k) + " is past the 64-bit integers this compiler bounds");
    return v > kBeyond ? kNoUpper : static_cast<int64_t>(v);
  };
  if (auto v = num(s, "minimum", ptr)) lo = std::max(lo, lower(std::ceil(*v), "minimum"));
  if (auto v = num(s, "exclusiveMinimum", ptr)) lo = std::max(lo, lower(std::floor(*v) + 1, "exclusiveMinimum"));
  if (auto v = num(s, "maximum", ptr)) hi = std::min(hi, upper(std::floor(*v), "maximum"));
  if (auto v = num(s, "exclusiveMaximum", ptr)) hi = std::min(hi, upper(std::ceil(*v) - 1, "exclusiveMaximum"));
  // OpenAPI's int32, int64, ...: bounds (validators do not assert them, so an over-approximation,
  // which must hold every document a validator accepts, leaves them out).
  if (s.contains("format") && s["format"].is_string())
    if (auto r = integer_format_range(s["format"].get<std::string>())) {
      if (over_)
        ++over_changes_;
      else {
        lo = std::max(lo, r->first == std::numeric_limits<int64_t>::min() ? kNoLower : r->first);
        hi = std::min(hi, r->second == std::numeric_limits<int64_t>::max() ? kNoUpper : r->second);
      }
    }
  if (lo != kNoLower && hi != kNoUpper && lo > hi) fail("minimum", ptr, "no integer satisfies the bounds");
  Re exact = integer_range_regex(lo, hi);
  if (s.contains("multipleOf")) {
    // An integer x is a multiple of a / 10^k iff x·10^k = 0 mod a iff x = 0 mod a / gcd(a, 10^k).
    const MultipleOf m = multiple_of(s, ptr);
    uint64_t step = m.a;
    for (int j = 0; j < m.k; ++j) step /= gcd_u64(step, 10);
    exact = integer_multiples(lo, hi, step, ptr);
  }
  return over_ ? over_also(exact, non_canonical_number(true)) : exact;
}

Compiler::MultipleOf Compiler::multiple_of(const json& s, const std::string& ptr) const {
  MultipleOf m;
  const std::string mp = ptr + "/multipleOf";
  if (!decimal_fraction(s["multipleOf"], &m.a, &m.k))
    fail("multipleOf", mp, "multipleOf must be a number above 0 with at most 18 digits (" + s["multipleOf"].dump() + ")");
  return m;
}

// The divisibility automaton of a / 10^k, which has about a·(k + 3) states.
Re Compiler::multiple_of_language(uint64_t a, int k, const std::string& ptr) const {
  if (static_cast<double>(a) * (k + 3) > static_cast<double>(o_.max_product_states))
    beyond("multipleOf", ptr + "/multipleOf",
           "multipleOf needs more than " + std::to_string(o_.max_product_states) +
               " automaton states (SchemaOptions::max_product_states)");
  return re_automaton(std::make_shared<const Dfa>(multiple_of_dfa(a, k)));
}

// Canonical integers in [lo, hi] that are multiples of `step`: listed when the bounds leave a
// few, else the range's language intersected with the divisibility automaton.
Re Compiler::integer_multiples(int64_t lo, int64_t hi, uint64_t step, const std::string& ptr) {
  if (step == 1) return integer_range_regex(lo, hi);
  if (lo != kNoLower && hi != kNoUpper) {
    const auto st = static_cast<double>(step);
    const double first = std::ceil(static_cast<double>(lo) / st), last = std::floor(static_cast<double>(hi) / st);
    if (last - first < 256) {
      std::vector<Re> alts;
      const auto sstep = static_cast<int64_t>(step);
      for (auto q = static_cast<int64_t>(first); q <= static_cast<int64_t>(last); ++q) {
        const int64_t x = q * sstep;
        if (x >= lo && x <= hi) alts.push_back(re_literal(std::to_string(x)));
      }
      if (alts.empty()) fail("multipleOf", ptr + "/multipleOf", "no integer within the bounds is a multiple of multipleOf");
      return re_alt(std::move(alts));
    }
  }
  Re out = product({integer_range_regex(lo, hi), multiple_of_language(step, 0, ptr)}, ProductRule::Intersection, "multipleOf",
                   ptr + "/multipleOf", "multipleOf with the bounds");
  if (out->kind == RegexNode::Kind::Never)
    fail("multipleOf", ptr + "/multipleOf", "no integer within the bounds is a multiple of multipleOf");
  return out;
}

// Numbers of at most kMaxMultipleDigits digits: a double holds such a decimal exactly enough that
// its shortest spelling is the same decimal, so the value a parser reads is the one written.
Re Compiler::short_numeral() {
  std::vector<Re> alts;
  for (int i = 1; i <= kMaxMultipleDigits; ++i) {
    Re whole_part = re_repeat(digit(), i, i);
    alts.push_back(
        i == kMaxMultipleDigits
            ? whole_part
            : re_concat({whole_part, re_optional(re_concat({re_byte('.'), re_repeat(digit(), 1, kMaxMultipleDigits - i)}))}));
  }
  return re_concat({re_optional(re_byte('-')), re_alt(std::move(alts))});
}

struct Compiler::Bound {
  bool set = false;
  double value = 0;
  bool inclusive = true;
};

// Bounded numbers: integer-valued bounds, no exponent (documented); see signed_number_range.
Re Compiler::number(const json& s, const std::string& ptr) {
  auto mn = num(s, "minimum", ptr), xmn = num(s, "exclusiveMinimum", ptr), mx = num(s, "maximum", ptr),
       xmx = num(s, "exclusiveMaximum", ptr);
  if (!mn && !xmn && !mx && !xmx && !s.contains("multipleOf")) return number_regex(true);
  Bound lo, hi;
  auto tighter_lo = [&](double v, bool incl) {
    if (!lo.set || v > lo.value || (v == lo.value && !incl)) lo = {true, v, incl};
  };
  auto tighter_hi = [&](double v, bool incl) {
    if (!hi.set || v < hi.value || (v == hi.value && !incl)) hi = {true, v, incl};
  };
  if (mn) tighter_lo(*mn, true);
  if (xmn) tighter_lo(*xmn, false);
  if (mx) tighter_hi(*mx, true);
  if (xmx) tighter_hi(*xmx, false);
  for (const auto& [b, k] :
       {std::make_pair(lo, mn ? "minimum" : "exclusiveMinimum"), std::make_pair(hi, mx ? "maximum" : "exclusiveMaximum")})
    if (b.set && (std::floor(b.value) != b.value || std::fabs(b.value) > 1e17))
      fail(k, ptr + "/" + k, "bounds on type number must be whole numbers (use a whole bound or type integer)");
  Re r = lo.set || hi.set ? signed_number_range(lo, hi) : number_regex(true);
  if (r->kind == RegexNode::Kind::Never) fail("minimum", ptr, "no number satisfies the bounds");
  if (s.contains("multipleOf")) {
    // Multiples of a / 10^k written without exponent and, in the exact language, with at most
    // kMaxMultipleDigits digits; the over-approximation holds every digit count.
    const MultipleOf m = multiple_of(s, ptr);
    std::vector<Re> parts = {r, multiple_of_language(m.a, m.k, ptr)};
    if (!over_) parts.push_back(short_numeral());
    r = product(parts, ProductRule::Intersection, "multipleOf", ptr + "/multipleOf", "multipleOf with the bounds");
    if (r->kind == RegexNode::Kind::Never)
      fail("multipleOf", ptr + "/multipleOf", "no number within the bounds is a multiple of multipleOf");
  }
  return over_ ? over_also(r, non_canonical_number(false)) : r;
}

Re Compiler::frac_any() { return re_optional(re_concat({re_byte('.'), re_repeat(digit(), 1, kMaxFractionDigits)})); }

Re Compiler::frac_zero() { return re_optional(re_concat({re_byte('.'), re_repeat(re_byte('0'), 1, kMaxFractionDigits)})); }

Re Compiler::frac_nonzero() {
  return re_concat({re_byte('.'), re_repeat(re_byte('0'), 0, kMaxFractionDigits - 1), nonzero_digit(),
                    re_repeat(digit(), 0, kMaxFractionDigits - 1)});
}

// y = I(.F)? >= 0 with y in the range given by whole bounds on y (either may be absent).
Re Compiler::unsigned_number_range(const Bound& lo, const Bound& hi) {
  std::vector<Re> alts;
  const uint64_t a = lo.set ? static_cast<uint64_t>(lo.value) + (lo.inclusive ? 0 : 1) : 0;
  if (!hi.set) {
    alts.push_back(re_concat({nonneg_range(a, 0, true), frac_any()}));
  } else if (hi.value >= 1 && a <= static_cast<uint64_t>(hi.value) - 1) {
    alts.push_back(re_concat({nonneg_range(a, static_cast<uint64_t>(hi.value) - 1, false), frac_any()}));
  }
  // I = lo with a non-zero fraction satisfies y > lo, if below the upper bound.
  if (lo.set && !lo.inclusive && (!hi.set || lo.value < hi.value))
    alts.push_back(re_concat({re_literal(std::to_string(static_cast<uint64_t>(lo.value))), frac_nonzero()}));
  // I = hi with a zero fraction satisfies y <= hi, if above the lower bound.
  if (hi.set && hi.inclusive && hi.value >= 0 && (!lo.set || hi.value > lo.value || (hi.value == lo.value && lo.inclusive)))
    alts.push_back(re_concat({re_literal(std::to_string(static_cast<uint64_t>(hi.value))), frac_zero()}));
  return re_alt(std::move(alts));
}

// x in [lo, hi] (whole bounds, inclusive or not): non-negative x as y = x, negative x as "-" y
// with y = -x > 0.
Re Compiler::signed_number_range(const Bound& lo, const Bound& hi) {
  std::vector<Re> alts;
  const bool nonneg_possible = !hi.set || hi.value > 0 || (hi.value == 0 && hi.inclusive);
  if (nonneg_possible) {
    Bound plo = lo.set && lo.value >= 0 ? lo : Bound{true, 0, true};
    alts.push_back(unsigned_number_range(plo, hi));
  }
  const bool neg_possible = !lo.set || lo.value < 0;
  if (neg_possible) {
    Bound nlo = hi.set && hi.value < 0 ? Bound{true, -hi.value, hi.inclusive} : Bound{true, 0, false};
    Bound nhi = lo.set ? Bound{true, -lo.value, lo.inclusive} : Bound{};
    alts.push_back(re_concat({re_byte('-'), unsigned_number_range(nlo, nhi)}));
  }
  return re_alt(std::move(alts));
}

// Numbers spelt with a fraction or an exponent, and -0: the spellings an integer value may also
// have (an over-approximation of every integer-valued spelling but the canonical one).
// `integral`: only the spellings an integer value can have (a fraction of zeros, an exponent).
Re Compiler::non_canonical_number(bool integral) {
  ByteSet e, sign;
  e.set('e');
  e.set('E');
  sign.set('+');
  sign.set('-');
  Re frac = re_concat({re_byte('.'), re_repeat(digit(), 1, kMaxFractionDigits)});
  Re exp = re_concat({re_bytes(e), re_optional(re_bytes(sign)), re_repeat(digit(), 1, kMaxExponentDigits)});
  Re head = re_concat({re_optional(re_byte('-')), unsigned_integer_regex()});
  if (integral) frac = re_concat({re_byte('.'), re_repeat(re_byte('0'), 1, kMaxFractionDigits)});
  return re_alt({re_concat({head, frac, re_optional(exp)}), re_concat({head, frac_any(), exp}), re_literal("-0")});
}

}  // namespace detail

using detail::kNoLower;
using detail::kNoUpper;
using detail::nonneg_range;

Re integer_range_regex(int64_t lo, int64_t hi) {
  std::vector<Re> alts;
  // Negative values -x: x in [max(1, -hi), -lo] (unbounded when lo has no bound).
  if (lo < 0) {
    const uint64_t xmin = hi >= 0 ? 1 : static_cast<uint64_t>(-(hi + 1)) + 1;
    const bool unbounded = lo == kNoLower;
    const uint64_t xmax = unbounded ? 0 : static_cast<uint64_t>(-(lo + 1)) + 1;
    alts.push_back(re_concat({re_byte('-'), nonneg_range(xmin, xmax, unbounded)}));
  }
  if (hi >= 0) {
    const uint64_t a = lo > 0 ? static_cast<uint64_t>(lo) : 0;
    alts.push_back(nonneg_range(a, static_cast<uint64_t>(hi), hi == kNoUpper));
  }
  return re_alt(std::move(alts));
}

}  // namespace ib::constrain
