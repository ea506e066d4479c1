// allOf (and $ref or anyOf beside other keywords) by merging: the conjuncts' keywords combined into one
// schema object, apart from the rest of the compiler because it rewrites schemas rather than compiling them.
#include "constrain/json_schema_internal.h"

#include <algorithm>
#include <deque>

namespace ib::constrain::detail {

namespace {
// Two different anyOf lists merge as the union of their pairs, up to this many.
constexpr size_t kMaxMergedAnyOf = 64;
}  // namespace

// allOf by merging: the conjuncts' keywords combine into one schema whose language is the
// intersection (types intersect, bounds tighten, required and properties unite, a property in
// several conjuncts becomes an allOf of its schemas). What cannot be merged soundly is refused.
Re Compiler::compile_conjunction(std::vector<json> conjuncts, const std::string& ptr) {
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
      if (!entered.enter(part["$ref"].is_string() ? part["$ref"].get<std::string>() : std::string())) {
        if (over_) return over_also(re_never(), json_value_regex_ws(0));
        ++cut_off_["$ref recursion past max_recursion"];
        return re_never();
      }
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
      beyond(dependent, ptr,
             std::string("allOf that combines '") + dependent + "' and '" + on + "' from different schemas cannot be merged");
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
void Compiler::merge_additional_properties(json& merged, const std::vector<ObjectPart>& objects, const std::string& ptr) {
  json extras = json::array();
  for (const auto& x : objects) {
    if (x.additional.is_null() || x.additional == json(true)) continue;
    extras.push_back(x.additional);
    if (x.patterns || (merged.contains("patternProperties") && objects.size() > 1))
      beyond("additionalProperties", ptr,
             "allOf that combines 'additionalProperties' with patternProperties from different schemas cannot be merged");
    if (!merged.contains("properties")) continue;
    for (auto& [name, sub] : merged["properties"].items())
      if (!x.names.count(name))
        sub = x.additional == json(false) ? json(false) : json{{"allOf", json::array({sub, x.additional})}};
  }
  bool any = false;
  for (const auto& x : objects) any = any || !x.additional.is_null();
  if (!any) return;
  if (extras.empty())
    merged["additionalProperties"] = true;
  else if (extras.size() == 1)
    merged["additionalProperties"] = extras[0];
  else
    merged["additionalProperties"] = json{{"allOf", extras}};
}

// items of part X applies past X's own prefixItems: each merged prefix position beyond them takes
// X's items as well, and the items after every prefix take every part's.
template <typename ArrayPart>
void Compiler::merge_items(json& merged, const std::vector<ArrayPart>& arrays) {
  if (arrays.empty()) return;
  size_t longest = 0;
  for (const auto& a : arrays) longest = std::max(longest, a.prefix.size());
  json prefix = json::array(), items = json::array();
  for (size_t i = 0; i < longest; ++i) {
    json all = json::array();
    for (const auto& a : arrays) {
      if (i < a.prefix.size())
        all.push_back(a.prefix[i]);
      else if (!a.items.is_null())
        all.push_back(a.items);
    }
    prefix.push_back(all.size() == 1 ? all[0] : json{{"allOf", all}});
  }
  for (const auto& a : arrays)
    if (!a.items.is_null()) items.push_back(a.items);
  if (longest > 0) merged["prefixItems"] = prefix;
  if (!items.empty()) merged["items"] = items.size() == 1 ? items[0] : json{{"allOf", items}};
}

void Compiler::merge_keyword(json& m, const std::string& k, const json& v, const std::string& ptr) {
  if (!m.contains(k)) {
    m[k] = v;
    return;
  }
  json& cur = m[k];
  if (cur == v) return;
  auto as_set = [](const json& t) {
    std::set<std::string> out;
    if (t.is_string())
      out.insert(t.get<std::string>());
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
      if (!cur.contains(name))
        cur[name] = sub;
      else if (cur[name] != sub)
        cur[name] = json{{"allOf", json::array({cur[name], sub})}};
    }
  } else if (k == "items") {
    cur = json{{"allOf", json::array({cur, v})}};
  } else if (k == "patternProperties") {  // the same pattern twice: both schemas
    for (const auto& [pattern, sub] : v.items()) {
      if (!cur.contains(pattern))
        cur[pattern] = sub;
      else if (cur[pattern] != sub)
        cur[pattern] = json{{"allOf", json::array({cur[pattern], sub})}};
    }
  } else if (k == "propertyNames") {
    cur = json{{"allOf", json::array({cur, v})}};
  } else if (k == "dependentRequired") {
    for (const auto& [a, list] : v.items()) {
      if (!cur.contains(a))
        cur[a] = list;
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
    if (both.empty()) unsatisfiable("enum", ptr, "the enums of allOf have no value in common");
    cur = both;
  } else if (k == "anyOf" && cur.is_array() && v.is_array() && cur.size() * v.size() <= kMaxMergedAnyOf) {
    // (a1 ∨ a2) ∧ (b1 ∨ b2) = (a1 ∧ b1) ∨ (a1 ∧ b2) ∨ ...: a negation's union merged with a
    // property's own anyOf, say.
    json both = json::array();
    for (const auto& a : cur)
      for (const auto& b : v) both.push_back(json{{"allOf", json::array({a, b})}});
    cur = both;
  } else if (k == "not") {  // ¬A ∧ ¬B = ¬(A ∨ B)
    cur = json{{"anyOf", json::array({cur, v})}};
  } else if (k == "multipleOf" && cur.is_number_unsigned() && v.is_number_unsigned() && cur.get<uint64_t>() > 0 &&
             v.get<uint64_t>() > 0 &&
             cur.get<uint64_t>() / gcd_u64(cur.get<uint64_t>(), v.get<uint64_t>()) <= 1'000'000'000'000 / v.get<uint64_t>()) {
    // Whole multipleOf values: a multiple of both is a multiple of their least common multiple.
    cur = cur.get<uint64_t>() / gcd_u64(cur.get<uint64_t>(), v.get<uint64_t>()) * v.get<uint64_t>();
  } else if (k == "const") {
    unsatisfiable("const", ptr, "the consts of allOf differ: no document satisfies both");
  } else {
    beyond(k, ptr + "/" + escape_pointer(k), "allOf with two different '" + k + "' cannot be merged");
  }
}

}  // namespace ib::constrain::detail
