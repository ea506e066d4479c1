// Strings: JSON string syntax (escapes, the raw characters), and pattern, format and minLength/maxLength,
// each a language of raw characters, intersected.
#include "constrain/json_schema_internal.h"

#include "constrain/schema_formats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>

namespace ib::constrain {

namespace detail {

namespace {

Re hex_digit() { return re_bytes(range_set('0', '9') | range_set('a', 'f') | range_set('A', 'F')); }

// A JSON escape sequence: \" \\ \/ \b \f \n \r \t or \uXXXX (no lone surrogate).
Re json_escape() {
  ByteSet simple;
  for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<unsigned char>(c));
  // \uXXXX outside the surrogate block D800-DFFF (a lone surrogate is not a character).
  Re not_d =
      re_bytes(range_set('0', '9') | range_set('a', 'c') | range_set('A', 'C') | range_set('e', 'f') | range_set('E', 'F'));
  Re d = re_bytes(range_set('d', 'd') | range_set('D', 'D'));
  Re u4 = re_alt({re_concat({not_d, re_repeat(hex_digit(), 3, 3)}),
                  re_concat({d, re_bytes(range_set('0', '7')), re_repeat(hex_digit(), 2, 2)})});
  return re_concat({re_byte('\\'), re_alt({re_bytes(simple), re_concat({re_byte('u'), u4})})});
}

Re json_char() {
  static const Re r = re_alt({raw_string_char(), json_escape()});
  return r;
}

// How JSON writers (nlohmann's dump, Python's json.dumps) spell a character JSON must escape.
std::string mandatory_escape(uint8_t b) {
  switch (b) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default: {
      static const char* hex = "0123456789abcdef";
      return std::string("\\u00") + hex[b >> 4] + hex[b & 15];
    }
  }
}

// The JSON spelling of a language of decoded strings (a parsed pattern): each character JSON must
// escape written as its mandatory escape, every other character raw (a homomorphism on the
// characters: in UTF-8 an ASCII byte is a whole character, so the byte sets holding them are
// rewritten in place).
Re json_spelling(const Re& decoded, std::map<const RegexNode*, Re>& memo) {
  if (auto it = memo.find(decoded.get()); it != memo.end()) return it->second;
  const RegexNode& n = *decoded;
  Re out = decoded;
  switch (n.kind) {
    case RegexNode::Kind::Empty:
    case RegexNode::Kind::Never:
      break;
    case RegexNode::Kind::Automaton:
      throw std::logic_error("json_spelling: a parsed pattern holds no automaton");
    case RegexNode::Kind::Bytes: {
      ByteSet raw = n.bytes;
      std::vector<Re> alts;
      for (int b = 0; b < 0x80; ++b)
        if (n.bytes.test(static_cast<size_t>(b)) && must_escape(b)) {
          raw.reset(static_cast<size_t>(b));
          alts.push_back(re_literal(mandatory_escape(static_cast<uint8_t>(b))));
        }
      if (!alts.empty()) {
        if (raw.any()) alts.push_back(re_bytes(raw));
        out = re_alt(std::move(alts));
      }
      break;
    }
    case RegexNode::Kind::Concat:
    case RegexNode::Kind::Alt:
    case RegexNode::Kind::Repeat: {
      std::vector<Re> kids;
      bool same = true;
      for (const auto& k : n.kids) {
        kids.push_back(json_spelling(k, memo));
        same = same && kids.back() == k;
      }
      if (same) break;
      if (n.kind == RegexNode::Kind::Concat) out = re_concat(std::move(kids));
      if (n.kind == RegexNode::Kind::Alt) out = re_alt(std::move(kids));
      if (n.kind == RegexNode::Kind::Repeat) out = re_repeat(kids[0], n.min, n.max);
      break;
    }
  }
  return memo[decoded.get()] = out;
}

// One character as JSON writers spell it: raw, or its mandatory escape.
Re spelt_char() {
  static const Re r = [] {
    std::vector<Re> alts = {raw_string_char()};
    for (int b = 0; b < 0x80; ++b)
      if (must_escape(b)) alts.push_back(re_literal(mandatory_escape(static_cast<uint8_t>(b))));
    return re_alt(std::move(alts));
  }();
  return r;
}

}  // namespace

bool must_escape(int b) { return b < 0x20 || b == '"' || b == '\\'; }

// Characters a JSON string holds unescaped.
const std::vector<CodePointRange>& raw_string_chars() {
  static const std::vector<CodePointRange> r = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
  return r;
}

// One character a JSON string holds unescaped. The AST is immutable, so one node serves every
// string: the NFA construction then compiles a repeated character once per schema.
Re raw_string_char() {
  static const Re r = re_code_points(raw_string_chars());
  return r;
}

// String contents with at least one escape: where the compiler writes raw characters only (pattern,
// format, enum strings, keys), another spelling of the same string that an over-approximation
// must hold.
Re escaped_content() { return re_concat({re_star(json_char()), json_escape(), re_star(json_char())}); }

// Contents with at least one quote or backslash, as JSON writers write them (\" and \\): keys a
// language of raw characters leaves out. (Control characters, which no real key holds, are left
// out: their escapes would add hex-digit classes to every object's automaton.)
Re spelt_content_with_quote() {
  static const Re r = [] {
    const Re escape = re_alt({re_literal("\\\""), re_literal("\\\\")});
    const Re ch = re_alt({raw_string_char(), escape});
    return re_concat({re_star(raw_string_char()), escape, re_star(ch)});
  }();
  return r;
}

Re quoted(Re inner) { return re_concat({re_byte('"'), std::move(inner), re_byte('"')}); }

// A format's language of characters (schema_formats.h: raw characters, or spelled as JSON writes
// them where format_spelled); nullptr where it asserts nothing on strings (a format this table
// does not know is reported, see SchemaNotes).
Re Compiler::format(const json& s, const std::string& ptr) {
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
  if (it == cache.end()) {
    Re lang;
    if (format_spelled(f)) {  // any characters, each as JSON writers spell it (a regex's backslashes)
      std::map<const RegexNode*, Re> memo;
      lang = json_spelling(parse_regex(*pattern).re, memo);
    } else {
      lang = parse_regex(*pattern, &raw_string_chars()).re;
    }
    // Compiled once here and embedded as its automaton: a schema's compile then steps through
    // its states instead of determinizing the pattern again (the regex syntax: 0.07 s for 684
    // states).
    it = cache.emplace(f, re_automaton(std::make_shared<const Dfa>(compile_dfa(lang)))).first;
  }
  return it->second;
}

int Compiler::length_bound(const json& s, const char* k, const std::string& ptr) {
  if (!s.contains(k)) return -1;
  const json& x = s[k];
  const bool integral = x.is_number_integer() || (x.is_number_float() && std::floor(x.get<double>()) == x.get<double>());
  if (!integral || x.get<double>() < 0) fail(k, ptr + "/" + k, std::string(k) + " must be a non-negative integer");
  // Compared as a double before any cast: 1e300 cast to int64_t is undefined (it came out negative,
  // read as "absent", and documents shorter than the bound were accepted).
  if (x.get<double>() > 100000) beyond(k, ptr + "/" + k, std::string(k) + " above 100000 is not supported");
  return static_cast<int>(x.get<double>());
}

Re Compiler::string(const json& s, const std::string& ptr) {
  const int mn = length_bound(s, "minLength", ptr), mx = length_bound(s, "maxLength", ptr);
  const bool lengths = mn >= 0 || mx >= 0;
  if (mn >= 0 && mx >= 0 && mn > mx) fail("minLength", ptr, "minLength is above maxLength");
  const Re format_lang = format(s, ptr);
  if (!format_lang && !s.contains("pattern")) return quoted(re_repeat(json_char(), std::max(mn, 0), mx));
  // Each keyword is a language of characters, each character spelled one way: as JSON writers
  // write it (raw, or its mandatory escape) unless a format of raw characters is among them, where
  // the content is written without escapes (documented). One spelling per character makes the
  // intersection of the spelled languages the spelling of the intersection; lengths count the
  // characters (code points).
  const bool spelt = !format_lang || format_spelled(s["format"].get<std::string>());
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
      p = parse_regex(s["pattern"].get<std::string>(), spelt ? nullptr : &raw_string_chars());
    } catch (const RegexError& e) {
      beyond("pattern", ptr + "/pattern", e.what());
    }
    if (spelt) {
      std::map<const RegexNode*, Re> memo;
      p.re = json_spelling(p.re, memo);
    }
    // JSON Schema patterns are not anchored: an unanchored side admits any characters.
    Re any = re_star(spelt ? spelt_char() : raw_string_char());
    parts.push_back(re_concat({p.anchored_start ? re_empty() : any, p.re, p.anchored_end ? re_empty() : any}));
    what = what.empty() ? "pattern" : "pattern with " + what;
  }
  if (lengths) {
    parts.push_back(re_repeat(spelt ? spelt_char() : raw_string_char(), std::max(mn, 0), mx));
    what += " with minLength/maxLength";
  }
  const std::string keyword = s.contains("pattern") ? "pattern" : "format";
  Re content = parts.size() == 1 ? parts[0] : product(parts, ProductRule::Intersection, keyword, ptr, what);
  if (content->kind == RegexNode::Kind::Never) fail(keyword, ptr, "no string satisfies " + what);
  // Other spellings: the same characters with escapes.
  return quoted(over_ ? over_also(content, escaped_content()) : content);
}

}  // namespace detail

using detail::json_char;
using detail::quoted;

Re json_string_regex() { return quoted(re_star(json_char())); }

}  // namespace ib::constrain
