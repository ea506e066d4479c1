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
  // Keys an object cannot hold: `properties: {k: false}`, `not: {required: [k]}`, and outside
  // `allowed` (the declared names of a schema object closed by additionalProperties: false).
  std::set<std::string> forbidden;
  std::optional<std::set<std::string>> allowed;
  // An array's item count: minItems, and maxItems or the prefixItems of an array closed by items: false.
  // Values ruled out by `not: {enum}` / `not: {const}`: subtracted from `values` where both are known.
  std::vector<nlohmann::json> excluded;
  // const/enum values all excluded or outside the types: no document.
  bool no_value_left() const {
    return values && std::all_of(values->begin(), values->end(), [&](const nlohmann::json& v) {
             if (std::find(excluded.begin(), excluded.end(), v) != excluded.end()) return true;
             if (!types) return false;
             const json as = ib::parse_json<json>(v.dump());
             return std::none_of(types->begin(), types->end(), [&](const std::string& t) { return value_has_type(as, t); });
           });
  }
  int min_items = 0;
  std::optional<int> max_items;
  // anyOf / oneOf of the schema object: its documents satisfy one of each list's branches.
  std::vector<json> unions;
  bool forbids(const std::string& k) const { return forbidden.count(k) || (allowed && !allowed->count(k)); }
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
    for (const auto& [k, sub] : s["properties"].items()) {
      f.properties[k].push_back(sub);
      if (sub == json(false)) f.forbidden.insert(k);
    }
  if (s.contains("additionalProperties") && s["additionalProperties"] == json(false) && !s.contains("patternProperties")) {
    std::set<std::string> names;
    if (s.contains("properties") && s["properties"].is_object())
      for (const auto& [k, sub] : s["properties"].items()) names.insert(k);
    if (f.allowed) {
      std::set<std::string> both;
      for (const auto& k : names)
        if (f.allowed->count(k)) both.insert(k);
      names = std::move(both);
    }
    f.allowed = std::move(names);
  }
  // not of a schema whose keywords constrain none of the document's possible types (required on
  // arrays): that schema holds, so its negation never does.
  if (s.contains("not") && f.types && vacuous_for(s["not"], *f.types, depth)) f.never = true;
  // not of one keyword: values (const, enum) or a key (required, one name) ruled out.
  if (s.contains("not") && s["not"].is_object() && s["not"].size() == 1) {
    const json& n = s["not"];
    if (n.contains("const")) f.excluded.push_back(canonical(n["const"]));
    if (n.contains("enum") && n["enum"].is_array())
      for (const auto& v : n["enum"]) f.excluded.push_back(canonical(v));
    if (n.contains("required") && n["required"].is_array() && n["required"].size() == 1 && n["required"][0].is_string())
      f.forbidden.insert(n["required"][0].get<std::string>());
  }
  auto count = [&](const char* k) -> std::optional<int> {
    if (!s.contains(k) || !s[k].is_number() || s[k].get<double>() < 0 || s[k].get<double>() > 1e6) return std::nullopt;
    return static_cast<int>(std::ceil(s[k].get<double>()));
  };
  if (auto mn = count("minItems")) f.min_items = std::max(f.min_items, *mn);
  std::optional<int> mx = count("maxItems");
  if (s.contains("items") && s["items"] == json(false))
    mx = std::min(mx.value_or(1'000'000),
                  s.contains("prefixItems") && s["prefixItems"].is_array() ? static_cast<int>(s["prefixItems"].size()) : 0);
  if (mx) f.max_items = std::min(f.max_items.value_or(1'000'000), *mx);
  if (s.contains("allOf") && s["allOf"].is_array())
    for (const auto& m : s["allOf"]) gather(m, f, depth + 1);
  for (const char* c : {"anyOf", "oneOf"})
    if (s.contains(c) && s[c].is_array() && !s[c].empty()) f.unions.push_back(s[c]);
  if (s.contains("$ref") && s["$ref"].is_string()) {
    try {
      gather(resolve(s["$ref"], ""), f, depth + 1);
    } catch (const SchemaError&) {
      // An unresolvable reference is the compiler's to report; here it proves nothing.
    }
  }
}

// True when every document of the given types satisfies `raw`: its keywords, read through $ref
// and allOf, all belong to other types (object keywords on arrays, ...). False where not known.
bool Compiler::vacuous_for(const json& raw, const std::set<std::string>& types, int depth) {
  if (raw.is_boolean()) return raw.get<bool>();
  if (!raw.is_object() || depth > kMaxGatherDepth) return false;
  const json s = to_2020_12(raw, draft_);
  for (const auto& [k, v] : s.items()) {
    if (k == "$ref" && v.is_string()) {
      try {
        if (!vacuous_for(resolve(v, ""), types, depth + 1)) return false;
      } catch (const SchemaError&) {
        return false;
      }
      continue;
    }
    if (k == "allOf" && v.is_array()) {
      for (const auto& m : v)
        if (!vacuous_for(m, types, depth + 1)) return false;
      continue;
    }
    const char* t = keyword_type(k);
    if (!t || types.count(t) || (std::string(t) == "number" && types.count("integer"))) return false;
  }
  return true;
}

bool Compiler::disjoint(const Facts& a, const Facts& b, int depth) {
  if (disjoint_here(a, b, depth)) return true;
  // A side that is a union is disjoint from the other when each of its branches is.
  if (depth >= kMaxDisjointDepth) return false;
  for (const Facts* p : {&a, &b}) {
    if (p->unions.empty()) continue;
    const Facts& q = p == &a ? b : a;
    bool all = true;
    for (const auto& branch : p->unions.back()) {
      Facts one = *p;
      one.unions.pop_back();
      gather(branch, one, 0);
      if (!disjoint(one, q, depth + 1)) {
        all = false;
        break;
      }
    }
    if (all) return true;
  }
  return false;
}

bool Compiler::disjoint_here(const Facts& a, const Facts& b, int depth) {
  if (a.never || b.never || a.no_value_left() || b.no_value_left()) return true;
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
  // Item counts: where one side holds arrays only, counts that no array has on both sides.
  auto only = [](const Facts& f, const char* t) { return f.types && !f.types->empty() && *f.types == std::set<std::string>{t}; };
  if ((only(a, "array") || only(b, "array")) &&
      ((a.max_items && *a.max_items < b.min_items) || (b.max_items && *b.max_items < a.min_items)))
    return true;
  auto objects_only = [&](const Facts& f) { return only(f, "object"); };
  if (!(objects_only(a) || objects_only(b))) return false;
  // A key one side requires and the other cannot hold.
  for (const auto& k : a.required)
    if (b.forbids(k)) return true;
  for (const auto& k : b.required)
    if (a.forbids(k)) return true;
  if (depth >= kMaxDisjointDepth) return false;
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

namespace ib::constrain::detail {

// What some keywords of the conjunction say proves it has no document: types or values that
// cannot meet, or (objects only) a required key whose value no schema of it admits. Checked before
// a conjunction is compiled where conditionals nest (each if compiles the next conditional in both
// of its branches): a branch that cannot hold is cut there, not after the ones below it.
bool Compiler::facts_unsatisfiable(const std::vector<json>& parts) {
  Facts f;
  for (const auto& p : parts) gather(p, f, 0);
  if (f.never || f.no_value_left()) return true;
  if (!f.types || *f.types != std::set<std::string>{"object"}) return false;
  for (const auto& k : f.required) {
    auto it = f.properties.find(k);
    if (f.forbids(k)) return true;
    if (it == f.properties.end()) continue;
    Facts v;
    for (const auto& sub : it->second) gather(sub, v, 0);
    if (v.never || v.no_value_left()) return true;
    // Two of the key's schemas no value satisfies both of (a union read branch by branch).
    const std::vector<json>& subs = it->second;
    for (size_t a = 0; a < subs.size(); ++a)
      for (size_t b = a + 1; b < subs.size(); ++b) {
        Facts fa, fb;
        gather(subs[a], fa, 0);
        gather(subs[b], fb, 0);
        if (disjoint(fa, fb, 0)) return true;
      }
  }
  return false;
}

// Documents of one type that satisfy exactly one of the live branches: ∨_i (B_i ∧ ∧_{j≠i} ¬B_j),
// each ¬B_j a union of schemas (negation()) multiplied out, within a bound on the conjunctions.
std::optional<Re> Compiler::exactly_one_by_negation(const json& list, const std::vector<size_t>& live,
                                                    const std::vector<Facts>& facts, const json& siblings, const json& by_type,
                                                    const std::string& ptr) {
  constexpr size_t kMaxConjunctions = 64;
  std::vector<std::vector<json>> all;
  for (size_t n = 0; n < live.size(); ++n) {
    const size_t i = live[n];
    // The keys a document of branch i may hold, where it is closed: what a closed branch j's
    // negation needs (such a document fails j by holding one of them that j does not declare).
    const std::set<std::string>* keys = facts[n].allowed ? &*facts[n].allowed : nullptr;
    std::vector<std::vector<json>> choices = {{siblings, list[i], by_type}};
    for (size_t j : live) {
      if (j == i) continue;
      auto negated = union_of_negation(list[j], keys);
      if (!negated) return std::nullopt;
      std::vector<std::vector<json>> next;
      for (const auto& c : choices)
        for (const auto& a : *negated) {
          next.push_back(c);
          next.back().push_back(a);
        }
      // Conjunctions the facts prove empty go now, before they multiply.
      next.erase(std::remove_if(next.begin(), next.end(), [&](const std::vector<json>& c) { return facts_unsatisfiable(c); }),
                 next.end());
      choices = std::move(next);
      if (all.size() + choices.size() > kMaxConjunctions) return std::nullopt;
    }
    all.insert(all.end(), choices.begin(), choices.end());
  }
  std::vector<Re> out;
  for (auto& parts : all) {  // each already past facts_unsatisfiable
    try {
      out.push_back(compile_conjunction(std::move(parts), ptr + "/oneOf"));
    } catch (const SchemaError& e) {
      if (!e.unsatisfiable()) throw;
    }
  }
  return re_alt(std::move(out));
}

// oneOf split by the document's type, which partitions documents: exactly one branch of all is
// exactly one branch among those restricted to objects, or to arrays, or to strings, and so on.
// Restricted to one type, branches are more often provably disjoint (a key one requires and the
// other forbids says nothing about strings, which may match both); where scalars still overlap
// their product holds no call. nullopt where objects or arrays overlap: the caller's product.
std::optional<Re> Compiler::one_of_by_type(const json& list, const json& siblings, const std::string& ptr) {
  // nullable (OpenAPI) adds null beside the type a restriction names.
  if (siblings.contains("nullable")) return std::nullopt;
  for (const auto& b : list)
    if (b.is_object() && b.contains("nullable")) return std::nullopt;
  std::vector<Re> out;
  bool by_product = false;
  for (const std::string& t : json_types()) {
    const json by_type = json{{"type", t}};
    // Two branches every document of the type satisfies: none satisfies exactly one.
    const std::set<std::string> only_t = {t};
    if (vacuous_for(siblings, only_t, 0)) {
      int every = 0;
      for (const auto& b : list) every += vacuous_for(b, only_t, 0);
      if (every >= 2) continue;
    }
    std::vector<size_t> live;
    std::vector<Facts> facts;
    for (size_t i = 0; i < list.size(); ++i) {
      Facts f;
      gather(by_type, f, 0);  // first: what a branch's `not` says depends on the type
      gather(siblings, f, 0);
      gather(list[i], f, 0);
      if (f.never) continue;
      live.push_back(i);
      facts.push_back(std::move(f));
    }
    bool apart = true;
    for (size_t a = 0; a < facts.size() && apart; ++a)
      for (size_t b = a + 1; b < facts.size() && apart; ++b) apart = disjoint(facts[a], facts[b], 0);
    const bool container = std::string(t) == "object" || std::string(t) == "array";
    if (!apart && container) {
      // Exactly one as a union: each branch with every other negated, where negation() rewrites
      // the others (required keys, values, types: the branches of most overlapping oneOfs).
      auto each = exactly_one_by_negation(list, live, facts, siblings, by_type, ptr);
      if (!each) return std::nullopt;
      out.push_back(*each);
      continue;
    }
    std::vector<Re> exact_langs, over_langs;
    for (size_t i : live) {
      const std::string bp = ptr + "/oneOf/" + std::to_string(i);
      try {
        Re exact = compile_conjunction({siblings, list[i], by_type}, bp);
        if (!apart) {
          const int before = over_changes_;
          over_ = true;
          Re o;
          try {
            o = compile_conjunction({siblings, list[i], by_type}, bp);
          } catch (...) {
            over_ = false;
            throw;
          }
          over_ = false;
          over_langs.push_back(over_changes_ == before ? exact : o);
        }
        exact_langs.push_back(exact);
      } catch (const SchemaError& e) {
        if (!e.unsatisfiable()) throw;  // no document of this type satisfies the branch
      }
    }
    if (apart || exact_langs.size() == 1) {
      out.insert(out.end(), exact_langs.begin(), exact_langs.end());
      continue;
    }
    std::vector<Re> langs = exact_langs;
    langs.insert(langs.end(), over_langs.begin(), over_langs.end());
    out.push_back(
        product(langs, ProductRule::ExactlyOne, "oneOf", ptr + "/oneOf", std::string("oneOf (exactly one branch, ") + t + "s)"));
    by_product = true;
  }
  // Empty without a product (whose over-approximations may subtract too much): no document
  // satisfies exactly one branch (an optional property holding it is then absent).
  if (out.empty() && !by_product) unsatisfiable("oneOf", ptr + "/oneOf", "no document matches exactly one branch of oneOf");
  return re_alt(std::move(out));
}

}  // namespace ib::constrain::detail
