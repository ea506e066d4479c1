#include "constrain/schema_formats.h"

#include <limits>
#include <map>

namespace ib::constrain {

namespace {

// Years 0001-9999 (Python's date has no year 0).
const std::string kYear = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])";
// Leap years: a multiple of 4 that is not a century, or a multiple of 400 (0400, 0800, ...).
const std::string kMul4 = "(?:0[48]|[2468][048]|[13579][26])";
const std::string kLeapYear = "(?:[0-9]{2}" + kMul4 + "|" + kMul4 + "00)";

std::string date() {
  return "(?:" + kYear + "-(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|" + kYear + "-(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|" +
         kYear + "-02-(?:0[1-9]|1[0-9]|2[0-8])|" + kLeapYear + "-02-29)";
}

std::string time() {
  const std::string hour = "(?:[01][0-9]|2[0-3])", minute = "[0-5][0-9]";
  return hour + ":" + minute + ":" + minute + "(?:\\.[0-9]+)?(?:[Zz]|[+-]" + hour + ":" + minute + ")";
}

std::string ipv6() {
  const std::string h = "[0-9A-Fa-f]{1,4}";
  // Eight groups, or "::" standing for at least one group with at most six written around it.
  std::string alts = "(?:" + h + ":){7}" + h;
  for (int before = 0; before <= 6; ++before) {
    const int after_max = 6 - before;
    std::string head = before == 0 ? "" : "(?:" + h + ":){" + std::to_string(before - 1) + "}" + h;
    std::string tail = after_max == 0 ? "" : "(?:" + h + "(?::" + h + "){0," + std::to_string(after_max - 1) + "})?";
    alts += "|" + head + "::" + tail;
  }
  return "(?:" + alts + ")";
}

// RFC 3986 pieces (sub-delims !$&'()*+,;= and unreserved A-Za-z0-9-._~).
const std::string kPct = "%[0-9A-Fa-f]{2}";
const std::string kPchar = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|" + kPct + ")";
const std::string kAuthority =
    "(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|" + kPct + ")*@)?(?:[A-Za-z0-9._~!$&'()*+,;=-]|" + kPct + ")*(?::[0-9]*)?";
const std::string kPathAbempty = "(?:/" + kPchar + "*)*";
const std::string kPathAbsolute = "/(?:" + kPchar + "+(?:/" + kPchar + "*)*)?";
const std::string kPathRootless = kPchar + "+(?:/" + kPchar + "*)*";
const std::string kQueryFragment = "(?:\\?(?:" + kPchar + "|[/?])*)?(?:#(?:" + kPchar + "|[/?])*)?";

std::string uri() {
  return "[A-Za-z][A-Za-z0-9+.-]*:(?://" + kAuthority + kPathAbempty + "|" + kPathAbsolute + "|" + kPathRootless + ")?" +
         kQueryFragment;
}

std::string relative_ref() {
  const std::string nc = "(?:[A-Za-z0-9._~!$&'()*+,;=@-]|" + kPct + ")+";  // a first segment without ':'
  return "(?://" + kAuthority + kPathAbempty + "|" + kPathAbsolute + "|" + nc + "(?:/" + kPchar + "*)*)?" + kQueryFragment;
}

std::string hostname(bool idn) {
  const std::string label = idn ? "[a-z0-9]{1,63}" : "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  const std::string last = idn ? "[a-z]{2,61}" : "[A-Za-z]{2,61}";
  // Up to three labels of 63 and the last of 61, with dots: 253 characters at most.
  return "(?:" + label + "\\.){0,3}" + last;
}

// local@domain: a local part of at most 64 characters with at most one dot (RFC 5321's limit),
// the domain a hostname of two to four labels.
std::string email() {
  const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
  const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
  return atext + "{1,32}(?:\\." + atext + "{1,31})?@(?:" + label + "\\.){1,3}[A-Za-z]{2,61}";
}

std::string duration() {
  const std::string n = "[0-9]{1,9}";
  // RFC 3339 appendix A: the units written are contiguous (P1Y2D and PT1H2S are not durations).
  const std::string t = "T(?:" + n + "H(?:" + n + "M(?:" + n + "S)?)?|" + n + "M(?:" + n + "S)?|" + n + "S)";
  return "P(?:" + n + "W|(?:" + n + "Y(?:" + n + "M(?:" + n + "D)?)?|" + n + "M(?:" + n + "D)?|" + n + "D)(?:" + t + ")?|" + t +
         ")";
}

std::string uri_template() {
  const std::string literal = "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?#\\[\\]-]|" + kPct + ")";
  // Prefix lengths below 1000 (RFC 6570 allows 9999; the uri-template package refuses 4 digits).
  const std::string varspec = "[A-Za-z0-9_]+(?::[1-9][0-9]{0,2}|\\*)?";
  return "(?:" + literal + "|\\{[+#./;?&]?" + varspec + "(?:," + varspec + ")*\\})*";
}

// Regular expressions valid for Python's re (what the jsonschema package's checker compiles) and
// for ECMA 262 alike, over decoded characters (a backslash is a character here; the compiler
// spells it as JSON writes it). A regular subset: groups nest at most three deep, a class range
// is one of two ordered digits or letters of one case (a-[a-z] written out per first letter), a
// counted quantifier is {n}, {n,} or {0|1,m}; ^, $, \b and \B are never quantified. '{' is no
// literal (ECMA 262 refuses it where Python reads a literal).
std::string regex_syntax() {
  std::string range = "(?:";
  for (const std::string letters : {"0123456789", "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"})
    for (char c : letters) {
      if (range.size() > 3) range += "|";
      range += std::string(1, c) + "-[" + c + "-" + letters.back() + "]";
    }
  range += ")";
  const std::string hex_escape = "x[0-9A-Fa-f]{2}|u[0-9A-Fa-f]{4}";
  const std::string literal = "[^\\\\^$.|?*+()\\[{\\x00-\\x1F\\x7F]";
  const std::string escape = "\\\\(?:[\\\\^$.|?*+()\\[\\]{}/dDwWsSntrfv-]|" + hex_escape + ")";
  const std::string class_atom = "(?:[^\\\\\\]\\[^\\x00-\\x1F\\x7F-]|\\\\(?:[\\\\\\]\\[^dDwWsSntrfv./-]|" + hex_escape + "))";
  const std::string class_item = "(?:" + range + "|" + class_atom + ")";
  const std::string char_class = "\\[\\^?-?" + class_item + "(?:" + class_item + "|\\^)*-?\\]";
  const std::string quantifier = "(?:[*+?]|\\{[0-9]{1,3}\\}|\\{[0-9]{1,3},\\}|\\{[01],[1-9][0-9]{0,2}\\})\\??";
  std::string alternation;
  for (int depth = 0; depth <= 3; ++depth) {
    const std::string group = depth == 0 ? "" : "|\\((?:\\?[:=!])?" + alternation + "\\)";
    const std::string atom = "(?:" + literal + "|" + escape + "|\\." + "|" + char_class + group + ")";
    const std::string piece = "(?:" + atom + "(?:" + quantifier + ")?|\\\\[bB]|\\^|\\$)";
    alternation = "(?:" + piece + "|\\|)*";  // pieces and '|' in any order: alternatives of sequences
  }
  return alternation;
}

}  // namespace

std::optional<std::string> format_pattern(const std::string& f) {
  static const std::map<std::string, std::string> table = [] {
    std::map<std::string, std::string> m;
    m["date"] = date();
    m["time"] = time();
    m["date-time"] = date() + "[Tt]" + time();
    m["uuid"] = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";
    m["email"] = m["idn-email"] = email();
    m["hostname"] = hostname(false);
    m["idn-hostname"] = hostname(true);
    const std::string octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    m["ipv4"] = "(?:" + octet + "\\.){3}" + octet;
    m["ipv6"] = ipv6();
    m["uri"] = m["iri"] = uri();
    m["uri-reference"] = m["iri-reference"] = "(?:" + uri() + "|" + relative_ref() + ")";
    m["uri-template"] = uri_template();
    m["json-pointer"] = "(?:/(?:[^/~]|~[01])*)*";
    // The leading number with a 0 only last (the jsonschema package refuses any digit after a 0).
    m["relative-json-pointer"] = "(?:0|[1-9]+0?)(?:#|(?:/(?:[^/~]|~[01])*)*)";
    m["duration"] = duration();
    m["regex"] = regex_syntax();
    m["byte"] = "(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?";
    return m;
  }();
  auto it = table.find(f);
  if (it == table.end()) return std::nullopt;
  return "^" + it->second + "$";
}

std::optional<std::pair<int64_t, int64_t>> integer_format_range(const std::string& f) {
  static const std::map<std::string, std::pair<int64_t, int64_t>> ranges = {
      {"int8", {-128, 127}},
      {"int16", {-32768, 32767}},
      {"int32", {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}},
      {"int64", {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}},
      {"uint8", {0, 255}},
      {"uint16", {0, 65535}},
      {"uint32", {0, std::numeric_limits<uint32_t>::max()}},
      {"uint64", {0, std::numeric_limits<int64_t>::max()}}};
  auto it = ranges.find(f);
  if (it == ranges.end()) return std::nullopt;
  return it->second;
}

bool format_spelled(const std::string& format) { return format == "regex"; }

bool format_without_constraint(const std::string& f) { return f == "float" || f == "double" || f == "binary"; }

}  // namespace ib::constrain
