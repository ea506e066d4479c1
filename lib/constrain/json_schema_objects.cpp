// Objects: properties in the schema's order, required, additionalProperties and the keys it may write,
// patternProperties, propertyNames, min/maxProperties and dependentRequired; and an object's
// over-approximation (members in any order).
#include "constrain/json_schema_internal.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <tuple>

namespace ib::constrain::detail {

namespace {

// The code points of a UTF-8 string; false when it is not valid UTF-8.
bool decode_utf8(const std::string& s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    out->push_back(cp);
    i += static_cast<size_t>(n);
  }
  return true;
}

// The keys of additional properties (between the quotes): strings of unescaped characters that
// are none of `named`. A named key written by the extras would have to satisfy its property's
// schema, not additionalProperties; leaving escapes out keeps "\u0061" from spelling "a".
// Built over the trie of the named keys: at each node the key may stop (unless a name ends
// there), follow a name's next character, or leave every name with any other character.
// Declared names longer than this are refused: the complement nests one level per character (a
// recursion here, then in the NFA construction). Real schemas' names are a few dozen characters.
constexpr size_t kMaxComplementedName = 256;

Re unnamed_key(const std::vector<std::string>& named, const std::string& ptr) {
  for (const auto& name : named)
    if (name.size() > kMaxComplementedName)
      throw SchemaError("properties", ptr + "/properties",
                        "a property name of " + std::to_string(name.size()) +
                            " bytes: the keys other than the declared ones are built for names of at most " +
                            std::to_string(kMaxComplementedName));
  struct Node {
    std::map<uint32_t, size_t> kids;
    bool end = false;
  };
  std::vector<Node> trie(1);
  for (const auto& name : named) {
    std::vector<uint32_t> cps;
    if (!decode_utf8(name, &cps)) continue;
    bool raw = true;  // a name with characters that need escapes never equals an unescaped key
    for (uint32_t cp : cps) raw = raw && cp >= 0x20 && cp != '"' && cp != '\\';
    if (!raw) continue;
    size_t at = 0;
    for (uint32_t cp : cps) {
      auto it = trie[at].kids.find(cp);
      if (it == trie[at].kids.end()) {
        trie.push_back({});
        it = trie[at].kids.emplace(cp, trie.size() - 1).first;
      }
      at = it->second;
    }
    trie[at].end = true;
  }
  const Re any = re_star(raw_string_char());
  // Most trie nodes leave by ASCII characters only: the other characters are then a byte set
  // beside one shared node of every non-ASCII raw character (the UTF-8 sequences of the whole
  // range, built once instead of once per character of every declared name).
  static const Re non_ascii = [] {
    std::vector<CodePointRange> upper;
    for (const auto& r : raw_string_chars())
      if (r.hi >= 0x80) upper.push_back({std::max<uint32_t>(r.lo, 0x80), r.hi});
    return re_code_points(upper);
  }();
  std::function<Re(size_t)> from = [&](size_t at) -> Re {
    const Node& n = trie[at];
    if (n.kids.empty() && !n.end) return any;
    std::vector<Re> alts;
    if (!n.end) alts.push_back(re_empty());
    if (n.kids.empty() || n.kids.rbegin()->first < 0x80) {
      ByteSet ascii;
      for (const auto& r : raw_string_chars())
        for (uint32_t cp = r.lo; cp <= std::min<uint32_t>(r.hi, 0x7F); ++cp)
          if (!n.kids.count(cp)) ascii.set(cp);
      alts.push_back(re_concat({re_alt({re_bytes(ascii), non_ascii}), any}));
      for (const auto& [cp, kid] : n.kids) alts.push_back(re_concat({re_byte(static_cast<uint8_t>(cp)), from(kid)}));
      return re_alt(std::move(alts));
    }
    std::vector<CodePointRange> others;  // raw characters minus the kids'
    for (const auto& r : raw_string_chars()) {
      uint32_t lo = r.lo;
      for (const auto& [cp, kid] : n.kids)
        if (cp >= lo && cp <= r.hi) {
          if (cp > lo) others.push_back({lo, cp - 1});
          lo = cp + 1;
        }
      if (lo <= r.hi) others.push_back({lo, r.hi});
    }
    if (!others.empty()) alts.push_back(re_concat({re_code_points(others), any}));
    for (const auto& [cp, kid] : n.kids) alts.push_back(re_concat({re_code_points({{cp, cp}}), from(kid)}));
    return re_alt(std::move(alts));
  };
  return from(0);
}

// Bounds past which objects are refused: maxProperties where extra keys may appear (the automaton
// grows with it), and the properties dependentRequired relates (their presence is tracked).
constexpr int kMaxCountedProperties = 64;
constexpr size_t kMaxDependentProperties = 12;

}  // namespace

Re Compiler::member(const std::string& key, Re value) {
  return re_concat({re_literal(json(key).dump()), ws_, re_byte(':'), ws_, std::move(value)});
}

// A patternProperties entry: the raw keys it matches (unanchored, as JSON Schema patterns are),
// an automaton over any key's UTF-8 bytes for declared names, and its schema.
struct Compiler::PatternProperty {
  std::string pattern, ptr;
  Re key;                    // raw characters (the keys extras are written with)
  std::shared_ptr<Dfa> any;  // every character: does a declared name match?
  json schema;
};

std::vector<Compiler::PatternProperty> Compiler::pattern_properties(const json& s, const std::string& ptr) {
  std::vector<PatternProperty> out;
  if (!s.contains("patternProperties")) return out;
  const std::string pp = ptr + "/patternProperties";
  if (!s["patternProperties"].is_object()) fail("patternProperties", pp, "patternProperties must be an object");
  CompileLimits limits;
  limits.max_dfa_states = o_.max_product_states;
  for (const auto& [pattern, sub] : s["patternProperties"].items()) {
    PatternProperty p{pattern, pp + "/" + escape_pointer(pattern), nullptr, nullptr, sub};
    auto unanchored = [&](const std::vector<CodePointRange>* universe) {
      ParsedRegex r;
      try {
        r = parse_regex(pattern, universe);
      } catch (const RegexError& e) {
        beyond("patternProperties", p.ptr, e.what());
      }
      Re any = re_star(universe ? re_code_points(*universe) : re_any_char());
      return re_concat({r.anchored_start ? re_empty() : any, r.re, r.anchored_end ? re_empty() : any});
    };
    p.key = unanchored(&raw_string_chars());
    try {
      p.any = std::make_shared<Dfa>(compile_dfa(unanchored(nullptr), limits));
    } catch (const RegexError& e) {
      beyond("patternProperties", p.ptr, e.what());
    }
    out.push_back(std::move(p));
  }
  // Keys two patterns both match would need both schemas: refused (the keys extras may write).
  for (size_t i = 0; i < out.size(); ++i)
    for (size_t j = i + 1; j < out.size(); ++j)
      if (product({out[i].key, out[j].key}, ProductRule::Intersection, "patternProperties", pp, "patternProperties overlap check")
              ->kind != RegexNode::Kind::Never)
        beyond("patternProperties", pp,
               "patterns '" + out[i].pattern + "' and '" + out[j].pattern +
                   "' match the same keys: overlapping patternProperties are not supported");
  return out;
}

Re Compiler::object(const json& s, const std::string& ptr) {
  const bool undeclared = !s.contains("properties") && !s.contains("patternProperties");
  if ((!o_.strict_properties || (o_.open_undeclared_objects && undeclared)) &&
      !s.contains("additionalProperties")) {  // the JSON Schema meaning
    json open = s;
    open["additionalProperties"] = true;
    return object(open, ptr);
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail("required", ptr + "/required", "required must be an array of names");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) fail("required", ptr + "/required", "required must be an array of names");
      required.insert(r.get<std::string>());
    }
  }
  const std::vector<PatternProperty> patterns = pattern_properties(s, ptr);
  auto matching = [&](const std::string& name) {
    std::vector<json> out;
    for (const auto& p : patterns)
      if (p.any->matches(name)) out.push_back(p.schema);
    return out;
  };
  // propertyNames: the names' language (quoted), exact; a declared name outside it never appears.
  Re names_lang;
  std::shared_ptr<Dfa> names_dfa;
  const std::string np = ptr + "/propertyNames";
  if (s.contains("propertyNames") && !over_) {
    // Names are strings: the schema's other types, and any call a rule would make for them, are
    // left out (a product holds no call), without counting as a cut-off.
    {
      CallsOff scope(*this);
      names_lang = compile_conjunction({json{{"type", "string"}}, s["propertyNames"]}, np);
    }
    CompileLimits limits;
    limits.max_dfa_states = o_.max_product_states;
    try {
      names_dfa = std::make_shared<Dfa>(compile_dfa(names_lang, limits));
    } catch (const RegexError& e) {
      beyond("propertyNames", np, e.what());
    }
  }
  auto name_ok = [&](const std::string& name) { return !names_dfa || names_dfa->matches(json(name).dump()); };

  std::vector<std::pair<std::string, Re>> props;
  std::vector<std::string> names;  // every declared or added name: extras never write one
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) fail("properties", ptr + "/properties", "properties must be an object");
    for (const auto& [k, v] : s["properties"].items()) {
      const std::string pp = ptr + "/properties/" + escape_pointer(k);
      names.push_back(k);
      std::vector<json> also = over_ ? std::vector<json>{} : matching(k);
      if (!name_ok(k)) {
        if (required.count(k)) fail("propertyNames", np, "required property '" + k + "' does not satisfy propertyNames");
        continue;
      }
      Re value;
      try {
        if (also.empty())
          value = compile(v, pp);
        else {  // a declared name a pattern matches: both schemas apply
          also.insert(also.begin(), v);
          value = compile_conjunction(also, pp);
        }
      } catch (const SchemaError& e) {
        // An optional property no value satisfies: the key cannot appear (it is still declared,
        // so no extra key spells it).
        if (!e.unsatisfiable() || required.count(k)) throw;
        value = re_never();
      }
      props.emplace_back(k, value);
    }
  }
  Re extra = re_never();  // the value schema of additional properties, if any
  if (s.contains("additionalProperties")) {
    const json& a = s["additionalProperties"];
    if (!(a.is_boolean() && !a.get<bool>())) extra = compile(a, ptr + "/additionalProperties");
  }
  const bool has_named_props = s.contains("properties");
  // A name the schema needs but does not declare: its value follows the patterns that match it,
  // else additionalProperties (any value when absent); never when propertyNames rejects it.
  auto undeclared_value = [&](const std::string& name, const std::string& vp) -> Re {
    if (!name_ok(name)) return re_never();
    std::vector<json> also = over_ ? std::vector<json>{} : matching(name);
    if (!also.empty()) return also.size() == 1 ? compile(also[0], vp) : compile_conjunction(also, vp);
    return s.contains("additionalProperties") ? extra : json_value_regex_ws(o_.any_depth);
  };
  auto declared = [&](const std::string& name) { return has_named_props && s["properties"].contains(name); };
  for (const auto& r : required)
    if (!declared(r)) {
      Re value = undeclared_value(r, ptr + "/required");
      if (value->kind == RegexNode::Kind::Never)
        unsatisfiable(
            "required", ptr + "/required",
            "required property '" + r + "' is not in properties and additionalProperties (or propertyNames) rules it out");
      props.emplace_back(r, value);
      names.push_back(r);
    }
  // dependentRequired: {a: [b, ...]}: when a is present, so is each b.
  std::vector<std::pair<std::string, std::vector<std::string>>> deps;
  if (s.contains("dependentRequired")) {
    const std::string dp = ptr + "/dependentRequired";
    const json& d = s["dependentRequired"];
    if (!d.is_object()) fail("dependentRequired", dp, "dependentRequired must be an object of name arrays");
    for (const auto& [a, list] : d.items()) {
      if (!list.is_array()) fail("dependentRequired", dp, "dependentRequired must be an object of name arrays");
      std::vector<std::string> bs;
      for (const auto& b : list) {
        if (!b.is_string()) fail("dependentRequired", dp, "dependentRequired must be an object of name arrays");
        bs.push_back(b.get<std::string>());
      }
      deps.emplace_back(a, bs);
    }
    // Names the dependencies mention but the schema does not declare become optional properties.
    for (const auto& [a, bs] : deps) {
      std::vector<std::string> all = bs;
      all.insert(all.begin(), a);
      for (const auto& n : all)
        if (std::find(names.begin(), names.end(), n) == names.end()) {
          names.push_back(n);
          Re value = undeclared_value(n, dp);
          if (value->kind != RegexNode::Kind::Never) props.emplace_back(n, value);
        }
    }
  }

  if (over_) {  // min/maxProperties, dependentRequired, propertyNames: left out (a superset)
    const bool any_extra = s.contains("patternProperties") || !s.contains("additionalProperties");
    return object_over(props, required, any_extra ? json_value_regex_ws(o_.any_depth) : extra, ptr);
  }

  const int min_props = length_bound(s, "minProperties", ptr), max_props = length_bound(s, "maxProperties", ptr);
  if (min_props >= 0 && max_props >= 0 && min_props > max_props)
    fail("minProperties", ptr, "minProperties is above maxProperties");

  // The extra members: keys a pattern matches with its schema, other keys with additionalProperties'.
  std::vector<Re> extra_members;
  {
    Re unnamed = quoted(unnamed_key(names, ptr));
    // Keys with a quote or a backslash, as JSON writers spell them: none
    // spells a declared name (unless a name holds such a character) and, without patterns, they
    // are additional properties. (Patterns are read over raw characters: beside them such a key
    // might match one, so it is left out.)
    const bool plain_names = std::all_of(names.begin(), names.end(), [](const std::string& n) {
      return std::none_of(n.begin(), n.end(), [](char c) { return must_escape(static_cast<unsigned char>(c)); });
    });
    if (patterns.empty() && plain_names) unnamed = re_alt({unnamed, quoted(spelt_content_with_quote())});
    if (names_lang)
      unnamed = product({unnamed, names_lang}, ProductRule::Intersection, "propertyNames", np, "propertyNames with the keys");
    std::vector<Re> pattern_keys = {unnamed};
    for (const auto& p : patterns) {
      Re key = product({quoted(p.key), unnamed}, ProductRule::Intersection, "patternProperties", p.ptr, "the keys of a pattern");
      pattern_keys.push_back(quoted(p.key));
      if (key->kind == RegexNode::Kind::Never) continue;
      extra_members.push_back(re_concat({key, ws_, re_byte(':'), ws_, compile(p.schema, p.ptr)}));
    }
    if (extra->kind != RegexNode::Kind::Never) {
      Re key = patterns.empty() ? unnamed
                                : product(pattern_keys, ProductRule::Difference, "patternProperties", ptr + "/patternProperties",
                                          "additional keys (no pattern matches)");
      extra_members.push_back(re_concat({key, ws_, re_byte(':'), ws_, extra}));
    }
  }
  const Re extra_member = re_alt(extra_members);
  const bool extras_possible = extra_member->kind != RegexNode::Kind::Never;
  if (extras_possible && max_props > kMaxCountedProperties)
    beyond("maxProperties", ptr + "/maxProperties",
           "maxProperties above " + std::to_string(kMaxCountedProperties) +
               " with additional or pattern properties is not supported");

  // Presence bits of the properties dependentRequired mentions, in props order.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < props.size(); ++i) index.emplace(props[i].first, i);
  std::map<size_t, int> bit;                     // prop index -> bit
  std::set<size_t> forbidden;                    // present would need an absent-by-schema dependent
  std::vector<std::pair<size_t, size_t>> edges;  // (a, b): a present -> b present
  for (const auto& [a, bs] : deps) {
    auto ia = index.find(a);
    if (ia == index.end()) continue;  // a never appears: nothing to require
    for (const auto& b : bs) {
      auto ib = index.find(b);
      if (ib == index.end())
        forbidden.insert(ia->second);
      else if (ib->second != ia->second)
        edges.emplace_back(ia->second, ib->second);
    }
  }
  for (const auto& [a, b] : edges)
    for (size_t x : {a, b})
      if (!bit.count(x)) bit.emplace(x, static_cast<int>(bit.size()));
  if (bit.size() > kMaxDependentProperties)
    beyond("dependentRequired", ptr + "/dependentRequired",
           "dependentRequired over more than " + std::to_string(kMaxDependentProperties) + " properties is not supported");
  for (size_t f : forbidden)
    if (required.count(props[f].first))
      beyond("dependentRequired", ptr + "/dependentRequired",
             "required property '" + props[f].first + "' depends on a property the schema rules out");
  auto is_set = [&](uint32_t mask, size_t i) {
    auto it = bit.find(i);
    return it != bit.end() && ((mask >> it->second) & 1u) != 0;
  };

  // Members in schema order; optional ones may be left out, commas only between members; extras
  // last. tail(i, first, c, mask) = the members from i on, `first` when nothing was emitted yet,
  // c named members so far (capped where the bounds stop caring), mask the dependentRequired
  // properties present so far.
  // Extra keys may repeat one another (a regular language cannot keep them apart), and a parser
  // keeps one of a repeated key, so at most one extra member counts toward minProperties; each
  // counts toward maxProperties.
  const int count_cap = std::max(min_props, max_props >= 0 ? max_props + 1 : 0);
  const Re comma = re_concat({ws_, re_byte(','), ws_});
  std::map<std::tuple<size_t, bool, int, uint32_t>, Re> memo;
  std::function<Re(size_t, bool, int, uint32_t)> tail = [&](size_t i, bool first, int c, uint32_t mask) -> Re {
    auto key = std::make_tuple(i, first, c, mask);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
    Re r;
    if (i == props.size()) {
      const int lo = min_props > c ? min_props - c : 0, hi = max_props >= 0 ? max_props - c : -1;
      if (!extras_possible || hi == 0)
        r = lo == 0 ? re_empty() : re_never();
      else if (lo > 1)
        r = re_never();
      else {
        Re some = re_concat({extra_member, re_repeat(re_concat({comma, extra_member}), 0, hi < 0 ? -1 : hi - 1)});
        if (!first) some = re_concat({comma, some});
        r = lo == 0 ? re_optional(some) : some;
      }
    } else {
      const std::string& name = props[i].first;
      bool can_be_present = !forbidden.count(i) && (max_props < 0 || c < max_props);
      bool can_be_absent = !required.count(name);
      for (const auto& [a, b] : edges) {
        if (a == i && b < i && !is_set(mask, b)) can_be_present = false;  // a needs an earlier b it left out
        if (b == i && a < i && is_set(mask, a)) can_be_absent = false;    // an earlier a needs b
      }
      std::vector<Re> alts;
      if (can_be_present) {
        const uint32_t m = bit.count(i) ? mask | (1u << bit.at(i)) : mask;
        alts.push_back(re_concat(
            {first ? re_empty() : comma, member(name, props[i].second), tail(i + 1, false, std::min(c + 1, count_cap), m)}));
      }
      if (can_be_absent) alts.push_back(tail(i + 1, first, c, mask));
      r = re_alt(std::move(alts));
    }
    memo[key] = r;
    return r;
  };
  Re body = tail(0, true, 0, 0);
  if (body->kind == RegexNode::Kind::Never) {
    const char* k = s.contains("minProperties")       ? "minProperties"
                    : s.contains("dependentRequired") ? "dependentRequired"
                                                      : "properties";
    const std::string what = std::string("no object satisfies ") + k +
                             " with the schema's properties (extra keys may repeat, so at most one counts toward minProperties)";
    // Required properties no value satisfies alone: no object does (an optional property holding
    // this object is then absent). With counts, the compiler's own bound may be what is empty.
    if (std::string(k) == "properties") unsatisfiable(k, ptr + "/" + k, what);
    beyond(k, ptr + "/" + k, what);
  }
  return re_concat({re_byte('{'), ws_, body, ws_, re_byte('}')});
}

// An object as an over-approximation: members in any order (repeats too), a named key's value its
// property's, an unnamed raw key's value additionalProperties' (any value when absent), a key
// with escapes any value; each required key is the key of some member, spelt raw or with
// escapes (an escape in a value does not stand for a key: a regular language of members, not of
// bytes, so {"b":"x\"y"} is not taken for a document holding a required "a").
Re Compiler::object_over(const std::vector<std::pair<std::string, Re>>& props, const std::set<std::string>& required,
                         const Re& extra, const std::string& ptr) {
  ++over_changes_;
  std::vector<Re> members;
  std::vector<std::string> names;
  for (const auto& [k, v] : props) {
    members.push_back(member(k, v));
    names.push_back(k);
  }
  if (extra->kind != RegexNode::Kind::Never)
    members.push_back(re_concat({quoted(unnamed_key(names, ptr)), ws_, re_byte(':'), ws_, extra}));
  members.push_back(re_concat({quoted(escaped_content()), ws_, re_byte(':'), ws_, json_value_regex_ws(o_.any_depth)}));
  const Re escaped_member = members.back();
  const Re m = re_alt(std::move(members));
  const Re sep = re_concat({ws_, re_byte(','), ws_});
  Re body = re_concat({re_byte('{'), ws_, re_optional(re_concat({m, re_star(re_concat({sep, m}))})), ws_, re_byte('}')});
  if (required.empty()) return body;
  std::vector<Re> langs;
  for (const auto& r : required) {
    // The members that may carry key r: its own (a declared property's value, else an extra
    // key's), or any key with escapes.
    std::vector<Re> carriers = {escaped_member};
    const auto named = std::find_if(props.begin(), props.end(), [&](const auto& p) { return p.first == r; });
    if (named != props.end())
      carriers.push_back(member(r, named->second));
    else if (extra->kind != RegexNode::Kind::Never)
      carriers.push_back(member(r, extra));
    langs.push_back(re_concat({re_byte('{'), ws_, re_star(re_concat({m, sep})), re_alt(std::move(carriers)),
                               re_star(re_concat({sep, m})), ws_, re_byte('}')}));
  }
  // Past the product cap, fewer of the required keys (the first half, again and again): a coarser
  // superset, still sound to subtract, that keeps apart the documents lacking one of them (with
  // none, every object would be subtracted: a oneOf of {"type": "object"} and an object requiring
  // six keys would hold no document).
  while (langs.size() > 1) {
    try {
      return product(langs, ProductRule::Intersection, "oneOf", ptr + "/required",
                     "oneOf: a branch's required keys in any order");
    } catch (const SchemaError&) {
      langs.resize(langs.size() / 2);
    }
  }
  return langs[0];
}

}  // namespace ib::constrain::detail
