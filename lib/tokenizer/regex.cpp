// The pre-tokenizer regexes: `tokenizers` compiles them with Oniguruma (its default syntax, UTF-8);
// we compile them with PCRE2 (UTF, UCP, ^ and $ at line ends like onig, JIT when available) after
// rewriting the escapes whose classes differ between the two.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

#include "tokenizer/tokenizer_internal.h"

namespace ib::tokenizer::detail {

namespace {

// Onig's \s (Unicode): 0009-000D, 0085 and the Z categories, i.e. White_Space. PCRE2's \s adds
// U+180E, so it is spelled out; \S inside a class is the complement as ranges.
constexpr const char* kSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* kNotSpace =
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}"
    "\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{D7FF}\\x{E000}-\\x{10FFFF}";
// Onig's \h is a hex digit (PCRE2's is horizontal space).
constexpr const char* kHex = "0-9a-fA-F";
constexpr const char* kNotHex = "\\x{0}-\\x{2F}\\x{3A}-\\x{40}\\x{47}-\\x{60}\\x{67}-\\x{D7FF}\\x{E000}-\\x{10FFFF}";

// The characters onig (Unicode 16, in the `tokenizers` wheels) has in a class that PCRE2 10.42
// (Unicode 14) lacks, measured class by class over every code point with tokenizers 0.23.3; a
// newer PCRE2 already has them, and the union changes nothing there.
constexpr const char* kL16 =
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}"
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}\\x{11380}-\\x{11389}\\x{1138B}"
    "\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}"
    "\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}"
    "\\x{16100}-\\x{1611D}\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kN16 =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";
constexpr const char* kNd16 =
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1E4F0}-\\x{1E4F9}"
    "\\x{1E5F1}-\\x{1E5FA}";
constexpr const char* kM16 =
    "\\x{897}\\x{CF3}\\x{ECE}\\x{10D69}-\\x{10D6D}\\x{10EFC}-\\x{10EFF}\\x{11241}\\x{113B8}-\\x{113C0}"
    "\\x{113C2}\\x{113C5}\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113D0}\\x{113D2}\\x{113E1}-\\x{113E2}"
    "\\x{11F00}-\\x{11F01}\\x{11F03}\\x{11F34}-\\x{11F3A}\\x{11F3E}-\\x{11F42}\\x{11F5A}\\x{13440}"
    "\\x{13447}-\\x{13455}\\x{1611E}-\\x{1612F}\\x{1E08F}\\x{1E4EC}-\\x{1E4EF}\\x{1E5EE}-\\x{1E5EF}";
constexpr const char* kP16 =
    "\\x{1B4E}-\\x{1B4F}\\x{1B7F}\\x{10D6E}\\x{113D4}-\\x{113D5}\\x{113D7}-\\x{113D8}"
    "\\x{11B00}-\\x{11B09}\\x{11BE1}\\x{11F43}-\\x{11F4F}\\x{16D6D}-\\x{16D6F}\\x{1E5FF}";
constexpr const char* kS16 =
    "\\x{2427}-\\x{2429}\\x{2FFC}-\\x{2FFF}\\x{31E4}-\\x{31E5}\\x{31EF}\\x{10D8E}-\\x{10D8F}"
    "\\x{1CC00}-\\x{1CCEF}\\x{1CD00}-\\x{1CEB3}\\x{1F6DC}\\x{1F774}-\\x{1F776}\\x{1F77B}-\\x{1F77F}"
    "\\x{1F7D9}\\x{1F8B2}-\\x{1F8BB}\\x{1F8C0}-\\x{1F8C1}\\x{1FA75}-\\x{1FA77}\\x{1FA87}-\\x{1FA89}"
    "\\x{1FA8F}\\x{1FAAD}-\\x{1FAAF}\\x{1FABB}-\\x{1FABF}\\x{1FAC6}\\x{1FACE}-\\x{1FACF}"
    "\\x{1FADA}-\\x{1FADC}\\x{1FADF}\\x{1FAE8}-\\x{1FAE9}\\x{1FAF7}-\\x{1FAF8}\\x{1FBCB}-\\x{1FBEF}";
constexpr const char* kWord16 =
    "\\x{897}\\x{CF3}\\x{ECE}\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}"
    "\\x{105C0}-\\x{105F3}\\x{10D40}-\\x{10D65}\\x{10D69}-\\x{10D6D}\\x{10D6F}-\\x{10D85}"
    "\\x{10EC2}-\\x{10EC4}\\x{10EFC}-\\x{10EFF}\\x{1123F}-\\x{11241}\\x{11380}-\\x{11389}\\x{1138B}"
    "\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}-\\x{113C0}\\x{113C2}\\x{113C5}\\x{113C7}-\\x{113CA}"
    "\\x{113CC}-\\x{113D3}\\x{113E1}-\\x{113E2}\\x{116D0}-\\x{116E3}\\x{11BC0}-\\x{11BE0}"
    "\\x{11BF0}-\\x{11BF9}\\x{11F00}-\\x{11F10}\\x{11F12}-\\x{11F3A}\\x{11F3E}-\\x{11F42}"
    "\\x{11F50}-\\x{11F5A}\\x{1342F}\\x{13440}-\\x{13455}\\x{13460}-\\x{143FA}\\x{16100}-\\x{16139}"
    "\\x{16D40}-\\x{16D6C}\\x{16D70}-\\x{16D79}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1CCF0}-\\x{1CCF9}"
    "\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}\\x{1E08F}\\x{1E4D0}-\\x{1E4F9}\\x{1E5D0}-\\x{1E5FA}"
    "\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kAlpha16 =
    "\\x{363}-\\x{36F}\\x{897}\\x{C04}\\x{CF3}\\x{F82}-\\x{F83}\\x{1C89}-\\x{1C8A}\\x{1DD3}-\\x{1DE6}"
    "\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}\\x{10D4A}-\\x{10D65}\\x{10D69}"
    "\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{10EFC}\\x{11080}-\\x{11081}\\x{1123F}-\\x{11241}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}-\\x{113C0}\\x{113C2}"
    "\\x{113C5}\\x{113C7}-\\x{113CA}\\x{113CC}-\\x{113CD}\\x{113D1}\\x{113D3}\\x{11BC0}-\\x{11BE0}"
    "\\x{11F00}-\\x{11F10}\\x{11F12}-\\x{11F3A}\\x{11F3E}-\\x{11F40}\\x{1342F}\\x{13441}-\\x{13446}"
    "\\x{13460}-\\x{143FA}\\x{16100}-\\x{1612E}\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}"
    "\\x{1DF25}-\\x{1DF2A}\\x{1E030}-\\x{1E06D}\\x{1E08F}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}"
    "\\x{1E5F0}\\x{2B739}\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";

// Onig's \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation (PCRE2's is L, N and '_');
// outside a class onig also counts the Latin-1 superscripts and fractions as word characters.
std::string word_body(bool in_class) {
  return std::string("\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}") + (in_class ? "" : "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}") + kWord16;
}

// \b and \B with onig's \w (PCRE2's own follow PCRE2's narrower \w).
std::string word_boundary(bool boundary) {
  const std::string w = "[" + word_body(false) + "]";
  if (boundary) return "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
  return "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
}

// \p{X} for the general categories whose onig set is larger than PCRE2's: the class body.
const char* property_extra(const std::string& name) {
  if (name == "L") return kL16;
  if (name == "N") return kN16;
  if (name == "Nd") return kNd16;
  if (name == "M") return kM16;
  if (name == "P") return kP16;
  if (name == "S") return kS16;
  return nullptr;
}

// Copies an escape that carries a braced argument (\x{..}, \p{..}, \P{..}) or one char.
size_t copy_escape(const std::string& p, size_t i, std::string* out) {
  // p[i] == '\\'
  if (i + 1 >= p.size()) {
    *out += '\\';
    return i + 1;
  }
  const char e = p[i + 1];
  if ((e == 'x' || e == 'p' || e == 'P' || e == 'o' || e == 'k' || e == 'g') && i + 2 < p.size() &&
      (p[i + 2] == '{' || p[i + 2] == '<')) {
    const char close = p[i + 2] == '{' ? '}' : '>';
    size_t j = p.find(close, i + 3);
    if (j == std::string::npos) j = p.size() - 1;
    out->append(p, i, j + 1 - i);
    return j + 1;
  }
  // A multi-byte character after the backslash travels whole.
  const size_t n = utf8_len(static_cast<unsigned char>(e));
  out->append(p, i, 1 + n);
  return i + 1 + n;
}

// The rewrite of the escape at p[i] ('\\'), or "" to copy it as it is; *len: its length.
std::string rewrite_escape(const std::string& p, size_t i, bool in_class, size_t* len) {
  const char e = p[i + 1];
  *len = 2;
  const std::string word = word_body(in_class);
  const std::string digit = std::string("\\p{Nd}") + kNd16;
  if (!in_class) {
    switch (e) {
      case 's':
        return std::string("[") + kSpace + "]";
      case 'S':
        return std::string("[^") + kSpace + "]";
      case 'w':
        return "[" + word + "]";
      case 'W':
        return "[^" + word + "]";
      case 'd':
        return "[" + digit + "]";
      case 'D':
        return "[^" + digit + "]";
      case 'h':
        return std::string("[") + kHex + "]";
      case 'H':
        return std::string("[^") + kHex + "]";
      case 'b':
        return word_boundary(true);
      case 'B':
        return word_boundary(false);
      default:
        break;
    }
  } else {
    switch (e) {
      case 's':
        return kSpace;
      case 'S':
        return kNotSpace;
      case 'w':
        return word;
      case 'd':
        return digit;
      case 'h':
        return kHex;
      case 'H':
        return kNotHex;
      default:
        break;  // \W, \D inside a class: PCRE2's own (no class subtraction to spell them)
    }
  }
  if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{') {
    const size_t close = p.find('}', i + 3);
    if (close == std::string::npos) return "";
    std::string name = p.substr(i + 3, close - i - 3);
    bool negated = e == 'P';
    if (!name.empty() && name[0] == '^') {
      negated = !negated;
      name.erase(0, 1);
    }
    const char* extra = property_extra(name);
    if (!extra || (negated && in_class)) return "";
    *len = close + 1 - i;
    const std::string body = "\\p{" + name + "}" + extra;
    if (in_class) return body;
    return (negated ? "[^" : "[") + body + "]";
  }
  return "";
}

}  // namespace

std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  size_t class_start = 0;  // index just past '[' or '[^', where ']' is still a literal
  for (size_t i = 0; i < p.size();) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 'Q') {  // \Q...\E: literal text, copied as is
        size_t j = p.find("\\E", i + 2);
        if (j == std::string::npos)
          j = p.size();
        else
          j += 2;
        out.append(p, i, j - i);
        i = j;
        continue;
      }
      size_t len = 0;
      const std::string rep = rewrite_escape(p, i, in_class, &len);
      if (!rep.empty()) {
        out += rep;
        i += len;
        continue;
      }
      i = copy_escape(p, i, &out);
      continue;
    }
    if (in_class) {
      if (c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
        size_t j = p.find(":]", i + 2);
        if (j != std::string::npos) {
          const std::string name = p.substr(i + 2, j - i - 2);
          if (name == "alpha")
            out += std::string("\\p{Alphabetic}") + kAlpha16;  // PCRE2: \p{L}
          else if (name == "punct")
            out += std::string("\\p{P}\\p{S}") + kP16 + kS16;  // PCRE2: P and ASCII S
          else
            out.append(p, i, j + 2 - i);
          i = j + 2;
          continue;
        }
      }
      if (c == ']' && i != class_start) in_class = false;
      out += c;
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      ++i;
      if (i < p.size() && p[i] == '^') out += p[i++];
      class_start = i;
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      // Inline options: onig's m is "dot matches newline", PCRE2's s.
      size_t j = i + 2;
      while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) out += p[k] == 'm' ? 's' : p[k];
        i = j;
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

namespace {

// Per-thread match state: the match data (only the whole match is read) and a JIT stack that may
// grow to 64 MiB for long runs of backtracking.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
    if (!data || !context) throw std::bad_alloc();
  }
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

Regex::Regex(const std::string& onig_pattern) : code_(nullptr) {
  const std::string pattern = onig_to_pcre2(onig_pattern);
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  if (!cc) throw std::bad_alloc();
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);  // onig: only \n ends a line
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::runtime_error(std::string("regex does not compile: ") + reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT pcre2_match interprets
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_iter(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  MatchState& st = match_state();
  const auto* code = static_cast<const pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t last_end = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (last_end <= text.size()) {
    // The text is valid UTF-8 (checked on the way in): skipping the check keeps this linear.
    const int rc = pcre2_match(code, subject, text.size(), last_end, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error(std::string("regex match failed: ") + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t s = ov[0], e = ov[1];
    if (s == e && have_last && last_match_end == e) {
      // An empty match right after the previous one: step one character and search again.
      last_end += last_end < text.size() ? utf8_len(static_cast<unsigned char>(text[last_end])) : 1;
      continue;
    }
    last_end = e;
    last_match_end = e;
    have_last = true;
    out->emplace_back(s, e);
  }
}

}  // namespace ib::tokenizer::detail
