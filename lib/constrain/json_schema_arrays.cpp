// Arrays: prefixItems, items and minItems/maxItems, uniqueItems (finite enumerations, disjoint prefixItems)
// and contains with minContains/maxContains.
#include "constrain/json_schema_internal.h"

#include <algorithm>
#include <functional>
#include <map>

namespace ib::constrain::detail {

namespace {

// contains: the largest count tracked (minContains, maxContains + 1), and positions × counts spelt
// out (up to maxItems, else up to minItems / prefixItems; each is a state of the construction).
constexpr int kMaxContainsCount = 32;

constexpr int64_t kMaxContainsPositions = 4096;

// uniqueItems over an enumeration of n values in any order: 2^n sets times the values' bytes
// bounds the automaton (bxci's 7 services of 50 bytes: 6,400).
constexpr size_t kMaxUniqueAnyOrderWork = 16384;

}  // namespace

Re Compiler::array(const json& s, const std::string& ptr) {
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
  if (!items_allowed && mn > k) fail("minItems", ptr, "minItems needs more items than prefixItems allows");
  // The most items an array may have (-1: no bound).
  const int longest = !items_allowed ? (mx >= 0 ? std::min(mx, k) : k) : mx;
  const Re comma = re_concat({ws_, re_byte(','), ws_});
  if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
    if (over_)
      ++over_changes_;  // an over-approximation leaves it out
    else if (longest < 0 || longest > 1) {
      // Items of a finite enumeration: each value at most once, in the enumeration's order.
      if (k == 0 && !s.contains("contains") && s.contains("items"))
        if (auto values = finite_values(s["items"], 0)) return unique_enum_array(*values, mn, mx, comma, item, ptr);
      if ((longest < 0 || longest > k) && (o_.unique_items_by_validator || o_.validator_fallback)) {
        by_validator_["uniqueItems"].insert(ptr + "/uniqueItems");
      } else {
        unique_prefix_items(s, longest, ptr);
      }
    }
  }
  if (s.contains("contains") && !over_) return array_contains(s, prefix, item, mn, mx, ptr);
  if (s.contains("contains")) ++over_changes_;  // an over-approximation leaves it out
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
  return re_concat({re_byte('['), ws_, elements(0), ws_, re_byte(']')});
}

// The values an item schema allows when they are a finite list: enum or const (filtered by type),
// boolean, null, through a plain $ref; nullopt otherwise (or past 64 values).
std::optional<std::vector<json>> Compiler::finite_values(const json& raw, int depth) {
  if (!raw.is_object() || depth > 8) return std::nullopt;
  const json s = read(raw, "");
  if (s.size() == 1 && s.contains("$ref") && s["$ref"].is_string()) {
    RefScope entered(*this);
    if (!entered.enter(s["$ref"].get<std::string>())) return std::nullopt;
    return finite_values(resolve(s["$ref"], ""), depth + 1);
  }
  for (const auto& [k, v] : s.items())
    if (k != "type" && k != "enum" && k != "const") return std::nullopt;
  std::vector<json> values;
  if (s.contains("const"))
    values.push_back(s["const"]);
  else if (s.contains("enum") && s["enum"].is_array())
    values.assign(s["enum"].begin(), s["enum"].end());
  else if (s.contains("type") && s["type"] == "boolean")
    values = {json(false), json(true)};
  else if (s.contains("type") && s["type"] == "null")
    values = {json(nullptr)};
  else
    return std::nullopt;
  std::vector<json> out;
  for (const auto& v : values) {
    bool typed = !s.contains("type");
    if (s.contains("type")) {
      if (s["type"].is_string())
        typed = value_has_type(v, s["type"].get<std::string>());
      else if (s["type"].is_array())
        for (const auto& t : s["type"]) typed = typed || (t.is_string() && value_has_type(v, t.get<std::string>()));
    }
    // Equal values spelt twice (1 and 1.0, objects in another key order) would be written twice: refuse those.
    for (const auto& o : out)
      if (o.dump() == v.dump() || (o.is_number() && v.is_number() && o.get<double>() == v.get<double>()) ||
          (o.is_structured() && v.is_structured()))
        return std::nullopt;
    if (typed) out.push_back(v);
  }
  if (out.empty() || out.size() > 64) return std::nullopt;
  return out;
}

// Arrays of distinct values of a finite enumeration: in any order where the automaton of the
// values used so far stays small (2^n sets times the values' bytes: services: [Mysql, Redis] and
// [Redis, Mysql] alike), else written in the enumeration's order (after value j, only values past
// j). minItems/maxItems: the array's ordinary language intersected with it.
Re Compiler::unique_enum_array(const std::vector<json>& values, int mn, int mx, const Re& comma, const Re& item,
                               const std::string& ptr) {
  const size_t n = values.size();
  std::vector<Re> written;
  size_t bytes = 0;
  for (const auto& v : values) {
    const std::string text = v.dump();
    written.push_back(re_literal(text));
    bytes += text.size();
  }
  std::vector<Re> first;
  if (n < 16 && (size_t{1} << n) * bytes <= kMaxUniqueAnyOrderWork) {
    // after[S]: the rest of an array whose values so far are the set S (each shared by every order
    // that reaches S, so the regex and its automaton have one node per set).
    std::vector<Re> after(size_t{1} << n);
    for (size_t set = after.size(); set-- > 0;) {
      std::vector<Re> next = {re_empty()};
      for (size_t v = 0; v < n; ++v)
        if (!(set >> v & 1)) next.push_back(re_concat({comma, written[v], after[set | size_t{1} << v]}));
      after[set] = re_alt(std::move(next));
    }
    for (size_t v = 0; v < n; ++v) first.push_back(re_concat({written[v], after[size_t{1} << v]}));
  } else {
    std::vector<Re> rest(n + 1, re_empty());  // rest[j]: any choice of values j.. in order, each after a comma
    for (size_t j = n; j-- > 0;) rest[j] = re_concat({re_optional(re_concat({comma, written[j]})), rest[j + 1]});
    for (size_t j = 0; j < n; ++j) first.push_back(re_concat({written[j], rest[j + 1]}));
  }
  Re unique = re_concat({re_byte('['), ws_, re_optional(re_alt(std::move(first))), ws_, re_byte(']')});
  if (mn <= 0 && mx < 0) return unique;
  const int lo = std::max(mn, 0);
  Re some = re_concat({item, re_repeat(re_concat({comma, item}), std::max(lo - 1, 0), mx < 0 ? -1 : std::max(mx - 1, 0))});
  Re counted = re_concat({re_byte('['), ws_, mx == 0 ? re_empty() : (lo == 0 ? re_optional(some) : some), ws_, re_byte(']')});
  return product({unique, counted}, ProductRule::Intersection, "uniqueItems", ptr + "/uniqueItems",
                 "uniqueItems with minItems/maxItems");
}

// uniqueItems: true beyond one item: only prefixItems with no items after them, pairwise
// disjoint. Items i < j are never equal when no spelling of i's exact language is in j's
// over-approximation (which holds every spelling of every value valid by j).
void Compiler::unique_prefix_items(const json& s, int longest, const std::string& ptr) {
  const std::string up = ptr + "/uniqueItems";
  const int k = s.contains("prefixItems") ? static_cast<int>(s["prefixItems"].size()) : 0;
  if (longest < 0 || longest > k)
    beyond("uniqueItems", up,
           "uniqueItems: true is supported only where at most one item is allowed or every item is a "
           "prefixItems entry (items: false or maxItems) with pairwise disjoint languages");
  for (int i = 0; i < longest; ++i)
    for (int j = 0; j < longest; ++j) {
      if (i == j) continue;
      const std::string pi = ptr + "/prefixItems/" + std::to_string(i), pj = ptr + "/prefixItems/" + std::to_string(j);
      const Re both =
          product({exact(s["prefixItems"][static_cast<size_t>(i)], pi), looser(s["prefixItems"][static_cast<size_t>(j)], pj)},
                  ProductRule::Intersection, "uniqueItems", up, "uniqueItems (prefixItems disjointness)");
      if (both->kind != RegexNode::Kind::Never)
        beyond("uniqueItems", up,
               "uniqueItems: prefixItems " + std::to_string(i) + " and " + std::to_string(j) +
                   " may hold equal values (only pairwise disjoint prefixItems are supported)");
    }
}

// contains with minContains/maxContains: each item is a hit (its language ∩ contains' exact
// language) or a miss (its language minus contains' over-approximation, so an item contains
// holds in another spelling is never counted as a miss); the hits are counted up to the bounds.
// An item that is neither (valid by contains, outside its exact language) is left out.
Re Compiler::array_contains(const json& s, const std::vector<Re>& prefix, const Re& item, int mn, int mx,
                            const std::string& ptr) {
  const std::string cp = ptr + "/contains";
  const int min_c = s.contains("minContains") ? length_bound(s, "minContains", ptr) : 1;
  const int max_c = length_bound(s, "maxContains", ptr);
  if (max_c >= 0 && min_c > max_c) fail("minContains", ptr + "/minContains", "minContains is above maxContains");
  const int cap = std::max(min_c, max_c + 1);  // counts past it behave alike
  if (cap > kMaxContainsCount)
    beyond(max_c + 1 > min_c ? "maxContains" : "minContains", ptr + (max_c + 1 > min_c ? "/maxContains" : "/minContains"),
           "contains counts above " + std::to_string(kMaxContainsCount) + " are not supported");
  const Re hit_of = exact(s["contains"], cp), miss_of = looser(s["contains"], cp);
  std::map<const RegexNode*, std::pair<Re, Re>> split;  // an item language -> (hit, miss)
  auto parts = [&](const Re& lang) -> const std::pair<Re, Re>& {
    auto it = split.find(lang.get());
    if (it == split.end()) {
      Re hit = product({lang, hit_of}, ProductRule::Intersection, "contains", cp, "contains (items it holds)");
      Re miss = product({lang, miss_of}, ProductRule::Difference, "contains", cp, "contains (items it does not hold)");
      it = split.emplace(lang.get(), std::make_pair(hit, miss)).first;
    }
    return it->second;
  };
  const int k = static_cast<int>(prefix.size());
  const bool items_allowed = item->kind != RegexNode::Kind::Never;
  // Past `loop` positions (no maxItems) every position is alike: a loop instead of positions.
  const int loop = std::max({k, mn, 1});
  // Positions are spelt out up to maxItems, else up to `loop`: each with its counts.
  const int positions = mx >= 0 ? mx + 1 : loop + 1;
  if (static_cast<int64_t>(positions) * (cap + 1) > kMaxContainsPositions)
    beyond("contains", cp,
           "contains with " + std::string(mx >= 0 ? "maxItems " : "minItems/prefixItems ") + std::to_string(positions - 1) +
               " is too large to count (at most " + std::to_string(kMaxContainsPositions) + " positions × counts)");
  const Re comma = re_concat({ws_, re_byte(','), ws_});
  std::map<std::pair<int, int>, Re> memo;
  // elements(i, c): the elements from position i on, c hits so far (capped at `cap`).
  std::function<Re(int, int)> elements = [&](int i, int c) -> Re {
    auto key = std::make_pair(i, c);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    const bool can_end = i >= mn && c >= min_c;
    const bool more = (mx < 0 || i < mx) && (i < k || items_allowed);
    Re r;
    if (!more) {
      r = can_end ? re_empty() : re_never();
    } else if (mx < 0 && i >= loop) {
      // Misses anywhere, between the hits still allowed: N* (M N*){lo, hi}.
      const auto& [hit, miss] = parts(item);
      const Re n = re_star(re_concat({comma, miss})), m = re_concat({comma, hit});
      const int lo = std::max(min_c - c, 0), hi = max_c < 0 ? -1 : max_c - c;
      r = re_concat({n, re_repeat(re_concat({m, n}), lo, hi)});
    } else {
      const auto& [hit, miss] = parts(i < k ? prefix[static_cast<size_t>(i)] : item);
      const Re sep = i == 0 ? re_empty() : comma;
      std::vector<Re> alts;
      if (can_end) alts.push_back(re_empty());
      if (max_c < 0 || c < max_c) alts.push_back(re_concat({sep, hit, elements(i + 1, std::min(c + 1, cap))}));
      alts.push_back(re_concat({sep, miss, elements(i + 1, c)}));
      r = re_alt(std::move(alts));
    }
    memo[key] = r;
    return r;
  };
  Re body = elements(0, 0);
  if (body->kind == RegexNode::Kind::Never) fail("contains", cp, "no array satisfies contains with the item schemas and bounds");
  return re_concat({re_byte('['), ws_, body, ws_, re_byte(']')});
}

}  // namespace ib::constrain::detail
