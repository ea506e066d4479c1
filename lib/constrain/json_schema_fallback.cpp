// The validator fallback (SchemaOptions::validator_fallback): a schema object whose keyword is
// beyond what the mask holds exactly is compiled without it, a superset of its documents, and the
// finished document goes to the validator. Every widening here drops an assertion (or turns oneOf
// into anyOf, its union), so no valid document leaves the language; the validator restores the rest.
#include <regex>
#include <string>
#include <vector>

#include "constrain/json_schema_internal.h"

namespace ib::constrain::detail {

namespace {

// The validator checks patterns with std::regex (validator.h): a pattern it cannot read cannot be
// left to it.
bool validator_reads(const std::string& pattern) {
  try {
    std::regex(pattern, std::regex::ECMAScript);
    return true;
  } catch (const std::regex_error&) {
    return false;
  }
}

// The keyword of `s` the pointer `at` names below `ptr` ("" when `at` is `ptr` itself or elsewhere).
std::string keyword_below(const std::string& at, const std::string& ptr) {
  if (at.size() <= ptr.size() + 1 || at.compare(0, ptr.size(), ptr) != 0 || at[ptr.size()] != '/') return "";
  const size_t end = at.find('/', ptr.size() + 1);
  return at.substr(ptr.size() + 1, end == std::string::npos ? std::string::npos : end - ptr.size() - 1);
}

// The keywords that go with k: a conditional's parts, contains and its counts; else k alone.
std::vector<std::string> with_partners(const std::string& k) {
  if (k == "if" || k == "then" || k == "else") return {"if", "then", "else"};
  if (k == "contains" || k == "minContains" || k == "maxContains") return {"contains", "minContains", "maxContains"};
  return {k};
}

}  // namespace

std::optional<json> Compiler::widened(const json& s, const std::string& ptr, const SchemaError& e) const {
  if (!s.is_object()) return std::nullopt;
  json w = s;
  std::string k = keyword_below(e.pointer(), ptr);
  if (k.empty() || !s.contains(k)) k = e.keyword();
  const std::vector<std::string> group = with_partners(k);
  if (s.contains(k)) {
    if (k == "oneOf") {
      if (!w.contains("anyOf")) w["anyOf"] = w["oneOf"];  // exactly one branch ⊂ at least one
      w.erase("oneOf");
    } else if (k == "pattern") {
      if (!s["pattern"].is_string() || !validator_reads(s["pattern"].get<std::string>())) return std::nullopt;
      w.erase("pattern");
    } else if (k == "patternProperties" || k == "additionalProperties") {
      // Keys a pattern matches become extra keys of any value (also where additionalProperties was
      // false: that is wider still).
      if (s.contains("patternProperties")) {
        if (!s["patternProperties"].is_object()) return std::nullopt;
        for (const auto& [pattern, sub] : s["patternProperties"].items())
          if (!validator_reads(pattern)) return std::nullopt;
      }
      w.erase("patternProperties");
      w["additionalProperties"] = true;
    } else if (group.size() > 1 || k == "not" || k == "uniqueItems" || k == "propertyNames" || k == "multipleOf" ||
               k == "maxProperties" || k == "minProperties" || k == "dependentRequired" || k == "dependentSchemas" ||
               k == "format" || k == "minLength" || k == "maxLength") {
      for (const auto& x : group) w.erase(x);
    } else {
      return std::nullopt;
    }
  } else if (s.contains("allOf") && s["allOf"].is_array()) {
    // Members that allOf could not merge on keyword k: the first member's k stays, the others' go;
    // a conditional or a contains split across members goes from all of them.
    bool first = true;
    for (auto& m : w["allOf"]) {
      if (!m.is_object()) continue;
      if (group.size() > 1) {
        for (const auto& x : group) m.erase(x);
      } else if (m.contains(k)) {
        if (first)
          first = false;
        else
          m.erase(k);
      }
    }
    if (k == "additionalProperties")  // the merge of extra keys: any
      for (auto& m : w["allOf"])
        if (m.is_object() && m.contains(k)) m[k] = true;
  } else {
    return std::nullopt;
  }
  if (w == s) return std::nullopt;  // nothing left to widen here
  return w;
}

}  // namespace ib::constrain::detail
