#include "constrain/json_schema.h"

#include "constrain/automaton.h"

#include <cctype>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

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

Re json_char() { return re_alt({re_code_points(raw_string_chars()), json_escape()}); }

// String contents with at least one escape: where the compiler writes raw characters only (pattern,
// format, enum strings, keys), another spelling of the same string that an over-approximation
// must hold.
Re escaped_content() { return re_concat({re_star(json_char()), json_escape(), re_star(json_char())}); }

// Any bytes: inside an over-approximation, where no regular language says exactly what is valid.
Re any_bytes() {
  ByteSet all;
  all.set();
  return re_star(re_bytes(all));
}

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
Re unnamed_key(const std::vector<std::string>& named) {
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
  const Re any = re_star(re_code_points(raw_string_chars()));
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

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

const std::set<std::string>& annotations() {
  static const std::set<std::string> a = {"title", "description", "default", "examples", "$schema", "$id",
                                          "$comment", "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};
  return a;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> s = {
      "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems", "maxItems",
      "uniqueItems", "enum", "const", "anyOf", "oneOf", "allOf", "minLength", "maxLength", "pattern", "format",
      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$ref", "nullable", "not", "if", "then", "else"};
  return s;
}

class Compiler {
 public:
  Compiler(const json& root, const SchemaOptions& o) : root_(root), o_(o), ws_(ws_of(o)) {}

  Re compile(const json& s, const std::string& ptr) {
    if (s.is_boolean()) return s.get<bool>() ? json_value_regex_ws(o_.any_depth) : re_never();
    if (!s.is_object()) fail("", ptr, "a schema is an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (annotations().count(k) || supported().count(k)) continue;
      fail(k, ptr + "/" + escape_pointer(k), "unsupported keyword '" + k + "'");
    }
    std::vector<std::string> validation;
    for (const auto& [k, v] : s.items())
      if (!annotations().count(k)) validation.push_back(k);

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
        if (k != comb && !annotations().count(k)) siblings[k] = v;
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
  std::map<std::string, int> ref_depth_;
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
    for (const char* k : {"properties", "required", "additionalProperties"})
      if (s.contains(k)) return {"object"};
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return {"array"};
    for (const char* k : {"minLength", "maxLength", "pattern", "format"})
      if (s.contains(k)) return {"string"};
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
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
    json merged = json::object();
    int expansions = 0;
    // additionalProperties only sees the properties of its own schema object, items only the
    // prefixItems of its own: merging such pairs from different conjuncts would change meaning.
    std::map<std::string, int> source;  // keyword -> the part it came from (-1: several)
    int part_no = 0;
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
      std::vector<json> next;
      if (part.contains("allOf")) {
        for (const auto& x : part["allOf"]) next.push_back(x);
        part.erase("allOf");
      }
      if (part.contains("$ref")) {
        if (++expansions > 32) fail("$ref", ptr, "too many references inside allOf");
        next.push_back(resolve(part["$ref"], ptr + "/$ref"));
        part.erase("$ref");
      }
      parts.insert(parts.begin(), next.begin(), next.end());
      for (const auto& [k, v] : part.items()) {
        if (annotations().count(k)) continue;
        if (!supported().count(k)) fail(k, ptr + "/" + escape_pointer(k), "unsupported keyword '" + k + "'");
        merge_keyword(merged, k, v, ptr);
        auto [it, fresh] = source.emplace(k, part_no);
        if (!fresh && it->second != part_no) it->second = -1;
      }
      ++part_no;
    }
    for (const auto& [dependent, on] : {std::make_pair("additionalProperties", "properties"), std::make_pair("items", "prefixItems"),
                                        std::make_pair("then", "if"), std::make_pair("else", "if")}) {
      auto d = source.find(dependent), o = source.find(on);
      if (d != source.end() && o != source.end() && (d->second < 0 || o->second < 0 || d->second != o->second))
        fail(dependent, ptr, std::string("allOf that combines '") + dependent + "' and '" + on +
                                 "' from different schemas cannot be merged");
    }
    return compile(merged, ptr);
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
    } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
      if (v.get<double>() > cur.get<double>()) cur = v;
    } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
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
    } else if (k == "const") {
      fail("const", ptr, "the consts of allOf differ: no document satisfies both");
    } else {
      fail(k, ptr + "/" + escape_pointer(k), "allOf with two different '" + k + "' cannot be merged");
    }
  }

  // The schema a local reference points at ("#", "#/$defs/x", percent-encoded or not).
  json resolve(const json& r, const std::string& ptr) {
    if (!r.is_string()) fail("$ref", ptr, "$ref must be a string");
    const std::string target = r.get<std::string>();
    if (target.empty() || target[0] != '#') fail("$ref", ptr, "only local references (#/...) are supported, not '" + target + "'");
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
      if (p[0] != '/') fail("$ref", ptr, "unsupported reference '" + target + "' (anchors are not supported)");
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
    int& depth = ref_depth_[key];
    if (depth > o_.max_recursion) {  // a deeper level of a recursive schema: dropped
      if (over_) return over_also(re_never(), json_value_regex_ws(0));
      return re_never();
    }
    ++depth;
    Re out = compile(target, key.size() > 1 ? key.substr(1) : "");
    --depth;
    return out;
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
    if (lo != kNoLower && hi != kNoUpper && lo > hi) fail("minimum", ptr, "no integer satisfies the bounds");
    Re exact = integer_range_regex(lo, hi);
    return over_ ? over_also(exact, non_canonical_number(true)) : exact;
  }

  // Bounded numbers: integer-valued bounds, no exponent (documented); see signed_number_range.
  Re number(const json& s, const std::string& ptr) {
    auto mn = num(s, "minimum", ptr), xmn = num(s, "exclusiveMinimum", ptr), mx = num(s, "maximum", ptr),
         xmx = num(s, "exclusiveMaximum", ptr);
    if (!mn && !xmn && !mx && !xmx) return number_regex(true);
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
    Re r = signed_number_range(lo, hi);
    if (r->kind == RegexNode::Kind::Never) fail("minimum", ptr, "no number satisfies the bounds");
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

  Re format(const std::string& f, const std::string& ptr) {
    auto lit = [](const char* s) { return re_literal(s); };
    auto dig = [](int n) { return re_repeat(digit(), n, n); };
    Re date = re_concat({dig(4), lit("-"),
                         re_alt({re_concat({lit("0"), re_bytes(range_set('1', '9'))}), re_concat({lit("1"), re_bytes(range_set('0', '2'))})}),
                         lit("-"),
                         re_alt({re_concat({lit("0"), re_bytes(range_set('1', '9'))}),
                                 re_concat({re_bytes(range_set('1', '2')), digit()}),
                                 re_concat({lit("3"), re_bytes(range_set('0', '1'))})})});
    Re hour = re_alt({re_concat({re_bytes(range_set('0', '1')), digit()}), re_concat({lit("2"), re_bytes(range_set('0', '3'))})});
    Re minute = re_concat({re_bytes(range_set('0', '5')), digit()});
    Re second = re_alt({minute, lit("60")});
    ByteSet pm, tz, t;
    pm.set('+');
    pm.set('-');
    tz.set('Z');
    tz.set('z');
    t.set('T');
    t.set('t');
    Re offset = re_alt({re_bytes(tz), re_concat({re_bytes(pm), hour, lit(":"), minute})});
    Re time = re_concat({hour, lit(":"), minute, lit(":"), second, re_optional(re_concat({lit("."), re_plus(digit())})), offset});
    if (f == "date") return date;
    if (f == "time") return time;
    if (f == "date-time") return re_concat({date, re_bytes(t), time});
    if (f == "uuid") {
      auto hex = [](int n) { return re_repeat(hex_digit(), n, n); };
      return re_concat({hex(8), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(4), lit("-"), hex(12)});
    }
    if (f == "email") {
      ByteSet atext = range_set('a', 'z') | range_set('A', 'Z') | range_set('0', '9');
      for (char c : std::string("!#$%&'*+/=?^_`{|}~-")) atext.set(static_cast<unsigned char>(c));
      Re word = re_plus(re_bytes(atext));
      Re local = re_concat({word, re_star(re_concat({lit("."), word}))});
      ByteSet alnum = range_set('a', 'z') | range_set('A', 'Z') | range_set('0', '9');
      Re label = re_concat({re_bytes(alnum), re_optional(re_concat({re_star(re_bytes(alnum | range_set('-', '-'))), re_bytes(alnum)}))});
      return re_concat({local, lit("@"), label, re_plus(re_concat({lit("."), label}))});
    }
    fail("format", ptr + "/format", "unsupported format '" + f + "' (supported: date, time, date-time, uuid, email)");
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
    if (!s.contains("format") && !s.contains("pattern")) return quoted(re_repeat(json_char(), std::max(mn, 0), mx));
    // Under a pattern or a format the content is written without escapes (documented), so the
    // decoded string is the written one: each keyword is a language of raw characters, lengths
    // count them (code points), and together they are the intersection.
    std::vector<Re> parts;
    std::string what;
    if (s.contains("format")) {
      if (!s["format"].is_string()) fail("format", ptr + "/format", "format must be a string");
      parts.push_back(format(s["format"].get<std::string>(), ptr));
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
      Re any = re_star(re_code_points(raw_string_chars()));
      parts.push_back(re_concat({p.anchored_start ? re_empty() : any, p.re, p.anchored_end ? re_empty() : any}));
      what = what.empty() ? "pattern" : "pattern with " + what;
    }
    if (lengths) {
      parts.push_back(re_repeat(re_code_points(raw_string_chars()), std::max(mn, 0), mx));
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

  Re object(const json& s, const std::string& ptr) {
    std::vector<std::pair<std::string, Re>> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("required", ptr + "/required", "required must be an array of names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) fail("required", ptr + "/required", "required must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    std::set<std::string> named;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail("properties", ptr + "/properties", "properties must be an object");
      for (const auto& [k, v] : s["properties"].items()) {
        props.emplace_back(k, compile(v, ptr + "/properties/" + escape_pointer(k)));
        named.insert(k);
      }
    }
    Re extra = re_never();  // the value schema of additional properties, if any
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) extra = compile(a, ptr + "/additionalProperties");
    }
    for (const auto& r : required)
      if (!named.count(r)) {
        // Required but not listed: its value follows additionalProperties (any value when absent).
        Re value = s.contains("additionalProperties") ? extra : json_value_regex_ws(o_.any_depth);
        if (value->kind == RegexNode::Kind::Never)
          fail("required", ptr + "/required", "required property '" + r + "' is not in properties and additionalProperties is false");
        props.emplace_back(r, value);
      }

    if (over_) return object_over(props, required, s.contains("additionalProperties") ? extra : json_value_regex_ws(o_.any_depth), ptr);

    // Members in schema order; optional ones may be left out, commas only between members.
    // tail(i, first) = the members from i on, `first` when nothing was emitted yet.
    const Re comma = re_concat({ws_, re_byte(','), ws_});
    std::map<std::pair<size_t, bool>, Re> memo;
    std::vector<std::string> names;
    for (const auto& p : props) names.push_back(p.first);
    const Re extra_member = extra->kind == RegexNode::Kind::Never
                                ? re_never()
                                : re_concat({quoted(unnamed_key(names)), ws_, re_byte(':'), ws_, extra});
    Re extras = extra->kind == RegexNode::Kind::Never ? re_never()
                                                      : re_concat({extra_member, re_star(re_concat({comma, extra_member}))});
    std::function<Re(size_t, bool)> tail = [&](size_t i, bool first) -> Re {
      auto key = std::make_pair(i, first);
      if (auto it = memo.find(key); it != memo.end()) return it->second;
      Re r;
      if (i == props.size()) {
        r = extras->kind == RegexNode::Kind::Never ? re_empty()
                                                   : re_optional(first ? extras : re_concat({comma, extras}));
      } else {
        Re here = re_concat({first ? re_empty() : comma, member(props[i].first, props[i].second), tail(i + 1, false)});
        r = required.count(props[i].first) ? here : re_alt({here, tail(i + 1, first)});
      }
      memo[key] = r;
      return r;
    };
    return re_concat({re_byte('{'), ws_, tail(0, true), ws_, re_byte('}')});
  }

  // An object as an over-approximation: members in any order (repeats too), a named key's value its
  // property's, an unnamed raw key's value additionalProperties' (any value when absent), a key
  // with escapes any value; each required key's quoted name (or some escape) appears somewhere.
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
      members.push_back(re_concat({quoted(unnamed_key(names)), ws_, re_byte(':'), ws_, extra}));
    members.push_back(re_concat({quoted(escaped_content()), ws_, re_byte(':'), ws_, json_value_regex_ws(o_.any_depth)}));
    const Re m = re_alt(std::move(members));
    Re body = re_concat({re_byte('{'), ws_, re_optional(re_concat({m, re_star(re_concat({ws_, re_byte(','), ws_, m}))})), ws_, re_byte('}')});
    if (required.empty()) return body;
    std::vector<Re> langs = {body};
    for (const auto& r : required)
      langs.push_back(re_concat({any_bytes(), re_alt({re_literal(json(r).dump()), re_byte('\\')}), any_bytes()}));
    return product(langs, ProductRule::Intersection, "oneOf", ptr + "/required", "oneOf: a branch's required keys in any order");
  }

  Re array(const json& s, const std::string& ptr) {
    if (s.contains("uniqueItems") && s["uniqueItems"] == true)
      fail("uniqueItems", ptr + "/uniqueItems", "uniqueItems: true is not a regular constraint");
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
    const Re comma = re_concat({ws_, re_byte(','), ws_});
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
    if (!items_allowed && mn > k) fail("minItems", ptr, "minItems needs more items than prefixItems allows");
    return re_concat({re_byte('['), ws_, elements(0), ws_, re_byte(']')});
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

Re schema_to_regex(const nlohmann::ordered_json& schema, const SchemaOptions& options) {
  return Compiler(schema, options).compile(schema, "");
}

}  // namespace ib::constrain
