#include "constrain/json_schema.h"

#include "constrain/automaton.h"
#include "constrain/schema_dialect.h"
#include "constrain/schema_formats.h"
#include "core/json_input.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <mutex>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

namespace ib::constrain {

namespace {

using json = nlohmann::ordered_json;

constexpr int64_t kNoLower = std::numeric_limits<int64_t>::min();
constexpr int64_t kNoUpper = std::numeric_limits<int64_t>::max();

ByteSet range_set(char a, char b) {
  ByteSet s;
  for (int c = static_cast<unsigned char>(a); c <= static_cast<unsigned char>(b); ++c) s.set(static_cast<size_t>(c));
  return s;
}

Re digit() { return re_bytes(range_set('0', '9')); }
Re nonzero_digit() { return re_bytes(range_set('1', '9')); }
Re hex_digit() { return re_bytes(range_set('0', '9') | range_set('a', 'f') | range_set('A', 'F')); }

// Equal-length decimal strings lo <= hi, leading zeros allowed (they are suffixes).
Re same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return re_empty();
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

Re ws_of(const SchemaOptions& o) {
  if (o.whitespace == SchemaOptions::Whitespace::Compact) return re_empty();
  ByteSet s;
  s.set(' ');
  s.set('\n');
  s.set('\t');
  return re_repeat(re_bytes(s), 0, o.max_whitespace);
}

// Characters a JSON string holds unescaped.
const std::vector<CodePointRange>& raw_string_chars() {
  static const std::vector<CodePointRange> r = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
  return r;
}

// A JSON escape sequence: \" \\ \/ \b \f \n \r \t or \uXXXX (no lone surrogate).
Re json_escape() {
  ByteSet simple;
  for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<unsigned char>(c));
  // \uXXXX outside the surrogate block D800-DFFF (a lone surrogate is not a character).
  Re not_d = re_bytes(range_set('0', '9') | range_set('a', 'c') | range_set('A', 'C') | range_set('e', 'f') | range_set('E', 'F'));
  Re d = re_bytes(range_set('d', 'd') | range_set('D', 'D'));
  Re u4 = re_alt({re_concat({not_d, re_repeat(hex_digit(), 3, 3)}),
                  re_concat({d, re_bytes(range_set('0', '7')), re_repeat(hex_digit(), 2, 2)})});
  return re_concat({re_byte('\\'), re_alt({re_bytes(simple), re_concat({re_byte('u'), u4})})});
}

// One character a JSON string holds unescaped. The AST is immutable, so one node serves every
// string: the NFA construction then compiles a repeated character once per schema.
Re raw_string_char() {
  static const Re r = re_code_points(raw_string_chars());
  return r;
}

Re json_char() {
  static const Re r = re_alt({raw_string_char(), json_escape()});
  return r;
}

// String contents with at least one escape: where the compiler writes raw characters only (pattern,
// format, enum strings, keys), another spelling of the same string that an over-approximation
// must hold.
Re escaped_content() { return re_concat({re_star(json_char()), json_escape(), re_star(json_char())}); }

Re quoted(Re inner) { return re_concat({re_byte('"'), std::move(inner), re_byte('"')}); }

// The code points of a UTF-8 string; false when it is not valid UTF-8.
bool decode_utf8(const std::string& s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    out->push_back(cp);
    i += static_cast<size_t>(n);
  }
  return true;
}

// The keys of additional properties (between the quotes): strings of unescaped characters that
// are none of `named`. A named key written by the extras would have to satisfy its property's
// schema, not additionalProperties; leaving escapes out keeps "\u0061" from spelling "a".
// Built over the trie of the named keys: at each node the key may stop (unless a name ends
// there), follow a name's next character, or leave every name with any other character.
// Declared names longer than this are refused: the complement nests one level per character (a
// recursion here, then in the NFA construction). Real schemas' names are a few dozen characters.
constexpr size_t kMaxComplementedName = 256;

Re unnamed_key(const std::vector<std::string>& named, const std::string& ptr) {
  for (const auto& name : named)
    if (name.size() > kMaxComplementedName)
      throw SchemaError("properties", ptr + "/properties",
                        "a property name of " + std::to_string(name.size()) +
                            " bytes: the keys other than the declared ones are built for names of at most " +
                            std::to_string(kMaxComplementedName));
  struct Node {
    std::map<uint32_t, size_t> kids;
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (const auto& name : named) {
    std::vector<uint32_t> cps;
    if (!decode_utf8(name, &cps)) continue;
    bool raw = true;  // a name with characters that need escapes never equals an unescaped key
    for (uint32_t cp : cps) raw = raw && cp >= 0x20 && cp != '"' && cp != '\\';
    if (!raw) continue;
    size_t at = 0;
    for (uint32_t cp : cps) {
      auto it = trie[at].kids.find(cp);
      if (it == trie[at].kids.end()) {
        trie.push_back({});
        it = trie[at].kids.emplace(cp, trie.size() - 1).first;
      }
      at = it->second;
    }
    trie[at].end = true;
  }
  const Re any = re_star(raw_string_char());
  std::function<Re(size_t)> from = [&](size_t at) -> Re {
    const Node& n = trie[at];
    if (n.kids.empty() && !n.end) return any;
    std::vector<Re> alts;
    if (!n.end) alts.push_back(re_empty());
    std::vector<CodePointRange> others;  // raw characters minus the kids'
    for (const auto& r : raw_string_chars()) {
      uint32_t lo = r.lo;
      for (const auto& [cp, kid] : n.kids)
        if (cp >= lo && cp <= r.hi) {
          if (cp > lo) others.push_back({lo, cp - 1});
          lo = cp + 1;
        }
      if (lo <= r.hi) others.push_back({lo, r.hi});
    }
    if (!others.empty()) alts.push_back(re_concat({re_code_points(others), any}));
    for (const auto& [cp, kid] : n.kids) alts.push_back(re_concat({re_code_points({{cp, cp}}), from(kid)}));
    return re_alt(std::move(alts));
  };
  return from(0);
}

// Digits a generated number may have: a double holds 15-17 significant digits and overflows
// past 1e308, so longer mantissas and exponents would only produce values that parse wrongly.
constexpr int kMaxIntegerDigits = 18, kMaxFractionDigits = 18, kMaxExponentDigits = 2;
// Digits of a number under multipleOf (type number): see short_numeral.
constexpr int kMaxMultipleDigits = 15;
// Bounds past which objects are refused: maxProperties where extra keys may appear (the automaton
// grows with it), and the properties dependentRequired relates (their presence is tracked).
constexpr int kMaxCountedProperties = 64;
constexpr size_t kMaxDependentProperties = 12;
// contains: the largest count tracked (minContains, maxContains + 1), and positions × counts spelt
// out (up to maxItems, else up to minItems / prefixItems; each is a state of the construction).
constexpr int kMaxContainsCount = 32;
// Subschemas nested in one another (with $ref expansions): past it the schema is refused.
constexpr int kMaxSchemaDepth = 200;
// dependentSchemas in one schema object: each doubles the cases compiled.
constexpr size_t kMaxDependentSchemas = 6;
constexpr int64_t kMaxContainsPositions = 4096;

Re unsigned_integer_regex() {
  return re_alt({re_byte('0'), re_concat({nonzero_digit(), re_repeat(digit(), 0, kMaxIntegerDigits - 1)})});
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
    if (text[i] == '.') dot = true;
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

uint64_t gcd_u64(uint64_t x, uint64_t y) {
  while (y != 0) {
    const uint64_t t = x % y;
    x = y;
    y = t;
  }
  return x;
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
    for (int c = 0; c < 10; ++c) set(integer(r), c, integer(static_cast<int32_t>((static_cast<uint64_t>(r) * 10 + static_cast<uint64_t>(c)) % a)));
    set(integer(r), 11, dot(r));
    // After the dot and after j fraction digits: the next digit joins the remainder while j < k;
    // past the k-th fraction digit only zeros keep the value a multiple.
    auto digit_from = [&](int32_t from, int j) {
      for (int c = 0; c < 10; ++c) {
        if (j < k) set(from, c, frac(static_cast<int32_t>((static_cast<uint64_t>(r) * 10 + static_cast<uint64_t>(c)) % a), j + 1));
        else if (c == 0 && r == 0) set(from, c, frac(r, k));
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

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> s = {
      "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
      "uniqueItems", "enum", "const", "anyOf", "oneOf", "allOf", "minLength", "maxLength", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "nullable", "not", "if", "then", "else",
      "multipleOf", "minProperties", "maxProperties", "dependentRequired", "propertyNames", "patternProperties",
      "contains", "minContains", "maxContains", "dependentSchemas"};
  return s;
}

class Compiler {
 public:
  Compiler(const json& root, const SchemaOptions& o) : root_(root), o_(o), ws_(ws_of(o)) {
    Draft fallback = Draft::Draft2020_12;
    if (!o.default_draft.empty() && !parse_draft(o.default_draft, &fallback))
      fail("$schema", "", "unknown draft '" + o.default_draft + "' (4, 6, 7, 2019-09, 2020-12)");
    try {
      draft_ = root.is_object() && root.contains("$schema") ? draft_of(root) : fallback;
    } catch (const std::runtime_error& e) {
      fail("$schema", "/$schema", e.what());
    }
  }

  // What was read past, for SchemaNotes.
  void report(SchemaNotes* notes) const {
    notes->draft = draft_name(draft_);
    for (const auto& [k, at] : ignored_) notes->ignored[k] = static_cast<int>(at.size());
    for (const auto& [f, at] : unasserted_) notes->unasserted_formats[f] = static_cast<int>(at.size());
    for (const auto& [k, at] : by_validator_) notes->validator_decides[k] = static_cast<int>(at.size());
  }

  Re compile(const json& raw, const std::string& ptr) {
    if (raw.is_boolean()) return raw.get<bool>() ? json_value_regex_ws(o_.any_depth) : re_never();
    if (!raw.is_object()) fail("", ptr, "a schema is an object or a boolean");
    // Nesting is bounded (a schema of thousands of nested items would overflow the stack).
    if (depth_ >= kMaxSchemaDepth)
      fail("", ptr, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels (subschemas and $ref expansions)");
    // So is the work: conditionals and oneOf compile their parts more than once, recursive
    // references multiply that, and a schema past the budget is refused rather than compiled for
    // minutes.
    if (++steps_ > o_.max_compile_steps)
      fail("", ptr, "compiling the schema takes more than " + std::to_string(o_.max_compile_steps) +
                        " subschema compiles (max_compile_steps; nested if/then/else, oneOf and recursive $ref multiply them)");
    struct Nest {
      int& d;
      explicit Nest(int& x) : d(++x) {}
      ~Nest() { --d; }
    } nest(depth_);
    const json s = read(raw, ptr);
    for (const auto& [k, v] : s.items())
      if (!supported().count(k)) fail(k, ptr + "/" + escape_pointer(k), "unsupported keyword '" + k + "'");
    std::vector<std::string> validation;
    for (const auto& [k, v] : s.items()) validation.push_back(k);

    // dependentSchemas {a: S}: objects holding a satisfy S as well. Split on a's presence: (the
    // rest with a required, merged with S) or (the rest with a ruled out); the two cases are
    // disjoint, so each is compiled as exactly as the rest is. Non-objects fall in the second.
    if (s.contains("dependentSchemas")) {
      const std::string dp = ptr + "/dependentSchemas";
      const json& deps = s["dependentSchemas"];
      if (!deps.is_object()) fail("dependentSchemas", dp, "dependentSchemas must be an object of schemas");
      if (deps.size() > kMaxDependentSchemas)
        fail("dependentSchemas", dp, "more than " + std::to_string(kMaxDependentSchemas) + " dependent schemas in one object");
      json rest = s;
      rest.erase("dependentSchemas");
      if (deps.empty()) return compile(rest, ptr);
      const std::string name = deps.begin().key();
      json remaining = deps;
      remaining.erase(name);
      if (!remaining.empty()) rest["dependentSchemas"] = remaining;
      json present = rest, absent = rest;
      if (!present.contains("required")) present["required"] = json::array();
      if (std::find(present["required"].begin(), present["required"].end(), json(name)) == present["required"].end())
        present["required"].push_back(name);
      if (!absent.contains("properties")) absent["properties"] = json::object();
      absent["properties"][name] = false;
      return re_alt({compile_conjunction({present, deps.begin().value()}, dp + "/" + escape_pointer(name)), compile(absent, ptr)});
    }

    // not: the rest of the schema minus the negated schema's over-approximation (see json_schema.h).
    if (s.contains("not")) {
      json rest = s;
      rest.erase("not");
      const std::string np = ptr + "/not";
      Re base = compile(rest, ptr);
      if (over_) {  // an over-approximation of rest ∧ ¬S: rest's minus S's exact language
        ++over_changes_;
        return product({base, exact(s["not"], np)}, ProductRule::Difference, "not", np, "not (over-approximated)");
      }
      Re out = product({base, looser(s["not"], np)}, ProductRule::Difference, "not", np,
                       "not (the schema minus the negated schema's over-approximation)");
      if (out->kind == RegexNode::Kind::Never) fail("not", np, "no document satisfies the schema and not the negated one");
      return out;
    }
    // if/then/else: (rest ∧ then) ∩ if, compiled exactly, or (rest ∧ else) minus if's
    // over-approximation; then and else default to any value; without if they are ignored.
    if (s.contains("if")) {
      json rest = s;
      for (const char* k : {"if", "then", "else"}) rest.erase(k);
      auto with = [&](const char* k) {
        if (!s.contains(k)) return compile(rest, ptr);
        return compile_conjunction({rest, s[k]}, ptr + "/" + k);
      };
      const std::string ip = ptr + "/if";
      Re then_lang = with("then"), else_lang = with("else");
      Re strict_if = exact(strict_if_schema(s["if"]), ip), looser_if = looser(s["if"], ip);
      if (over_) {  // an over-approximation: the same with the roles of if's languages swapped
        ++over_changes_;
        return re_alt({product({then_lang, looser_if}, ProductRule::Intersection, "if", ip, "if/then (over-approximated)"),
                       product({else_lang, strict_if}, ProductRule::Difference, "if", ip, "if/else (over-approximated)")});
      }
      Re yes = product({then_lang, strict_if}, ProductRule::Intersection, "if", ip, "if/then (the then branch where if holds)");
      Re no = product({else_lang, looser_if}, ProductRule::Difference, "if", ip,
                      "if/else (the else branch minus if's over-approximation)");
      if (yes->kind == RegexNode::Kind::Never && no->kind == RegexNode::Kind::Never)
        fail("if", ip, "no document satisfies if/then/else as compiled");
      return re_alt({yes, no});
    }
    if (s.contains("$ref")) {
      if (validation.size() == 1) return ref(s["$ref"], ptr + "/$ref");
      // $ref beside other keywords: both apply (2020-12), so merge them as an allOf.
      return compile_conjunction({s}, ptr);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      if (!s.contains(comb)) continue;
      const bool exclusive = std::string(comb) == "oneOf";
      const json& list = s[comb];
      if (!list.is_array() || list.empty()) fail(comb, ptr + "/" + comb, std::string(comb) + " must be a non-empty array");
      json siblings = json::object();
      for (const auto& [k, v] : s.items())
        if (k != comb) siblings[k] = v;
      std::vector<Re> alts;
      auto branch = [&](size_t i) {
        const std::string bp = ptr + "/" + comb + "/" + std::to_string(i);
        // Keywords beside anyOf apply to every branch: distribute them.
        return siblings.empty() ? compile(list[i], bp) : compile_conjunction({siblings, list[i]}, bp);
      };
      for (size_t i = 0; i < list.size(); ++i) alts.push_back(branch(i));
      // anyOf, a single branch, and oneOf inside an over-approximation (the union of the
      // branches' over-approximations holds every document valid for exactly one) are unions.
      if (!exclusive || list.size() == 1 || over_) return re_alt(std::move(alts));
      // oneOf: exactly one branch. The branches again as over-approximations: what a document
      // valid for branch j may look like in any spelling another branch writes (the same
      // language where nothing is approximated).
      std::vector<Re> overs;
      for (size_t i = 0; i < list.size(); ++i) {
        const int before = over_changes_;
        over_ = true;
        Re o = branch(i);
        over_ = false;
        overs.push_back(over_changes_ == before ? alts[i] : o);
      }
      alts.insert(alts.end(), overs.begin(), overs.end());
      Re out = product(alts, ProductRule::ExactlyOne, "oneOf", ptr + "/oneOf", "oneOf (exactly one branch)");
      if (out->kind == RegexNode::Kind::Never) fail("oneOf", ptr + "/oneOf", "no document matches exactly one branch of oneOf");
      return out;
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) fail("allOf", ptr + "/allOf", "allOf must be a non-empty array");
      return compile_conjunction({s}, ptr);
    }
    if (s.contains("const")) return one_of_values({s["const"]}, s, ptr);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail("enum", ptr + "/enum", "enum must be a non-empty array");
      return one_of_values(std::vector<json>(s["enum"].begin(), s["enum"].end()), s, ptr);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const auto& x : t) types.push_back(x.is_string() ? x.get<std::string>() : "");
      else fail("type", ptr + "/type", "type must be a string or an array of strings");
    } else {
      types = inferred_types(s);
    }
    if (types.empty()) return json_value_regex_ws(o_.any_depth);
    if (over_ && !s.contains("type")) {
      // Without type, a value of another type than the keywords suggest is valid too (each
      // keyword constrains its own type): an over-approximation holds every type.
      ++over_changes_;
      types = {"null", "boolean", "number", "string", "object", "array"};
    }
    std::vector<Re> alts;
    for (const auto& t : types) alts.push_back(typed(s, t, ptr));
    if (s.contains("nullable") && s["nullable"] == true) alts.push_back(re_literal("null"));
    return re_alt(std::move(alts));
  }

 private:
  const json& root_;
  SchemaOptions o_;
  Re ws_;
  Draft draft_ = Draft::Draft2020_12;
  std::map<std::string, std::set<std::string>> ignored_, unasserted_, by_validator_;  // key / format -> pointers
  std::map<std::string, int> ref_depth_;
  int recursive_entries_ = 0;  // re-entered references on the current path
  int depth_ = 0;              // compile() calls on the current path
  int64_t steps_ = 0;          // compile() calls in all

  // The references a compile is inside of, left when the scope ends. A deeper level of a
  // recursive schema is dropped (enter() is false): past max_recursion re-entries of one
  // reference, or of all references together on the way here (schemas whose definitions refer to
  // one another would otherwise nest max_recursion levels per definition: exponentially).
  class RefScope {
   public:
    explicit RefScope(Compiler& c) : c_(c) {}
    RefScope(const RefScope&) = delete;
    RefScope& operator=(const RefScope&) = delete;
    ~RefScope() {
      for (const auto& [key, recursive] : entered_) {
        --c_.ref_depth_[key];
        c_.recursive_entries_ -= recursive;
      }
    }
    bool enter(const std::string& key) {
      int& depth = c_.ref_depth_[key];
      if (depth > c_.o_.max_recursion || (depth > 0 && c_.recursive_entries_ >= c_.o_.max_recursion)) return false;
      const bool recursive = depth > 0;
      ++depth;
      c_.recursive_entries_ += recursive;
      entered_.emplace_back(key, recursive);
      return true;
    }

   private:
    Compiler& c_;
    std::vector<std::pair<std::string, bool>> entered_;
  };

  // A schema object in 2020-12 spelling (schema_dialect.h), what it ignored recorded by pointer.
  json read(const json& raw, const std::string& ptr) {
    std::map<std::string, int> dropped;
    json s = to_2020_12(raw, draft_, &dropped);
    for (const auto& [k, n] : dropped) ignored_[k].insert(ptr);
    return s;
  }
  // Compiling a oneOf branch as an over-approximation: every valid document in every spelling a
  // compiled language may write is held (see json_schema.h); over_changes_ counts the places where
  // that differs from the exact compile, so an unchanged branch reuses its exact language.
  bool over_ = false;
  int over_changes_ = 0;

  // A schema's exact language (documents valid by it, in the spellings the compiler writes) and
  // its over-approximation (as oneOf subtracts other branches), whichever mode is on: for not and if.
  Re exact(const json& s, const std::string& ptr) { return in_mode(false, s, ptr); }
  Re looser(const json& s, const std::string& ptr) { return in_mode(true, s, ptr); }
  Re in_mode(bool over, const json& s, const std::string& ptr) {
    const bool was = over_;
    over_ = over;
    Re out;
    try {
      out = compile(s, ptr);
    } catch (...) {
      over_ = was;
      throw;
    }
    over_ = was;
    return out;
  }

  // if's schema for the intersection with then: still only documents valid by if, but with any
  // other keys where its top-level properties stand without additionalProperties, and values of
  // every type where it has no type (its keywords constrain their own type only).
  static json strict_if_schema(json i) {
    if (!i.is_object()) return i;
    bool plain = true;
    for (const char* k : {"$ref", "allOf", "anyOf", "oneOf", "enum", "const", "not", "if"}) plain = plain && !i.contains(k);
    if (!plain) return i;
    if (i.contains("properties") && !i.contains("additionalProperties")) i["additionalProperties"] = true;
    if (!i.contains("type") && !inferred_types(i).empty())
      i["type"] = json::array({"null", "boolean", "number", "string", "object", "array"});
    return i;
  }

  Re over_also(Re exact, Re more) {
    ++over_changes_;
    return re_alt({std::move(exact), std::move(more)});
  }

  // The languages combined by product_dfa (automaton.h), as one AST node; a size cap passed is a
  // SchemaError naming the keyword and the pointer.
  Re product(const std::vector<Re>& langs, ProductRule rule, const std::string& keyword, const std::string& ptr,
             const std::string& what) {
    CompileLimits limits;
    limits.max_dfa_states = o_.max_product_states;
    try {
      std::vector<std::unique_ptr<Dfa>> dfas;
      std::map<const RegexNode*, const Dfa*> seen;  // a language given twice is compiled once
      std::vector<const Dfa*> parts;
      for (const auto& l : langs) {
        auto it = seen.find(l.get());
        if (it == seen.end()) {
          dfas.push_back(std::make_unique<Dfa>(compile_dfa(l, limits)));
          it = seen.emplace(l.get(), dfas.back().get()).first;
        }
        parts.push_back(it->second);
      }
      return re_automaton(std::make_shared<const Dfa>(product_dfa(parts, rule, limits)));
    } catch (const RegexError& e) {
      fail(keyword, ptr, what + ": " + e.what() + " (SchemaOptions::max_product_states = " +
                             std::to_string(o_.max_product_states) + ")");
    }
  }

  [[noreturn]] static void fail(const std::string& keyword, const std::string& ptr, const std::string& what) {
    throw SchemaError(keyword, ptr, what);
  }

  static std::vector<std::string> inferred_types(const json& s) {
    for (const char* k : {"properties", "required", "additionalProperties", "minProperties", "maxProperties", "dependentRequired",
                          "propertyNames", "patternProperties"})
      if (s.contains(k)) return {"object"};
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems", "contains"})
      if (s.contains(k)) return {"array"};
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) return {"array"};
    for (const char* k : {"minLength", "maxLength", "pattern", "format"})
      if (s.contains(k)) return {"string"};
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      if (s.contains(k)) return {"number"};
    return {};
  }

  Re json_value_regex_ws(int depth) {
    std::vector<Re> alts = {json_string_regex(), number_regex(true), re_literal("true"), re_literal("false"),
                            re_literal("null")};
    if (depth > 0) {
      Re v = json_value_regex_ws(depth - 1);
      Re member = re_concat({json_string_regex(), ws_, re_byte(':'), ws_, v});
      Re members = re_concat({member, re_star(re_concat({ws_, re_byte(','), ws_, member}))});
      alts.push_back(re_concat({re_byte('{'), ws_, re_optional(members), ws_, re_byte('}')}));
      Re elements = re_concat({v, re_star(re_concat({ws_, re_byte(','), ws_, v}))});
      alts.push_back(re_concat({re_byte('['), ws_, re_optional(elements), ws_, re_byte(']')}));
    } else if (over_) {  // deeper values: containers any_depth levels deeper still (see json_schema.h)
      ++over_changes_;
      alts.push_back(deeper_containers());
    }
    return re_alt(std::move(alts));
  }

  // Numbers spelt with a fraction or an exponent, and -0: the spellings an integer value may also
  // have (an over-approximation of every integer-valued spelling but the canonical one).
  // `integral`: only the spellings an integer value can have (a fraction of zeros, an exponent).
  static Re non_canonical_number(bool integral) {
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

  // Objects and arrays of any values nested up to any_depth levels, exact: what an over-approximation
  // holds where its own language stops (a regular language cannot hold every depth).
  Re deeper_containers() {
    const bool was = over_;
    over_ = false;
    Re v = json_value_regex_ws(o_.any_depth + 1);
    over_ = was;
    return v;
  }

  static bool value_has_type(const json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (t == "number") return v.is_number();
    if (t == "string") return v.is_string();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
  }

  // enum / const: the compact serialisations of the values (filtered by `type` when given).
  Re one_of_values(const std::vector<json>& values, const json& s, const std::string& ptr) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
      else if (s["type"].is_array())
        for (const auto& x : s["type"])
          if (x.is_string()) types.push_back(x.get<std::string>());
    }
    std::vector<Re> alts;
    for (const auto& v : values) {
      bool ok = types.empty();
      for (const auto& t : types) ok = ok || value_has_type(v, t);
      if (ok) alts.push_back(re_literal(v.dump()));
    }
    if (alts.empty()) fail(s.contains("const") ? "const" : "enum", ptr, "no value of the enum/const has the schema's type");
    Re exact = re_alt(std::move(alts));
    if (!over_) return exact;
    // Other spellings of the same values: numbers with a fraction or an exponent (or -0), strings
    // with escapes, containers with other key orders or layouts.
    std::vector<Re> more;
    for (const auto& v : values) {
      if (v.is_number()) more.push_back(non_canonical_number(false));
      if (v.is_string()) more.push_back(quoted(escaped_content()));
      if (v.is_object() || v.is_array()) more.push_back(deeper_containers());
    }
    return more.empty() ? exact : over_also(exact, re_alt(std::move(more)));
  }

  // allOf by merging: the conjuncts' keywords combine into one schema whose language is the
  // intersection (types intersect, bounds tighten, required and properties unite, a property in
  // several conjuncts becomes an allOf of its schemas). What cannot be merged soundly is refused.
  Re compile_conjunction(std::vector<json> conjuncts, const std::string& ptr) {
    RefScope entered(*this);
    json merged = json::object();
    int expansions = 0;
    // contains and its counts must come from one schema object (merging them from different
    // conjuncts would change meaning).
    std::map<std::string, int> source;  // keyword -> the part it came from (-1: several)
    int part_no = 0;
    // additionalProperties only sees the properties and patternProperties of its own schema
    // object, items only the prefixItems of its own: kept per part and applied at the end.
    struct ObjectPart {
      std::set<std::string> names;
      bool patterns = false;
      json additional;  // null: none
    };
    struct ArrayPart {
      json prefix = json::array();
      json items;  // null: none
    };
    std::vector<ObjectPart> objects;
    std::vector<ArrayPart> arrays;
    json conditionals = json::array();  // if/then/else of parts after the first that has one
    // In document order: a part's own keywords, then its allOf members and its $ref target.
    std::deque<json> parts(conjuncts.begin(), conjuncts.end());
    while (!parts.empty()) {
      json part = parts.front();
      parts.pop_front();
      if (part.is_boolean()) {
        if (!part.get<bool>()) return re_never();
        continue;
      }
      if (!part.is_object()) fail("allOf", ptr, "a schema is an object or a boolean");
      part = read(part, ptr);
      std::vector<json> next;
      if (part.contains("allOf")) {
        for (const auto& x : part["allOf"]) next.push_back(x);
        part.erase("allOf");
      }
      if (part.contains("$ref")) {
        if (++expansions > 32) fail("$ref", ptr, "too many references inside allOf");
        // The same recursion bound as ref(): the merged schema is compiled inside the expansion.
        if (!entered.enter(part["$ref"].is_string() ? part["$ref"].get<std::string>() : std::string()))
          return over_ ? over_also(re_never(), json_value_regex_ws(0)) : re_never();
        next.push_back(resolve(part["$ref"], ptr + "/$ref"));
        part.erase("$ref");
      }
      parts.insert(parts.begin(), next.begin(), next.end());
      if (!part.contains("if")) {  // then / else without if are ignored
        part.erase("then");
        part.erase("else");
      } else if (merged.contains("if")) {  // a second conditional: both apply (compiled one inside the other)
        json c = json::object();
        for (const char* k : {"if", "then", "else"})
          if (part.contains(k)) {
            c[k] = part[k];
            part.erase(k);
          }
        conditionals.push_back(c);
      }
      if (part.contains("additionalProperties") || part.contains("properties") || part.contains("patternProperties")) {
        ObjectPart o;
        if (part.contains("properties") && part["properties"].is_object())
          for (const auto& [name, sub] : part["properties"].items()) o.names.insert(name);
        o.patterns = part.contains("patternProperties");
        if (part.contains("additionalProperties")) o.additional = part["additionalProperties"];
        objects.push_back(std::move(o));
        part.erase("additionalProperties");
      }
      if (part.contains("prefixItems") || part.contains("items")) {
        ArrayPart a;
        if (part.contains("prefixItems")) {
          if (!part["prefixItems"].is_array()) fail("prefixItems", ptr + "/prefixItems", "prefixItems must be an array");
          a.prefix = part["prefixItems"];
        }
        if (part.contains("items")) a.items = part["items"];
        arrays.push_back(std::move(a));
        part.erase("prefixItems");
        part.erase("items");
      }
      for (const auto& [k, v] : part.items()) {
        if (!supported().count(k)) fail(k, ptr + "/" + escape_pointer(k), "unsupported keyword '" + k + "'");
        merge_keyword(merged, k, v, ptr);
        auto [it, fresh] = source.emplace(k, part_no);
        if (!fresh && it->second != part_no) it->second = -1;
      }
      ++part_no;
    }
    for (const auto& [dependent, on] : {std::make_pair("then", "if"), std::make_pair("minContains", "contains"),
                                        std::make_pair("maxContains", "contains"), std::make_pair("else", "if")}) {
      auto d = source.find(dependent), o = source.find(on);
      if (d != source.end() && o != source.end() && (d->second < 0 || o->second < 0 || d->second != o->second))
        fail(dependent, ptr, std::string("allOf that combines '") + dependent + "' and '" + on +
                                 "' from different schemas cannot be merged");
    }
    merge_additional_properties(merged, objects, ptr);
    merge_items(merged, arrays);
    if (!conditionals.empty()) {  // compiled inside the first conditional's branches (see compile)
      if (!merged.contains("allOf")) merged["allOf"] = json::array();
      for (const auto& c : conditionals) merged["allOf"].push_back(c);
    }
    return compile(merged, ptr);
  }

  // additionalProperties of part X applies to the keys X does not declare: each merged property X
  // does not name takes X's additionalProperties as well, and extra keys take every part's.
  template <typename ObjectPart>
  static void merge_additional_properties(json& merged, const std::vector<ObjectPart>& objects, const std::string& ptr) {
    json extras = json::array();
    for (const auto& x : objects) {
      if (x.additional.is_null() || x.additional == json(true)) continue;
      extras.push_back(x.additional);
      if (x.patterns || (merged.contains("patternProperties") && objects.size() > 1))
        fail("additionalProperties", ptr,
             "allOf that combines 'additionalProperties' with patternProperties from different schemas cannot be merged");
      if (!merged.contains("properties")) continue;
      for (auto& [name, sub] : merged["properties"].items())
        if (!x.names.count(name)) sub = x.additional == json(false) ? json(false) : json{{"allOf", json::array({sub, x.additional})}};
    }
    bool any = false;
    for (const auto& x : objects) any = any || !x.additional.is_null();
    if (!any) return;
    if (extras.empty()) merged["additionalProperties"] = true;
    else if (extras.size() == 1) merged["additionalProperties"] = extras[0];
    else merged["additionalProperties"] = json{{"allOf", extras}};
  }

  // items of part X applies past X's own prefixItems: each merged prefix position beyond them takes
  // X's items as well, and the items after every prefix take every part's.
  template <typename ArrayPart>
  static void merge_items(json& merged, const std::vector<ArrayPart>& arrays) {
    if (arrays.empty()) return;
    size_t longest = 0;
    for (const auto& a : arrays) longest = std::max(longest, a.prefix.size());
    json prefix = json::array(), items = json::array();
    for (size_t i = 0; i < longest; ++i) {
      json all = json::array();
      for (const auto& a : arrays) {
        if (i < a.prefix.size()) all.push_back(a.prefix[i]);
        else if (!a.items.is_null()) all.push_back(a.items);
      }
      prefix.push_back(all.size() == 1 ? all[0] : json{{"allOf", all}});
    }
    for (const auto& a : arrays)
      if (!a.items.is_null()) items.push_back(a.items);
    if (longest > 0) merged["prefixItems"] = prefix;
    if (!items.empty()) merged["items"] = items.size() == 1 ? items[0] : json{{"allOf", items}};
  }

  static void merge_keyword(json& m, const std::string& k, const json& v, const std::string& ptr) {
    if (!m.contains(k)) {
      m[k] = v;
      return;
    }
    json& cur = m[k];
    if (cur == v) return;
    auto as_set = [](const json& t) {
      std::set<std::string> out;
      if (t.is_string()) out.insert(t.get<std::string>());
      else
        for (const auto& x : t) out.insert(x.get<std::string>());
      return out;
    };
    if (k == "type") {
      std::set<std::string> a = as_set(cur), b = as_set(v), both;
      for (const auto& t : a)
        if (b.count(t) || (t == "number" && b.count("integer"))) both.insert(t == "number" && b.count("integer") ? "integer" : t);
      for (const auto& t : b)
        if (t == "number" && a.count("integer")) both.insert("integer");
      json arr = json::array();
      for (const auto& t : both) arr.push_back(t);
      if (arr.empty()) arr.push_back("__none__");  // no type satisfies every conjunct
      cur = arr;
    } else if (k == "required") {
      std::set<std::string> names = as_set(cur);
      for (const auto& x : v)
        if (!names.count(x.get<std::string>())) cur.push_back(x);
    } else if (k == "properties") {
      for (const auto& [name, sub] : v.items()) {
        if (!cur.contains(name)) cur[name] = sub;
        else if (cur[name] != sub) cur[name] = json{{"allOf", json::array({cur[name], sub})}};
      }
    } else if (k == "items") {
      cur = json{{"allOf", json::array({cur, v})}};
    } else if (k == "patternProperties") {  // the same pattern twice: both schemas
      for (const auto& [pattern, sub] : v.items()) {
        if (!cur.contains(pattern)) cur[pattern] = sub;
        else if (cur[pattern] != sub) cur[pattern] = json{{"allOf", json::array({cur[pattern], sub})}};
      }
    } else if (k == "propertyNames") {
      cur = json{{"allOf", json::array({cur, v})}};
    } else if (k == "dependentRequired") {
      for (const auto& [a, list] : v.items()) {
        if (!cur.contains(a)) cur[a] = list;
        else
          for (const auto& b : list)
            if (std::find(cur[a].begin(), cur[a].end(), b) == cur[a].end()) cur[a].push_back(b);
      }
    } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems" || k == "minProperties") {
      if (v.get<double>() > cur.get<double>()) cur = v;
    } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties") {
      if (v.get<double>() < cur.get<double>()) cur = v;
    } else if (k == "enum") {
      json both = json::array();
      for (const auto& x : cur)
        for (const auto& y : v)
          if (x == y) both.push_back(x);
      if (both.empty()) fail("enum", ptr, "the enums of allOf have no value in common");
      cur = both;
    } else if (k == "not") {  // ¬A ∧ ¬B = ¬(A ∨ B)
      cur = json{{"anyOf", json::array({cur, v})}};
    } else if (k == "multipleOf" && cur.is_number_unsigned() && v.is_number_unsigned() && cur.get<uint64_t>() > 0 &&
               v.get<uint64_t>() > 0 && cur.get<uint64_t>() / gcd_u64(cur.get<uint64_t>(), v.get<uint64_t>()) <= 1'000'000'000'000 / v.get<uint64_t>()) {
      // Whole multipleOf values: a multiple of both is a multiple of their least common multiple.
      cur = cur.get<uint64_t>() / gcd_u64(cur.get<uint64_t>(), v.get<uint64_t>()) * v.get<uint64_t>();
    } else if (k == "const") {
      fail("const", ptr, "the consts of allOf differ: no document satisfies both");
    } else {
      fail(k, ptr + "/" + escape_pointer(k), "allOf with two different '" + k + "' cannot be merged");
    }
  }

  // The root's base URI ($id, or id in draft 4) without its fragment: a reference that starts with
  // it is local.
  std::string base_uri() const {
    const char* key = draft_ == Draft::Draft4 ? "id" : "$id";
    if (!root_.is_object() || !root_.contains(key) || !root_[key].is_string()) return {};
    std::string id = root_[key].get<std::string>();
    return id.substr(0, id.find('#'));
  }

  // The subschema that declares a plain-name fragment: $anchor (2019-09 on), or an $id / id of
  // "#name" (drafts 4-7). Depth-first, bounded like the compiler's own recursion.
  static const json* find_anchor(const json& node, const std::string& name, int depth) {
    if (depth > 512) return nullptr;
    if (node.is_object()) {
      for (const char* k : {"$anchor", "$id", "id"})
        if (node.contains(k) && node[k].is_string()) {
          const std::string v = node[k].get<std::string>();
          if ((std::string(k) == "$anchor" && v == name) || (std::string(k) != "$anchor" && v == "#" + name)) return &node;
        }
      for (const auto& [k, v] : node.items()) {
        if (k == "enum" || k == "const" || k == "default" || k == "examples") continue;  // values, not schemas
        if (const json* hit = find_anchor(v, name, depth + 1)) return hit;
      }
    } else if (node.is_array()) {
      for (const auto& v : node)
        if (const json* hit = find_anchor(v, name, depth + 1)) return hit;
    }
    return nullptr;
  }

  // The schema a local reference points at ("#", "#/$defs/x", percent-encoded or not, "#anchor",
  // or any of these after the root's own $id).
  json resolve(const json& r, const std::string& ptr) {
    if (!r.is_string()) fail("$ref", ptr, "$ref must be a string");
    std::string target = r.get<std::string>();
    const std::string base = base_uri();
    if (!base.empty() && target.rfind(base, 0) == 0) target = target.substr(base.size());
    if (target.empty()) target = "#";
    if (target[0] != '#') fail("$ref", ptr, "only local references (#/..., #anchor) are supported, not '" + target + "'");
    std::string p;
    for (size_t i = 1; i < target.size(); ++i) {  // percent-decoding (URI fragment)
      if (target[i] == '%' && i + 2 < target.size() + 0 && std::isxdigit(static_cast<unsigned char>(target[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(target[i + 2]))) {
        p += static_cast<char>(std::stoi(target.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        p += target[i];
      }
    }
    const json* node = &root_;
    if (!p.empty()) {
      if (p[0] != '/') {
        const json* anchored = find_anchor(root_, p, 0);
        if (!anchored) fail("$ref", ptr, "reference '" + target + "': no subschema declares the anchor '" + p + "'");
        return *anchored;
      }
      size_t pos = 1;
      while (pos <= p.size()) {
        size_t next = p.find('/', pos);
        std::string part = p.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
        std::string key;
        for (size_t i = 0; i < part.size(); ++i) {
          if (part[i] == '~' && i + 1 < part.size()) {
            key += part[i + 1] == '1' ? '/' : '~';
            ++i;
          } else {
            key += part[i];
          }
        }
        if (node->is_object() && node->contains(key)) node = &(*node)[key];
        else if (node->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(key) < node->size())
          node = &(*node)[std::stoul(key)];
        else fail("$ref", ptr, "reference '" + target + "' does not resolve");
        if (next == std::string::npos) break;
        pos = next + 1;
      }
    }
    return *node;
  }

  Re ref(const json& r, const std::string& ptr) {
    const json target = resolve(r, ptr);
    const std::string key = r.get<std::string>();
    RefScope entered(*this);
    if (!entered.enter(key)) return over_ ? over_also(re_never(), json_value_regex_ws(0)) : re_never();
    return compile(target, key.size() > 1 ? key.substr(1) : "");
  }

  Re typed(const json& s, const std::string& t, const std::string& ptr) {
    if (t == "__none__") return re_never();  // an allOf whose types do not intersect
    if (t == "null") return re_literal("null");
    if (t == "boolean") return re_alt({re_literal("true"), re_literal("false")});
    if (t == "integer") return integer(s, ptr);
    if (t == "number") return number(s, ptr);
    if (t == "string") return string(s, ptr);
    if (t == "object") return object(s, ptr);
    if (t == "array") return array(s, ptr);
    fail("type", ptr + "/type", "unknown type '" + t + "'");
  }

  static std::optional<double> num(const json& s, const char* k, const std::string& ptr) {
    if (!s.contains(k)) return std::nullopt;
    if (!s[k].is_number()) fail(k, ptr + "/" + k, std::string(k) + " must be a number");
    return s[k].get<double>();
  }

  Re integer(const json& s, const std::string& ptr) {
    int64_t lo = kNoLower, hi = kNoUpper;
    auto clamp = [](double v) { return v < -9.2e18 ? kNoLower : v > 9.2e18 ? kNoUpper : static_cast<int64_t>(v); };
    if (auto v = num(s, "minimum", ptr)) lo = std::max(lo, clamp(std::ceil(*v)));
    if (auto v = num(s, "exclusiveMinimum", ptr)) lo = std::max(lo, clamp(std::floor(*v) + 1));
    if (auto v = num(s, "maximum", ptr)) hi = std::min(hi, clamp(std::floor(*v)));
    if (auto v = num(s, "exclusiveMaximum", ptr)) hi = std::min(hi, clamp(std::ceil(*v) - 1));
    // OpenAPI's int32, int64, ...: bounds (validators do not assert them, so an over-approximation,
    // which must hold every document a validator accepts, leaves them out).
    if (s.contains("format") && s["format"].is_string())
      if (auto r = integer_format_range(s["format"].get<std::string>())) {
        if (over_) ++over_changes_;
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

  struct MultipleOf {
    uint64_t a = 1;
    int k = 0;  // multipleOf = a / 10^k
  };
  MultipleOf multiple_of(const json& s, const std::string& ptr) const {
    MultipleOf m;
    const std::string mp = ptr + "/multipleOf";
    if (!decimal_fraction(s["multipleOf"], &m.a, &m.k))
      fail("multipleOf", mp, "multipleOf must be a number above 0 with at most 18 digits (" + s["multipleOf"].dump() + ")");
    return m;
  }
  // The divisibility automaton of a / 10^k, which has about a·(k + 3) states.
  Re multiple_of_language(uint64_t a, int k, const std::string& ptr) const {
    if (static_cast<double>(a) * (k + 3) > static_cast<double>(o_.max_product_states))
      fail("multipleOf", ptr + "/multipleOf", "multipleOf needs more than " + std::to_string(o_.max_product_states) +
                                                 " automaton states (SchemaOptions::max_product_states)");
    return re_automaton(std::make_shared<const Dfa>(multiple_of_dfa(a, k)));
  }

  // Canonical integers in [lo, hi] that are multiples of `step`: listed when the bounds leave a
  // few, else the range's language intersected with the divisibility automaton.
  Re integer_multiples(int64_t lo, int64_t hi, uint64_t step, const std::string& ptr) {
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
    Re out = product({integer_range_regex(lo, hi), multiple_of_language(step, 0, ptr)},
                     ProductRule::Intersection, "multipleOf", ptr + "/multipleOf", "multipleOf with the bounds");
    if (out->kind == RegexNode::Kind::Never) fail("multipleOf", ptr + "/multipleOf", "no integer within the bounds is a multiple of multipleOf");
    return out;
  }

  // Numbers of at most kMaxMultipleDigits digits: a double holds such a decimal exactly enough that
  // its shortest spelling is the same decimal, so the value a parser reads is the one written.
  static Re short_numeral() {
    std::vector<Re> alts;
    for (int i = 1; i <= kMaxMultipleDigits; ++i) {
      Re whole_part = re_repeat(digit(), i, i);
      alts.push_back(i == kMaxMultipleDigits ? whole_part
                                             : re_concat({whole_part, re_optional(re_concat({re_byte('.'), re_repeat(digit(), 1, kMaxMultipleDigits - i)}))}));
    }
    return re_concat({re_optional(re_byte('-')), re_alt(std::move(alts))});
  }

  // Bounded numbers: integer-valued bounds, no exponent (documented); see signed_number_range.
  Re number(const json& s, const std::string& ptr) {
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
    for (const auto& [b, k] : {std::make_pair(lo, mn ? "minimum" : "exclusiveMinimum"), std::make_pair(hi, mx ? "maximum" : "exclusiveMaximum")})
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
      if (r->kind == RegexNode::Kind::Never) fail("multipleOf", ptr + "/multipleOf", "no number within the bounds is a multiple of multipleOf");
    }
    return over_ ? over_also(r, non_canonical_number(false)) : r;
  }

  struct Bound {
    bool set = false;
    double value = 0;
    bool inclusive = true;
  };

  static Re frac_any() { return re_optional(re_concat({re_byte('.'), re_repeat(digit(), 1, kMaxFractionDigits)})); }
  static Re frac_zero() { return re_optional(re_concat({re_byte('.'), re_repeat(re_byte('0'), 1, kMaxFractionDigits)})); }
  static Re frac_nonzero() {
    return re_concat({re_byte('.'), re_repeat(re_byte('0'), 0, kMaxFractionDigits - 1), nonzero_digit(),
                      re_repeat(digit(), 0, kMaxFractionDigits - 1)});
  }

  // y = I(.F)? >= 0 with y in the range given by whole bounds on y (either may be absent).
  static Re unsigned_number_range(const Bound& lo, const Bound& hi) {
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
  static Re signed_number_range(const Bound& lo, const Bound& hi) {
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

  // A format's language of raw characters (schema_formats.h); nullptr where it asserts nothing
  // on strings (a format this table does not know is reported, see SchemaNotes).
  Re format(const json& s, const std::string& ptr) {
    if (!s.contains("format")) return nullptr;
    if (!s["format"].is_string()) fail("format", ptr + "/format", "format must be a string");
    const std::string f = s["format"].get<std::string>();
    if (over_ && f == "byte") {  // OpenAPI's, which validators do not assert (see integer)
      ++over_changes_;
      return nullptr;
    }
    const auto pattern = format_pattern(f);
    if (!pattern) {
      if (!integer_format_range(f) && !format_without_constraint(f)) unasserted_[f].insert(ptr + "/format");
      return nullptr;
    }
    // The table is fixed: each format is parsed once per process (schemas may compile on several
    // threads, hence the lock).
    static std::mutex lock;
    static std::map<std::string, Re> cache;
    const std::lock_guard<std::mutex> hold(lock);
    auto it = cache.find(f);
    if (it == cache.end()) it = cache.emplace(f, parse_regex(*pattern, &raw_string_chars()).re).first;
    return it->second;
  }

  static int length_bound(const json& s, const char* k, const std::string& ptr) {
    if (!s.contains(k)) return -1;
    const json& x = s[k];
    const bool integral = x.is_number_integer() || (x.is_number_float() && std::floor(x.get<double>()) == x.get<double>());
    if (!integral || x.get<double>() < 0) fail(k, ptr + "/" + k, std::string(k) + " must be a non-negative integer");
    const int64_t v = static_cast<int64_t>(x.get<double>());
    if (v > 100000) fail(k, ptr + "/" + k, std::string(k) + " above 100000 is not supported");
    return static_cast<int>(v);
  }

  Re string(const json& s, const std::string& ptr) {
    const int mn = length_bound(s, "minLength", ptr), mx = length_bound(s, "maxLength", ptr);
    const bool lengths = mn >= 0 || mx >= 0;
    if (mn >= 0 && mx >= 0 && mn > mx) fail("minLength", ptr, "minLength is above maxLength");
    const Re format_lang = format(s, ptr);
    if (!format_lang && !s.contains("pattern")) return quoted(re_repeat(json_char(), std::max(mn, 0), mx));
    // Under a pattern or a format the content is written without escapes (documented), so the
    // decoded string is the written one: each keyword is a language of raw characters, lengths
    // count them (code points), and together they are the intersection.
    std::vector<Re> parts;
    std::string what;
    if (format_lang) {
      parts.push_back(format_lang);
      what = "format";
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail("pattern", ptr + "/pattern", "pattern must be a string");
      ParsedRegex p;
      try {
        p = parse_regex(s["pattern"].get<std::string>(), &raw_string_chars());
      } catch (const RegexError& e) {
        fail("pattern", ptr + "/pattern", e.what());
      }
      // JSON Schema patterns are not anchored: an unanchored side admits any characters.
      Re any = re_star(raw_string_char());
      parts.push_back(re_concat({p.anchored_start ? re_empty() : any, p.re, p.anchored_end ? re_empty() : any}));
      what = what.empty() ? "pattern" : "pattern with " + what;
    }
    if (lengths) {
      parts.push_back(re_repeat(raw_string_char(), std::max(mn, 0), mx));
      what += " with minLength/maxLength";
    }
    const std::string keyword = s.contains("pattern") ? "pattern" : "format";
    Re content = parts.size() == 1 ? parts[0] : product(parts, ProductRule::Intersection, keyword, ptr, what);
    if (content->kind == RegexNode::Kind::Never) fail(keyword, ptr, "no string satisfies " + what);
    // Other spellings: the same characters with escapes.
    return quoted(over_ ? over_also(content, escaped_content()) : content);
  }

  Re member(const std::string& key, Re value) {
    return re_concat({re_literal(json(key).dump()), ws_, re_byte(':'), ws_, std::move(value)});
  }

  // A patternProperties entry: the raw keys it matches (unanchored, as JSON Schema patterns are),
  // an automaton over any key's UTF-8 bytes for declared names, and its schema.
  struct PatternProperty {
    std::string pattern, ptr;
    Re key;                    // raw characters (the keys extras are written with)
    std::shared_ptr<Dfa> any;  // every character: does a declared name match?
    json schema;
  };

  std::vector<PatternProperty> pattern_properties(const json& s, const std::string& ptr) {
    std::vector<PatternProperty> out;
    if (!s.contains("patternProperties")) return out;
    const std::string pp = ptr + "/patternProperties";
    if (!s["patternProperties"].is_object()) fail("patternProperties", pp, "patternProperties must be an object");
    CompileLimits limits;
    limits.max_dfa_states = o_.max_product_states;
    for (const auto& [pattern, sub] : s["patternProperties"].items()) {
      PatternProperty p{pattern, pp + "/" + escape_pointer(pattern), nullptr, nullptr, sub};
      auto unanchored = [&](const std::vector<CodePointRange>* universe) {
        ParsedRegex r;
        try {
          r = parse_regex(pattern, universe);
        } catch (const RegexError& e) {
          fail("patternProperties", p.ptr, e.what());
        }
        Re any = re_star(universe ? re_code_points(*universe) : re_any_char());
        return re_concat({r.anchored_start ? re_empty() : any, r.re, r.anchored_end ? re_empty() : any});
      };
      p.key = unanchored(&raw_string_chars());
      try {
        p.any = std::make_shared<Dfa>(compile_dfa(unanchored(nullptr), limits));
      } catch (const RegexError& e) {
        fail("patternProperties", p.ptr, e.what());
      }
      out.push_back(std::move(p));
    }
    // Keys two patterns both match would need both schemas: refused (the keys extras may write).
    for (size_t i = 0; i < out.size(); ++i)
      for (size_t j = i + 1; j < out.size(); ++j)
        if (product({out[i].key, out[j].key}, ProductRule::Intersection, "patternProperties", pp, "patternProperties overlap check")
                ->kind != RegexNode::Kind::Never)
          fail("patternProperties", pp, "patterns '" + out[i].pattern + "' and '" + out[j].pattern +
                                            "' match the same keys: overlapping patternProperties are not supported");
    return out;
  }

  Re object(const json& s, const std::string& ptr) {
    if (!o_.strict_properties && !s.contains("additionalProperties")) {  // the JSON Schema meaning
      json open = s;
      open["additionalProperties"] = true;
      return object(open, ptr);
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("required", ptr + "/required", "required must be an array of names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail("required", ptr + "/required", "required must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    const std::vector<PatternProperty> patterns = pattern_properties(s, ptr);
    auto matching = [&](const std::string& name) {
      std::vector<json> out;
      for (const auto& p : patterns)
        if (p.any->matches(name)) out.push_back(p.schema);
      return out;
    };
    // propertyNames: the names' language (quoted), exact; a declared name outside it never appears.
    Re names_lang;
    std::shared_ptr<Dfa> names_dfa;
    const std::string np = ptr + "/propertyNames";
    if (s.contains("propertyNames") && !over_) {
      names_lang = compile(s["propertyNames"], np);
      CompileLimits limits;
      limits.max_dfa_states = o_.max_product_states;
      try {
        names_dfa = std::make_shared<Dfa>(compile_dfa(names_lang, limits));
      } catch (const RegexError& e) {
        fail("propertyNames", np, e.what());
      }
    }
    auto name_ok = [&](const std::string& name) { return !names_dfa || names_dfa->matches(json(name).dump()); };

    std::vector<std::pair<std::string, Re>> props;
    std::vector<std::string> names;  // every declared or added name: extras never write one
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail("properties", ptr + "/properties", "properties must be an object");
      for (const auto& [k, v] : s["properties"].items()) {
        const std::string pp = ptr + "/properties/" + escape_pointer(k);
        names.push_back(k);
        std::vector<json> also = over_ ? std::vector<json>{} : matching(k);
        if (!name_ok(k)) {
          if (required.count(k)) fail("propertyNames", np, "required property '" + k + "' does not satisfy propertyNames");
          continue;
        }
        if (also.empty()) props.emplace_back(k, compile(v, pp));
        else {  // a declared name a pattern matches: both schemas apply
          also.insert(also.begin(), v);
          props.emplace_back(k, compile_conjunction(also, pp));
        }
      }
    }
    Re extra = re_never();  // the value schema of additional properties, if any
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) extra = compile(a, ptr + "/additionalProperties");
    }
    const bool has_named_props = s.contains("properties");
    // A name the schema needs but does not declare: its value follows the patterns that match it,
    // else additionalProperties (any value when absent); never when propertyNames rejects it.
    auto undeclared_value = [&](const std::string& name, const std::string& vp) -> Re {
      if (!name_ok(name)) return re_never();
      std::vector<json> also = over_ ? std::vector<json>{} : matching(name);
      if (!also.empty()) return also.size() == 1 ? compile(also[0], vp) : compile_conjunction(also, vp);
      return s.contains("additionalProperties") ? extra : json_value_regex_ws(o_.any_depth);
    };
    auto declared = [&](const std::string& name) {
      return has_named_props && s["properties"].contains(name);
    };
    for (const auto& r : required)
      if (!declared(r)) {
        Re value = undeclared_value(r, ptr + "/required");
        if (value->kind == RegexNode::Kind::Never)
          fail("required", ptr + "/required",
               "required property '" + r + "' is not in properties and additionalProperties (or propertyNames) rules it out");
        props.emplace_back(r, value);
        names.push_back(r);
      }
    // dependentRequired: {a: [b, ...]}: when a is present, so is each b.
    std::vector<std::pair<std::string, std::vector<std::string>>> deps;
    if (s.contains("dependentRequired")) {
      const std::string dp = ptr + "/dependentRequired";
      const json& d = s["dependentRequired"];
      if (!d.is_object()) fail("dependentRequired", dp, "dependentRequired must be an object of name arrays");
      for (const auto& [a, list] : d.items()) {
        if (!list.is_array()) fail("dependentRequired", dp, "dependentRequired must be an object of name arrays");
        std::vector<std::string> bs;
        for (const auto& b : list) {
          if (!b.is_string()) fail("dependentRequired", dp, "dependentRequired must be an object of name arrays");
          bs.push_back(b.get<std::string>());
        }
        deps.emplace_back(a, bs);
      }
      // Names the dependencies mention but the schema does not declare become optional properties.
      for (const auto& [a, bs] : deps) {
        std::vector<std::string> all = bs;
        all.insert(all.begin(), a);
        for (const auto& n : all)
          if (std::find(names.begin(), names.end(), n) == names.end()) {
            names.push_back(n);
            Re value = undeclared_value(n, dp);
            if (value->kind != RegexNode::Kind::Never) props.emplace_back(n, value);
          }
      }
    }

    if (over_) {  // min/maxProperties, dependentRequired, propertyNames: left out (a superset)
      const bool any_extra = s.contains("patternProperties") || !s.contains("additionalProperties");
      return object_over(props, required, any_extra ? json_value_regex_ws(o_.any_depth) : extra, ptr);
    }

    const int min_props = length_bound(s, "minProperties", ptr), max_props = length_bound(s, "maxProperties", ptr);
    if (min_props >= 0 && max_props >= 0 && min_props > max_props) fail("minProperties", ptr, "minProperties is above maxProperties");

    // The extra members: keys a pattern matches with its schema, other keys with additionalProperties'.
    std::vector<Re> extra_members;
    {
      Re unnamed = quoted(unnamed_key(names, ptr));
      if (names_lang) unnamed = product({unnamed, names_lang}, ProductRule::Intersection, "propertyNames", np, "propertyNames with the keys");
      std::vector<Re> pattern_keys = {unnamed};
      for (const auto& p : patterns) {
        Re key = product({quoted(p.key), unnamed}, ProductRule::Intersection, "patternProperties", p.ptr, "the keys of a pattern");
        pattern_keys.push_back(quoted(p.key));
        if (key->kind == RegexNode::Kind::Never) continue;
        extra_members.push_back(re_concat({key, ws_, re_byte(':'), ws_, compile(p.schema, p.ptr)}));
      }
      if (extra->kind != RegexNode::Kind::Never) {
        Re key = patterns.empty() ? unnamed
                                  : product(pattern_keys, ProductRule::Difference, "patternProperties", ptr + "/patternProperties",
                                            "additional keys (no pattern matches)");
        extra_members.push_back(re_concat({key, ws_, re_byte(':'), ws_, extra}));
      }
    }
    const Re extra_member = re_alt(extra_members);
    const bool extras_possible = extra_member->kind != RegexNode::Kind::Never;
    if (extras_possible && max_props > kMaxCountedProperties)
      fail("maxProperties", ptr + "/maxProperties",
           "maxProperties above " + std::to_string(kMaxCountedProperties) + " with additional or pattern properties is not supported");

    // Presence bits of the properties dependentRequired mentions, in props order.
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < props.size(); ++i) index.emplace(props[i].first, i);
    std::map<size_t, int> bit;  // prop index -> bit
    std::set<size_t> forbidden;  // present would need an absent-by-schema dependent
    std::vector<std::pair<size_t, size_t>> edges;  // (a, b): a present -> b present
    for (const auto& [a, bs] : deps) {
      auto ia = index.find(a);
      if (ia == index.end()) continue;  // a never appears: nothing to require
      for (const auto& b : bs) {
        auto ib = index.find(b);
        if (ib == index.end()) forbidden.insert(ia->second);
        else if (ib->second != ia->second) edges.emplace_back(ia->second, ib->second);
      }
    }
    for (const auto& [a, b] : edges)
      for (size_t x : {a, b})
        if (!bit.count(x)) bit.emplace(x, static_cast<int>(bit.size()));
    if (bit.size() > kMaxDependentProperties)
      fail("dependentRequired", ptr + "/dependentRequired",
           "dependentRequired over more than " + std::to_string(kMaxDependentProperties) + " properties is not supported");
    for (size_t f : forbidden)
      if (required.count(props[f].first))
        fail("dependentRequired", ptr + "/dependentRequired",
             "required property '" + props[f].first + "' depends on a property the schema rules out");
    auto is_set = [&](uint32_t mask, size_t i) {
      auto it = bit.find(i);
      return it != bit.end() && ((mask >> it->second) & 1u) != 0;
    };

    // Members in schema order; optional ones may be left out, commas only between members; extras
    // last. tail(i, first, c, mask) = the members from i on, `first` when nothing was emitted yet,
    // c named members so far (capped where the bounds stop caring), mask the dependentRequired
    // properties present so far.
    // Extra keys may repeat one another (a regular language cannot keep them apart), and a parser
    // keeps one of a repeated key, so at most one extra member counts toward minProperties; each
    // counts toward maxProperties.
    const int count_cap = std::max(min_props, max_props >= 0 ? max_props + 1 : 0);
    const Re comma = re_concat({ws_, re_byte(','), ws_});
    std::map<std::tuple<size_t, bool, int, uint32_t>, Re> memo;
    std::function<Re(size_t, bool, int, uint32_t)> tail = [&](size_t i, bool first, int c, uint32_t mask) -> Re {
      auto key = std::make_tuple(i, first, c, mask);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      Re r;
      if (i == props.size()) {
        const int lo = min_props > c ? min_props - c : 0, hi = max_props >= 0 ? max_props - c : -1;
        if (!extras_possible || hi == 0) r = lo == 0 ? re_empty() : re_never();
        else if (lo > 1) r = re_never();
        else {
          Re some = re_concat({extra_member, re_repeat(re_concat({comma, extra_member}), 0, hi < 0 ? -1 : hi - 1)});
          if (!first) some = re_concat({comma, some});
          r = lo == 0 ? re_optional(some) : some;
        }
      } else {
        const std::string& name = props[i].first;
        bool can_be_present = !forbidden.count(i) && (max_props < 0 || c < max_props);
        bool can_be_absent = !required.count(name);
        for (const auto& [a, b] : edges) {
          if (a == i && b < i && !is_set(mask, b)) can_be_present = false;  // a needs an earlier b it left out
          if (b == i && a < i && is_set(mask, a)) can_be_absent = false;    // an earlier a needs b
        }
        std::vector<Re> alts;
        if (can_be_present) {
          const uint32_t m = bit.count(i) ? mask | (1u << bit.at(i)) : mask;
          alts.push_back(re_concat({first ? re_empty() : comma, member(name, props[i].second), tail(i + 1, false, std::min(c + 1, count_cap), m)}));
        }
        if (can_be_absent) alts.push_back(tail(i + 1, first, c, mask));
        r = re_alt(std::move(alts));
      }
      memo[key] = r;
      return r;
    };
    Re body = tail(0, true, 0, 0);
    if (body->kind == RegexNode::Kind::Never) {
      const char* k = s.contains("minProperties") ? "minProperties" : s.contains("dependentRequired") ? "dependentRequired" : "properties";
      fail(k, ptr + "/" + k, std::string("no object satisfies ") + k + " with the schema's properties (extra keys may repeat, so at most one counts toward minProperties)");
    }
    return re_concat({re_byte('{'), ws_, body, ws_, re_byte('}')});
  }

  // An object as an over-approximation: members in any order (repeats too), a named key's value its
  // property's, an unnamed raw key's value additionalProperties' (any value when absent), a key
  // with escapes any value; each required key is the key of some member, spelt raw or with
  // escapes (an escape in a value does not stand for a key: a regular language of members, not of
  // bytes, so {"b":"x\"y"} is not taken for a document holding a required "a").
  Re object_over(const std::vector<std::pair<std::string, Re>>& props, const std::set<std::string>& required, const Re& extra,
                 const std::string& ptr) {
    ++over_changes_;
    std::vector<Re> members;
    std::vector<std::string> names;
    for (const auto& [k, v] : props) {
      members.push_back(member(k, v));
      names.push_back(k);
    }
    if (extra->kind != RegexNode::Kind::Never)
      members.push_back(re_concat({quoted(unnamed_key(names, ptr)), ws_, re_byte(':'), ws_, extra}));
    members.push_back(re_concat({quoted(escaped_content()), ws_, re_byte(':'), ws_, json_value_regex_ws(o_.any_depth)}));
    const Re escaped_member = members.back();
    const Re m = re_alt(std::move(members));
    const Re sep = re_concat({ws_, re_byte(','), ws_});
    Re body = re_concat({re_byte('{'), ws_, re_optional(re_concat({m, re_star(re_concat({sep, m}))})), ws_, re_byte('}')});
    if (required.empty()) return body;
    std::vector<Re> langs;
    for (const auto& r : required) {
      // The members that may carry key r: its own (a declared property's value, else an extra
      // key's), or any key with escapes.
      std::vector<Re> carriers = {escaped_member};
      const auto named = std::find_if(props.begin(), props.end(), [&](const auto& p) { return p.first == r; });
      if (named != props.end()) carriers.push_back(member(r, named->second));
      else if (extra->kind != RegexNode::Kind::Never) carriers.push_back(member(r, extra));
      langs.push_back(re_concat({re_byte('{'), ws_, re_star(re_concat({m, sep})), re_alt(std::move(carriers)),
                                 re_star(re_concat({sep, m})), ws_, re_byte('}')}));
    }
    if (langs.size() == 1) return langs[0];
    try {
      return product(langs, ProductRule::Intersection, "oneOf", ptr + "/required", "oneOf: a branch's required keys in any order");
    } catch (const SchemaError&) {
      return body;  // past the product cap: without the required keys, a coarser superset (still sound to subtract)
    }
  }

  Re array(const json& s, const std::string& ptr) {
    const int mn = std::max(length_bound(s, "minItems", ptr), 0), mx = length_bound(s, "maxItems", ptr);
    std::vector<Re> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) fail("prefixItems", ptr + "/prefixItems", "prefixItems must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(compile(s["prefixItems"][i], ptr + "/prefixItems/" + std::to_string(i)));
    }
    Re item = s.contains("items") ? compile(s["items"], ptr + "/items") : json_value_regex_ws(o_.any_depth);
    const bool items_allowed = item->kind != RegexNode::Kind::Never;
    const int k = static_cast<int>(prefix.size());
    if (mx >= 0 && mn > mx) fail("minItems", ptr, "minItems is above maxItems");
    if (!items_allowed && mn > k) fail("minItems", ptr, "minItems needs more items than prefixItems allows");
    // The most items an array may have (-1: no bound).
    const int longest = !items_allowed ? (mx >= 0 ? std::min(mx, k) : k) : mx;
    const Re comma = re_concat({ws_, re_byte(','), ws_});
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
      if (over_) ++over_changes_;  // an over-approximation leaves it out
      else if (longest < 0 || longest > 1) {
        // Items of a finite enumeration: each value at most once, in the enumeration's order.
        if (k == 0 && !s.contains("contains") && s.contains("items"))
          if (auto values = finite_values(s["items"], 0)) return unique_enum_array(*values, mn, mx, comma, item, ptr);
        if ((longest < 0 || longest > k) && o_.unique_items_by_validator) {
          by_validator_["uniqueItems"].insert(ptr + "/uniqueItems");
        } else {
          unique_prefix_items(s, longest, ptr);
        }
      }
    }
    if (s.contains("contains") && !over_) return array_contains(s, prefix, item, mn, mx, ptr);
    if (s.contains("contains")) ++over_changes_;  // an over-approximation leaves it out
    // elements(i): the elements from position i on (i >= 1 means a comma comes first).
    std::function<Re(int)> elements = [&](int i) -> Re {
      if (i >= k) {
        if (!items_allowed) return re_empty();
        const int lo = std::max(mn - i, 0), hi = mx < 0 ? -1 : mx - i;
        if (hi == 0) return re_empty();
        if (i == 0) {  // the first element has no comma before it
          Re rest = re_repeat(re_concat({comma, item}), std::max(lo - 1, 0), hi < 0 ? -1 : hi - 1);
          Re some = re_concat({item, rest});
          return lo == 0 ? re_optional(some) : some;
        }
        return re_repeat(re_concat({comma, item}), lo, hi);
      }
      if (mx >= 0 && i >= mx) return re_empty();
      Re here = re_concat({i == 0 ? re_empty() : comma, prefix[static_cast<size_t>(i)], elements(i + 1)});
      return i >= mn ? re_optional(here) : here;
    };
    return re_concat({re_byte('['), ws_, elements(0), ws_, re_byte(']')});
  }

  // The values an item schema allows when they are a finite list: enum or const (filtered by type),
  // boolean, null, through a plain $ref; nullopt otherwise (or past 64 values).
  std::optional<std::vector<json>> finite_values(const json& raw, int depth) {
    if (!raw.is_object() || depth > 8) return std::nullopt;
    const json s = read(raw, "");
    if (s.size() == 1 && s.contains("$ref") && s["$ref"].is_string()) {
      RefScope entered(*this);
      if (!entered.enter(s["$ref"].get<std::string>())) return std::nullopt;
      return finite_values(resolve(s["$ref"], ""), depth + 1);
    }
    for (const auto& [k, v] : s.items())
      if (k != "type" && k != "enum" && k != "const") return std::nullopt;
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    else if (s.contains("enum") && s["enum"].is_array()) values.assign(s["enum"].begin(), s["enum"].end());
    else if (s.contains("type") && s["type"] == "boolean") values = {json(false), json(true)};
    else if (s.contains("type") && s["type"] == "null") values = {json(nullptr)};
    else return std::nullopt;
    std::vector<json> out;
    for (const auto& v : values) {
      bool typed = !s.contains("type");
      if (s.contains("type")) {
        if (s["type"].is_string()) typed = value_has_type(v, s["type"].get<std::string>());
        else if (s["type"].is_array())
          for (const auto& t : s["type"]) typed = typed || (t.is_string() && value_has_type(v, t.get<std::string>()));
      }
      // Equal values spelt twice (1 and 1.0, objects in another key order) would be written twice: refuse those.
      for (const auto& o : out)
        if (o.dump() == v.dump() || (o.is_number() && v.is_number() && o.get<double>() == v.get<double>()) ||
            (o.is_structured() && v.is_structured()))
          return std::nullopt;
      if (typed) out.push_back(v);
    }
    if (out.empty() || out.size() > 64) return std::nullopt;
    return out;
  }

  // Arrays of distinct values of a finite enumeration, written in its order: after value j, only
  // values past j (U_j: the rest, each with a comma before it). minItems/maxItems: the array's
  // ordinary language intersected with it.
  Re unique_enum_array(const std::vector<json>& values, int mn, int mx, const Re& comma, const Re& item, const std::string& ptr) {
    const size_t n = values.size();
    std::vector<Re> rest(n + 1, re_empty());  // rest[j]: any choice of values j.. in order, each after a comma
    for (size_t j = n; j-- > 0;) rest[j] = re_concat({re_optional(re_concat({comma, re_literal(values[j].dump())})), rest[j + 1]});
    std::vector<Re> first;
    for (size_t j = 0; j < n; ++j) first.push_back(re_concat({re_literal(values[j].dump()), rest[j + 1]}));
    Re unique = re_concat({re_byte('['), ws_, re_optional(re_alt(std::move(first))), ws_, re_byte(']')});
    if (mn <= 0 && mx < 0) return unique;
    const int lo = std::max(mn, 0);
    Re some = re_concat({item, re_repeat(re_concat({comma, item}), std::max(lo - 1, 0), mx < 0 ? -1 : std::max(mx - 1, 0))});
    Re counted = re_concat({re_byte('['), ws_, mx == 0 ? re_empty() : (lo == 0 ? re_optional(some) : some), ws_, re_byte(']')});
    return product({unique, counted}, ProductRule::Intersection, "uniqueItems", ptr + "/uniqueItems", "uniqueItems with minItems/maxItems");
  }

  // uniqueItems: true beyond one item: only prefixItems with no items after them, pairwise
  // disjoint. Items i < j are never equal when no spelling of i's exact language is in j's
  // over-approximation (which holds every spelling of every value valid by j).
  void unique_prefix_items(const json& s, int longest, const std::string& ptr) {
    const std::string up = ptr + "/uniqueItems";
    const int k = s.contains("prefixItems") ? static_cast<int>(s["prefixItems"].size()) : 0;
    if (longest < 0 || longest > k)
      fail("uniqueItems", up, "uniqueItems: true is supported only where at most one item is allowed or every item is a "
                              "prefixItems entry (items: false or maxItems) with pairwise disjoint languages");
    for (int i = 0; i < longest; ++i)
      for (int j = 0; j < longest; ++j) {
        if (i == j) continue;
        const std::string pi = ptr + "/prefixItems/" + std::to_string(i), pj = ptr + "/prefixItems/" + std::to_string(j);
        const Re both = product({exact(s["prefixItems"][static_cast<size_t>(i)], pi), looser(s["prefixItems"][static_cast<size_t>(j)], pj)},
                                ProductRule::Intersection, "uniqueItems", up, "uniqueItems (prefixItems disjointness)");
        if (both->kind != RegexNode::Kind::Never)
          fail("uniqueItems", up, "uniqueItems: prefixItems " + std::to_string(i) + " and " + std::to_string(j) +
                                      " may hold equal values (only pairwise disjoint prefixItems are supported)");
      }
  }

  // contains with minContains/maxContains: each item is a hit (its language ∩ contains' exact
  // language) or a miss (its language minus contains' over-approximation, so an item contains
  // holds in another spelling is never counted as a miss); the hits are counted up to the bounds.
  // An item that is neither (valid by contains, outside its exact language) is left out.
  Re array_contains(const json& s, const std::vector<Re>& prefix, const Re& item, int mn, int mx, const std::string& ptr) {
    const std::string cp = ptr + "/contains";
    const int min_c = s.contains("minContains") ? length_bound(s, "minContains", ptr) : 1;
    const int max_c = length_bound(s, "maxContains", ptr);
    if (max_c >= 0 && min_c > max_c) fail("minContains", ptr + "/minContains", "minContains is above maxContains");
    const int cap = std::max(min_c, max_c + 1);  // counts past it behave alike
    if (cap > kMaxContainsCount)
      fail(max_c + 1 > min_c ? "maxContains" : "minContains", ptr + (max_c + 1 > min_c ? "/maxContains" : "/minContains"),
           "contains counts above " + std::to_string(kMaxContainsCount) + " are not supported");
    const Re hit_of = exact(s["contains"], cp), miss_of = looser(s["contains"], cp);
    std::map<const RegexNode*, std::pair<Re, Re>> split;  // an item language -> (hit, miss)
    auto parts = [&](const Re& lang) -> const std::pair<Re, Re>& {
      auto it = split.find(lang.get());
      if (it == split.end()) {
        Re hit = product({lang, hit_of}, ProductRule::Intersection, "contains", cp, "contains (items it holds)");
        Re miss = product({lang, miss_of}, ProductRule::Difference, "contains", cp, "contains (items it does not hold)");
        it = split.emplace(lang.get(), std::make_pair(hit, miss)).first;
      }
      return it->second;
    };
    const int k = static_cast<int>(prefix.size());
    const bool items_allowed = item->kind != RegexNode::Kind::Never;
    // Past `loop` positions (no maxItems) every position is alike: a loop instead of positions.
    const int loop = std::max({k, mn, 1});
    // Positions are spelt out up to maxItems, else up to `loop`: each with its counts.
    const int positions = mx >= 0 ? mx + 1 : loop + 1;
    if (static_cast<int64_t>(positions) * (cap + 1) > kMaxContainsPositions)
      fail("contains", cp, "contains with " + std::string(mx >= 0 ? "maxItems " : "minItems/prefixItems ") +
                               std::to_string(positions - 1) + " is too large to count (at most " +
                               std::to_string(kMaxContainsPositions) + " positions × counts)");
    const Re comma = re_concat({ws_, re_byte(','), ws_});
    std::map<std::pair<int, int>, Re> memo;
    // elements(i, c): the elements from position i on, c hits so far (capped at `cap`).
    std::function<Re(int, int)> elements = [&](int i, int c) -> Re {
      auto key = std::make_pair(i, c);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      const bool can_end = i >= mn && c >= min_c;
      const bool more = (mx < 0 || i < mx) && (i < k || items_allowed);
      Re r;
      if (!more) {
        r = can_end ? re_empty() : re_never();
      } else if (mx < 0 && i >= loop) {
        // Misses anywhere, between the hits still allowed: N* (M N*){lo, hi}.
        const auto& [hit, miss] = parts(item);
        const Re n = re_star(re_concat({comma, miss})), m = re_concat({comma, hit});
        const int lo = std::max(min_c - c, 0), hi = max_c < 0 ? -1 : max_c - c;
        r = re_concat({n, re_repeat(re_concat({m, n}), lo, hi)});
      } else {
        const auto& [hit, miss] = parts(i < k ? prefix[static_cast<size_t>(i)] : item);
        const Re sep = i == 0 ? re_empty() : comma;
        std::vector<Re> alts;
        if (can_end) alts.push_back(re_empty());
        if (max_c < 0 || c < max_c) alts.push_back(re_concat({sep, hit, elements(i + 1, std::min(c + 1, cap))}));
        alts.push_back(re_concat({sep, miss, elements(i + 1, c)}));
        r = re_alt(std::move(alts));
      }
      memo[key] = r;
      return r;
    };
    Re body = elements(0, 0);
    if (body->kind == RegexNode::Kind::Never) fail("contains", cp, "no array satisfies contains with the item schemas and bounds");
    return re_concat({re_byte('['), ws_, body, ws_, re_byte(']')});
  }
};

}  // namespace

Re json_string_regex() { return quoted(re_star(json_char())); }

Re json_value_regex(int depth) {
  SchemaOptions o;
  o.any_depth = depth;
  return schema_to_regex(json(true), o);
}

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

namespace {
// Walked with a stack of its own, before the compiler copies any part of it (a copy recurses per
// level): a value nested past kMaxJsonDepth (core/json_input.h) is refused first.
void check_json_depth(const nlohmann::ordered_json& schema) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {{&schema, 1}};
  while (!stack.empty()) {
    const auto [j, depth] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    if (depth > kMaxJsonDepth)
      throw SchemaError("", "", "the schema's JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    for (const auto& v : *j) stack.emplace_back(&v, depth + 1);
  }
}
}  // namespace

Re schema_to_regex(const nlohmann::ordered_json& schema, const SchemaOptions& options, SchemaNotes* notes) {
  check_json_depth(schema);
  Compiler c(schema, options);
  Re out = c.compile(schema, "");
  if (notes) c.report(notes);
  return out;
}

std::string describe(const SchemaNotes& n) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  if (!n.draft.empty() && n.draft != "2020-12") add("draft " + n.draft);
  auto list = [](const std::map<std::string, int>& m, const char* quote) {
    std::string l;
    int shown = 0;
    for (const auto& [k, c] : m) {
      if (++shown > 8) {
        l += ", +" + std::to_string(m.size() - 8) + " more";
        break;
      }
      l += (l.empty() ? "" : ", ") + std::string(quote) + k + quote + (c > 1 ? " ×" + std::to_string(c) : "");
    }
    return l;
  };
  if (!n.ignored.empty()) add("ignored: " + list(n.ignored, ""));
  if (!n.unasserted_formats.empty()) add("formats not asserted: " + list(n.unasserted_formats, "'"));
  if (!n.validator_decides.empty()) add("left to the validator (not in the mask): " + list(n.validator_decides, ""));
  return out;
}

}  // namespace ib::constrain
