#include "constrain/schema_dialect.h"

#include <set>
#include <stdexcept>

namespace ib::constrain {

namespace {

using json = nlohmann::ordered_json;

int rank(Draft d) { return static_cast<int>(d); }

// Keywords that constrain a document, and the first draft that has each (-1: every draft we read;
// the last: the first draft without it, past the end when none).
struct KeywordSpan {
  Draft from;
  int until;  // rank of the first draft without the keyword; 99: still there in 2020-12
};

const std::map<std::string, KeywordSpan>& validation_keywords() {
  static const std::map<std::string, KeywordSpan> k = [] {
    std::map<std::string, KeywordSpan> m;
    for (const char* w : {"type",
                          "enum",
                          "allOf",
                          "anyOf",
                          "oneOf",
                          "not",
                          "multipleOf",
                          "maximum",
                          "exclusiveMaximum",
                          "minimum",
                          "exclusiveMinimum",
                          "maxLength",
                          "minLength",
                          "pattern",
                          "items",
                          "maxItems",
                          "minItems",
                          "uniqueItems",
                          "maxProperties",
                          "minProperties",
                          "required",
                          "additionalProperties",
                          "properties",
                          "patternProperties",
                          "format",
                          "$ref",
                          "nullable"})
      m[w] = {Draft::Draft4, 99};
    m["additionalItems"] = {Draft::Draft4, rank(Draft::Draft2020_12)};
    m["dependencies"] = {Draft::Draft4, rank(Draft::Draft2019_09)};
    for (const char* w : {"const", "contains", "propertyNames"}) m[w] = {Draft::Draft6, 99};
    for (const char* w : {"if", "then", "else"}) m[w] = {Draft::Draft7, 99};
    for (const char* w :
         {"dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties", "minContains", "maxContains"})
      m[w] = {Draft::Draft2019_09, 99};
    m["$recursiveRef"] = {Draft::Draft2019_09, rank(Draft::Draft2020_12)};
    for (const char* w : {"prefixItems", "$dynamicRef"}) m[w] = {Draft::Draft2020_12, 99};
    return m;
  }();
  return k;
}

// What the translation writes: kept in every draft so that translating twice changes nothing.
bool written_by_translation(const std::string& k) {
  return k == "prefixItems" || k == "dependentRequired" || k == "dependentSchemas";
}

bool keyword_of(const std::string& k, Draft d) {
  const auto& m = validation_keywords();
  auto it = m.find(k);
  if (it == m.end()) return false;
  return rank(d) >= rank(it->second.from) && rank(d) < it->second.until;
}

}  // namespace

const char* draft_name(Draft d) {
  switch (d) {
    case Draft::Draft4:
      return "4";
    case Draft::Draft6:
      return "6";
    case Draft::Draft7:
      return "7";
    case Draft::Draft2019_09:
      return "2019-09";
    case Draft::Draft2020_12:
      return "2020-12";
  }
  return "2020-12";
}

bool parse_draft(const std::string& name, Draft* out) {
  static const std::map<std::string, Draft> names = {{"4", Draft::Draft4},
                                                     {"draft-04", Draft::Draft4},
                                                     {"6", Draft::Draft6},
                                                     {"draft-06", Draft::Draft6},
                                                     {"7", Draft::Draft7},
                                                     {"draft-07", Draft::Draft7},
                                                     {"2019-09", Draft::Draft2019_09},
                                                     {"2020-12", Draft::Draft2020_12}};
  auto it = names.find(name);
  if (it == names.end()) return false;
  *out = it->second;
  return true;
}

Draft draft_of(const json& root) {
  if (!root.is_object() || !root.contains("$schema") || !root["$schema"].is_string()) return Draft::Draft2020_12;
  const std::string uri = root["$schema"].get<std::string>();
  if (uri.find("draft-03") != std::string::npos || uri.find("draft-02") != std::string::npos ||
      uri.find("draft-01") != std::string::npos)
    throw std::runtime_error("$schema '" + uri + "': drafts before 4 are not supported (their required and extends differ)");
  if (uri.find("draft-04") != std::string::npos) return Draft::Draft4;
  if (uri.find("draft-06") != std::string::npos) return Draft::Draft6;
  if (uri.find("draft-07") != std::string::npos) return Draft::Draft7;
  if (uri.find("2019-09") != std::string::npos) return Draft::Draft2019_09;
  return Draft::Draft2020_12;
}

bool is_annotation(const std::string& k) {
  static const std::set<std::string> a = {
      "title",     "description",     "default",          "examples",      "$comment", "deprecated", "readOnly",
      "writeOnly", "contentEncoding", "contentMediaType", "contentSchema", "$schema",  "$id",        "id",
      "$anchor",   "$dynamicAnchor",  "$recursiveAnchor", "$vocabulary",   "$defs",    "definitions"};
  return a.count(k) > 0;
}

json to_2020_12(const json& s, Draft draft, std::map<std::string, int>* ignored) {
  if (!s.is_object()) return s;
  auto drop = [&](const std::string& what) {
    if (ignored) ++(*ignored)[what];
  };
  const bool before_2019 = rank(draft) < rank(Draft::Draft2019_09);
  const bool ref_alone = before_2019 && s.contains("$ref");
  const bool items_array = s.contains("items") && s["items"].is_array();
  json out = json::object();
  for (const auto& [k, v] : s.items()) {
    if (is_annotation(k)) continue;
    if (ref_alone && k != "$ref") {
      drop(k + " beside $ref");
      continue;
    }
    if (k == "items" && items_array) {
      out["prefixItems"] = v;
      if (s.contains("additionalItems")) out["items"] = s["additionalItems"];
      continue;
    }
    if (k == "additionalItems") {
      if (!items_array && !keyword_of(k, draft)) drop(k);  // a keyword of its draft without effect is not reported
      continue;
    }
    if ((k == "exclusiveMinimum" || k == "exclusiveMaximum") && v.is_boolean()) {
      const char* bound = k == "exclusiveMinimum" ? "minimum" : "maximum";
      if (v.get<bool>() && s.contains(bound)) out[k] = s[bound];
      continue;
    }
    if ((k == "minimum" || k == "maximum") && s.contains("exclusive" + std::string(k == "minimum" ? "Minimum" : "Maximum"))) {
      const json& e = s["exclusive" + std::string(k == "minimum" ? "Minimum" : "Maximum")];
      if (e.is_boolean() && e.get<bool>()) continue;  // written above as the exclusive bound
    }
    if (k == "dependencies" && keyword_of(k, draft) && v.is_object()) {
      for (const auto& [name, dep] : v.items()) {
        const char* into = dep.is_array() ? "dependentRequired" : "dependentSchemas";
        if (!out.contains(into)) out[into] = json::object();
        out[into][name] = dep;
      }
      continue;
    }
    if (keyword_of(k, draft) || written_by_translation(k)) {
      if ((k == "dependentRequired" || k == "dependentSchemas") && out.contains(k) && v.is_object()) {
        for (const auto& [name, dep] : v.items()) out[k][name] = dep;  // beside a translated dependencies
        continue;
      }
      out[k] = v;
      continue;
    }
    // A keyword of 2020-12 that this draft does not have, or no keyword at all (x-* extensions,
    // vendor keys): ignored.
    drop(k);
  }
  return out;
}

}  // namespace ib::constrain
