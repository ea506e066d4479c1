// oneOf branches that no document satisfies two of: then "exactly one" is "at least one", and the
// oneOf compiles as the union of its branches instead of a product of every branch with every
// other's over-approximation (the costliest automaton the compiler builds). Proven from keywords
// alone — type, const/enum, and a property that one branch requires and both constrain to
// disjoint values (the discriminator of OpenAPI and of most tagged unions) — read through allOf
// and $ref. Every keyword only narrows a schema's documents, so facts taken from some of them
// describe a superset, and supersets that are disjoint prove the schemas disjoint; anything not
// understood is left out, which can only fail to prove.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "constrain/json_schema_internal.h"
#include "constrain/schema_dialect.h"
#include "core/json_input.h"

namespace ib::constrain::detail {

namespace {

// Recursion bounds for $ref chains, allOf nesting and discriminators inside discriminators.
constexpr int kMaxGatherDepth = 16;
constexpr int kMaxDisjointDepth = 6;

// JSON Schema's equality of instances: numbers by value, objects without regard to key order.
// nlohmann::json (std::map objects) compares that way; ordered_json compares key orders too.
nlohmann::json canonical(const json& v) { return ib::parse_json<nlohmann::json>(v.dump()); }

bool overlap(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const auto& t : a)
    if (b.count(t) || (t == "integer" && b.count("number")) || (t == "number" && b.count("integer"))) return true;
  return false;
}

}  // namespace

// What some keywords of a conjunction of schemas say about its documents (a superset of them).
struct Compiler::Facts {
  bool never = false;                                 // false (the schema), or types that cannot meet
  std::optional<std::set<std::string>> types;         // the JSON types a document may have; nullopt: any
  std::optional<std::vector<nlohmann::json>> values;  // const / enum: the documents it may be; nullopt: any
  std::set<std::string> required;
  std::map<std::string, std::vector<json>> properties;  // a present key's value satisfies each of them
};

void Compiler::gather(const json& raw, Facts& f, int depth) {
  if (raw.is_boolean()) {
    f.never = f.never || !raw.get<bool>();
    return;
  }
  if (!raw.is_object() || depth > kMaxGatherDepth) return;
  const json s = to_2020_12(raw, draft_);
  // nullable (OpenAPI) adds null to type and enum: keep out of this object's type and values.
  const bool nullable = s.contains("nullable") && s["nullable"] == true;
  if (!nullable && s.contains("type")) {
    std::set<std::string> t;
    if (s["type"].is_string())
      t.insert(s["type"].get<std::string>());
    else if (s["type"].is_array())
      for (const auto& x : s["type"])
        if (x.is_string()) t.insert(x.get<std::string>());
    if (s["type"].is_string() || s["type"].is_array()) {
      if (f.types) {
        std::set<std::string> both;
        for (const auto& x : t)
          if (f.types->count(x))
            both.insert(x);
          else if (x == "integer" && f.types->count("number"))
            both.insert("integer");
          else if (x == "number" && f.types->count("integer"))
            both.insert("integer");
        f.types = both;
      } else {
        f.types = t;
      }
      if (f.types->empty()) f.never = true;
    }
  }
  auto restrict_values = [&](const std::vector<json>& vs) {
    std::vector<nlohmann::json> in;
    for (const auto& v : vs) in.push_back(canonical(v));
    if (!f.values) {
      f.values = in;
    } else {
      std::vector<nlohmann::json> both;
      for (const auto& v : *f.values)
        if (std::find(in.begin(), in.end(), v) != in.end()) both.push_back(v);
      f.values = both;
    }
    if (f.values->empty()) f.never = true;
  };
  if (!nullable && s.contains("const")) restrict_values({s["const"]});
  if (!nullable && s.contains("enum") && s["enum"].is_array())
    restrict_values(std::vector<json>(s["enum"].begin(), s["enum"].end()));
  if (s.contains("required") && s["required"].is_array())
    for (const auto& r : s["required"])
      if (r.is_string()) f.required.insert(r.get<std::string>());
  if (s.contains("properties") && s["properties"].is_object())
    for (const auto& [k, sub] : s["properties"].items()) f.properties[k].push_back(sub);
  if (s.contains("allOf") && s["allOf"].is_array())
    for (const auto& m : s["allOf"]) gather(m, f, depth + 1);
  if (s.contains("$ref") && s["$ref"].is_string()) {
    try {
      gather(resolve(s["$ref"], ""), f, depth + 1);
    } catch (const SchemaError&) {
      // An unresolvable reference is the compiler's to report; here it proves nothing.
    }
  }
}

bool Compiler::disjoint(const Facts& a, const Facts& b, int depth) {
  if (a.never || b.never) return true;
  if (a.types && b.types && !overlap(*a.types, *b.types)) return true;
  // Every document one side may be is one the other side excludes.
  auto excluded_by = [](const nlohmann::json& v, const Facts& o) {
    if (o.values && std::find(o.values->begin(), o.values->end(), v) == o.values->end()) return true;
    if (o.types) {
      for (const auto& t : *o.types)
        if (value_has_type(ib::parse_json<json>(v.dump()), t)) return false;
      return true;
    }
    return false;
  };
  for (const Facts* p : {&a, &b}) {
    const Facts& q = p == &a ? b : a;
    if (p->values &&
        std::all_of(p->values->begin(), p->values->end(), [&](const nlohmann::json& v) { return excluded_by(v, q); }))
      return true;
  }
  // A discriminator: where one side holds objects only, a key one side requires whose value the two
  // constrain disjointly (required says nothing about non-objects, so one side must be objects).
  auto objects_only = [](const Facts& f) { return f.types && !f.types->empty() && *f.types == std::set<std::string>{"object"}; };
  if (depth >= kMaxDisjointDepth || !(objects_only(a) || objects_only(b))) return false;
  std::set<std::string> keys = a.required;
  keys.insert(b.required.begin(), b.required.end());
  for (const auto& k : keys) {
    const auto ia = a.properties.find(k), ib = b.properties.find(k);
    if (ia == a.properties.end() || ib == b.properties.end()) continue;
    Facts fa, fb;
    for (const auto& sub : ia->second) gather(sub, fa, 0);
    for (const auto& sub : ib->second) gather(sub, fb, 0);
    if (disjoint(fa, fb, depth + 1)) return true;
  }
  return false;
}

bool Compiler::branches_disjoint(const json& branches, const json& siblings) {
  std::vector<Facts> facts(branches.size());
  for (size_t i = 0; i < branches.size(); ++i) {
    gather(siblings, facts[i], 0);
    gather(branches[i], facts[i], 0);
  }
  for (size_t i = 0; i < facts.size(); ++i)
    for (size_t j = i + 1; j < facts.size(); ++j)
      if (!disjoint(facts[i], facts[j], 0)) return false;
  return true;
}

}  // namespace ib::constrain::detail
