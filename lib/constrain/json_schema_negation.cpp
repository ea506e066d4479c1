// `not S` as a union of ordinary schemas: the documents S rejects, written with type, const/enum,
// required, properties and S's own `not` (¬{type: null} is the other five types; ¬{required: [a, b]} is an object
// without a or without b; ¬{properties: {kind: {const: x}}} is an object whose kind is not x). Real
// schemas negate such small schemas (`not`, and `if` whose else branch holds where if fails), and
// the union compiles as any subschema does: on the grammar path its objects and arrays stay rules
// called from their positions, where the product of automata that `not` and `if/else` otherwise
// take cannot hold a call and forces the whole rule inline. A property value the rewrite cannot
// negate is left out (objects holding such a value: a subset, sound, reported as cut off).
#include <algorithm>
#include <cmath>
#include <map>

#include "constrain/json_schema_internal.h"
#include "constrain/schema_dialect.h"

namespace ib::constrain::detail {

namespace {

// Bounds: $ref chains and allOf nesting read through, and the alternatives anyOf's negation (a
// conjunction of unions, multiplied out) may produce.
constexpr int kMaxNegationDepth = 8;
constexpr size_t kMaxNegationAlternatives = 32;

std::string type_of(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  return v.is_object() ? "object" : "array";
}

json type_list(const std::vector<std::string>& types) {
  json out = json::array();
  for (const auto& t : types) out.push_back(t);
  return out;
}

// The keywords of one scalar type, negated together as that type with a `not` of them.
bool scalar_keyword(const std::string& k) {
  const char* t = keyword_type(k);
  return t && (std::string(t) == "string" || std::string(t) == "number");
}

// A count bound and the bound on the other side of it: minItems n fails at maxItems n - 1.
struct CountBound {
  const char* type;
  bool at_least;
  const char* other;
};
const CountBound* count_bound(const std::string& k) {
  static const std::map<std::string, CountBound> b = {{"minItems", {"array", true, "maxItems"}},
                                                      {"maxItems", {"array", false, "minItems"}},
                                                      {"minProperties", {"object", true, "maxProperties"}},
                                                      {"maxProperties", {"object", false, "minProperties"}}};
  auto it = b.find(k);
  return it == b.end() ? nullptr : &it->second;
}

}  // namespace

std::optional<std::vector<json>> Compiler::negation(const json& raw, int depth, int* dropped,
                                                    const std::set<std::string>* context_keys) {
  if (raw.is_boolean()) return raw.get<bool>() ? std::vector<json>{} : std::vector<json>{json::object()};
  if (!raw.is_object() || depth > kMaxNegationDepth) return std::nullopt;
  json s = to_2020_12(raw, draft_);
  // nullable (OpenAPI): null is one more type of the schema's, where it names types and no values.
  if (s.contains("nullable")) {
    if (s["nullable"] == json(true)) {
      if (!s.contains("type") || s.contains("enum") || s.contains("const")) return std::nullopt;
      json t = s["type"].is_array() ? s["type"] : json::array({s["type"]});
      if (std::find(t.begin(), t.end(), json("null")) == t.end()) t.push_back("null");
      s["type"] = t;
    }
    s.erase("nullable");
  }
  // additionalProperties: false (no patternProperties): the object fails it by holding another key.
  // Which keys an object may hold is known only from the context (the other branch of a oneOf,
  // closed too): there, the keys it allows that this schema does not declare, each one required.
  std::vector<json> closed_alts;
  if (s.contains("additionalProperties") && s["additionalProperties"] == json(false) && !s.contains("patternProperties")) {
    if (!context_keys) return std::nullopt;
    for (const auto& k : *context_keys)
      if (!s.contains("properties") || !s["properties"].is_object() || !s["properties"].contains(k))
        closed_alts.push_back(json{{"type", "object"}, {"required", json::array({k})}});
    s.erase("additionalProperties");
  }
  for (const auto& [k, v] : s.items())
    if (k != "type" && k != "const" && k != "enum" && k != "required" && k != "properties" && k != "allOf" && k != "anyOf" &&
        k != "not" && k != "$ref" && !scalar_keyword(k) && !count_bound(k))
      return std::nullopt;
  std::vector<json> alts = std::move(closed_alts);
  // ¬(A ∧ B) = ¬A ∨ ¬B: a $ref target and allOf members are conjuncts like the object's own keywords.
  std::vector<json> conjuncts;
  if (s.contains("$ref")) {
    try {
      conjuncts.push_back(resolve(s["$ref"], ""));
    } catch (const SchemaError&) {
      return std::nullopt;  // the compiler reports it where it compiles the reference
    }
  }
  if (s.contains("allOf")) {
    if (!s["allOf"].is_array()) return std::nullopt;
    for (const auto& m : s["allOf"]) conjuncts.push_back(m);
  }
  for (const auto& c : conjuncts) {
    auto n = negation(c, depth + 1, dropped, context_keys);
    if (!n) return std::nullopt;
    alts.insert(alts.end(), n->begin(), n->end());
  }
  // ¬(¬X) = X: the negated schema is one alternative as it stands (if: {properties: {kind: {not:
  // {const: x}}}} fails where kind is x).
  if (s.contains("not")) alts.push_back(s["not"]);
  // ¬(A ∨ B) = ¬A ∧ ¬B: every choice of one alternative per branch, as an allOf.
  if (s.contains("anyOf")) {
    if (!s["anyOf"].is_array()) return std::nullopt;
    std::vector<json> product = {json::array()};
    for (const auto& branch : s["anyOf"]) {
      auto n = negation(branch, depth + 1, dropped, context_keys);
      if (!n) return std::nullopt;
      std::vector<json> next;
      for (const auto& partial : product)
        for (const auto& a : *n) {
          json more = partial;
          more.push_back(a);
          next.push_back(std::move(more));
        }
      if (next.size() > kMaxNegationAlternatives) return std::nullopt;
      product = std::move(next);
    }
    for (auto& p : product) alts.push_back(json{{"allOf", std::move(p)}});
  }
  // The documents whose type S rules out. Integers without number would leave the other numbers,
  // which no type names.
  std::vector<std::string> types = json_types();
  if (s.contains("type")) {
    std::set<std::string> named;
    if (s["type"].is_string()) named.insert(s["type"].get<std::string>());
    if (s["type"].is_array())
      for (const auto& t : s["type"])
        if (t.is_string()) named.insert(t.get<std::string>());
    if (named.count("integer") && !named.count("number")) return std::nullopt;
    std::vector<std::string> others;
    for (const auto& t : json_types())
      if (!named.count(t)) others.push_back(t);
    if (!others.empty()) alts.push_back(json{{"type", type_list(others)}});
    types.clear();
    for (const auto& t : json_types())
      if (named.count(t)) types.push_back(t);
  }
  // Values outside const/enum: whole types it holds no value of, and within each scalar type it
  // does, that type without them (a product of two regular languages: no call in either).
  std::vector<json> values;
  if (s.contains("const")) values.push_back(s["const"]);
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) return std::nullopt;
    if (s.contains("const")) return std::nullopt;  // both: rare, and their intersection is the compiler's to check
    values.assign(s["enum"].begin(), s["enum"].end());
  }
  if (s.contains("const") || s.contains("enum")) {
    std::vector<std::string> without;
    for (const auto& t : types) {
      json of_t = json::array();
      for (const auto& v : values)
        if (type_of(v) == t) of_t.push_back(v);
      if (of_t.empty()) {
        without.push_back(t);
      } else if (t == "boolean") {  // the other boolean, if one is left
        if (of_t.size() == 1 && std::find(of_t.begin(), of_t.end(), json(!of_t[0].get<bool>())) == of_t.end())
          alts.push_back(json{{"const", !of_t[0].get<bool>()}});
      } else if (t != "null") {  // null's one value is taken
        if (t == "object" || t == "array") return std::nullopt;
        alts.push_back(json{{"type", t}, {"not", json{{"enum", of_t}}}});
      }
    }
    if (!without.empty()) alts.push_back(json{{"type", type_list(without)}});
  }
  // A string's or a number's own keywords (lengths, pattern, format; bounds, multipleOf): that
  // type where they fail, as the type with a `not` of them (a product of call-free languages).
  for (const char* t : {"string", "number"}) {
    json own = json::object();
    for (const auto& [k, v] : s.items())
      if (scalar_keyword(k) && keyword_type(k) == std::string(t)) own[k] = v;
    if (!own.empty()) alts.push_back(json{{"type", t}, {"not", own}});
  }
  // Counts of items or of properties: the other side of the bound.
  for (const auto& [k, v] : s.items()) {
    const auto* b = count_bound(k);
    if (!b) continue;
    if (!v.is_number() || v.get<double>() < 0) return std::nullopt;
    if (v.get<double>() > 1e9) return std::nullopt;
    const auto least = static_cast<int64_t>(std::ceil(v.get<double>())), most = static_cast<int64_t>(std::floor(v.get<double>()));
    if (b->at_least) {
      if (least > 0) alts.push_back(json{{"type", b->type}, {b->other, least - 1}});
    } else {
      alts.push_back(json{{"type", b->type}, {b->other, most + 1}});
    }
  }
  // Objects missing a required key, or holding a declared key whose value its schema rejects.
  if (s.contains("required")) {
    if (!s["required"].is_array()) return std::nullopt;
    for (const auto& r : s["required"]) {
      if (!r.is_string()) return std::nullopt;
      alts.push_back(json{{"type", "object"}, {"properties", json{{r.get<std::string>(), false}}}});
    }
  }
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) return std::nullopt;
    for (const auto& [k, sub] : s["properties"].items()) {
      auto rejected = negation(sub, depth + 1, dropped);
      if (!rejected) {
        if (!dropped) return std::nullopt;
        ++*dropped;  // objects holding k with such a value are left out: a subset of ¬S
        continue;
      }
      if (rejected->empty()) continue;  // no value is rejected
      alts.push_back(json{{"type", "object"},
                          {"required", json::array({k})},
                          {"properties", json{{k, json{{"anyOf", json(std::move(*rejected))}}}}}});
    }
  }
  if (alts.size() > kMaxNegationAlternatives) return std::nullopt;
  return alts;
}

// The exact negation, else one that leaves out objects whose value for a key is one the rewrite
// cannot negate (a oneOf, a pattern, ...): a subset of ¬S, so what it compiles to stays sound, and
// the objects left out are reported as cut off.
std::optional<std::vector<json>> Compiler::union_of_negation(const json& raw, const std::set<std::string>* context_keys) {
  if (auto exact = negation(raw, 0, nullptr, context_keys)) return exact;
  int dropped = 0;
  auto lossy = negation(raw, 0, &dropped, context_keys);
  if (lossy && dropped > 0) ++cut_off_["values beyond the negation rewrite"];
  return lossy;
}

bool Compiler::scalar_types_only(const json& s) {
  if (!s.is_object() || !s.contains("type")) return false;
  const json& t = s["type"];
  if (t.is_string()) return t != "object" && t != "array";
  if (!t.is_array() || t.empty()) return false;
  for (const auto& x : t)
    if (!x.is_string() || x == "object" || x == "array") return false;
  return true;
}

// rest ∧ ¬S as the union of rest merged with each alternative of S's negation; alternatives that
// no document of rest satisfies drop out. nullopt where S is not one negation() rewrites.
std::optional<Re> Compiler::conjoined_negation(const std::vector<json>& rest, const json& negated, const std::string& ptr) {
  auto alts = union_of_negation(negated);
  if (!alts) return std::nullopt;
  std::vector<Re> out;
  for (const auto& a : *alts) {
    std::vector<json> parts = rest;
    parts.push_back(a);
    if (facts_unsatisfiable(parts)) continue;
    try {
      out.push_back(compile_conjunction(std::move(parts), ptr));
    } catch (const SchemaError& e) {
      if (!e.unsatisfiable()) throw;
    }
  }
  return re_alt(std::move(out));
}

}  // namespace ib::constrain::detail
