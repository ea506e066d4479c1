// The JSON Schema compiler's core: the entry points, the dispatch of one schema object (dependentSchemas,
// not, if/then/else, $ref, anyOf/oneOf, allOf, enum/const, type) and the exact / over-approximation
// modes. Each type's language, references and allOf merging live in json_schema_*.cpp.
#include "constrain/json_schema.h"

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/json_schema_internal.h"
#include "constrain/schema_dialect.h"
#include "core/json_input.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

namespace ib::constrain {

namespace detail {

namespace {

Re ws_of(const SchemaOptions& o) {
  if (o.whitespace == SchemaOptions::Whitespace::Compact) return re_empty();
  ByteSet s;
  s.set(' ');
  s.set('\n');
  s.set('\t');
  return re_repeat(re_bytes(s), 0, o.max_whitespace);
}

// Subschemas nested in one another (with $ref expansions): past it the schema is refused.
constexpr int kMaxSchemaDepth = 200;
// dependentSchemas in one schema object: each doubles the cases compiled.
constexpr size_t kMaxDependentSchemas = 6;

}  // namespace

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

const std::vector<std::string>& json_types() {
  static const std::vector<std::string> t = {"null", "boolean", "object", "array", "number", "string"};
  return t;
}

const char* keyword_type(const std::string& keyword) {
  static const std::map<std::string, const char*> family = {{"properties", "object"},
                                                            {"required", "object"},
                                                            {"additionalProperties", "object"},
                                                            {"patternProperties", "object"},
                                                            {"minProperties", "object"},
                                                            {"maxProperties", "object"},
                                                            {"dependentRequired", "object"},
                                                            {"dependentSchemas", "object"},
                                                            {"propertyNames", "object"},
                                                            {"items", "array"},
                                                            {"prefixItems", "array"},
                                                            {"minItems", "array"},
                                                            {"maxItems", "array"},
                                                            {"uniqueItems", "array"},
                                                            {"contains", "array"},
                                                            {"minContains", "array"},
                                                            {"maxContains", "array"},
                                                            {"minLength", "string"},
                                                            {"maxLength", "string"},
                                                            {"pattern", "string"},
                                                            {"format", "string"},
                                                            {"minimum", "number"},
                                                            {"maximum", "number"},
                                                            {"exclusiveMinimum", "number"},
                                                            {"exclusiveMaximum", "number"},
                                                            {"multipleOf", "number"}};
  auto it = family.find(keyword);
  return it == family.end() ? nullptr : it->second;
}

const std::set<std::string>& supported() {
  static const std::set<std::string> s = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "uniqueItems",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "$ref",
                                          "nullable",
                                          "not",
                                          "if",
                                          "then",
                                          "else",
                                          "multipleOf",
                                          "minProperties",
                                          "maxProperties",
                                          "dependentRequired",
                                          "propertyNames",
                                          "patternProperties",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "dependentSchemas"};
  return s;
}

Compiler::Compiler(const json& root, const SchemaOptions& o) : root_(root), o_(o), ws_(ws_of(o)) {
  Draft fallback = Draft::Draft2020_12;
  if (!o.default_draft.empty() && !parse_draft(o.default_draft, &fallback))
    fail("$schema", "", "unknown draft '" + o.default_draft + "' (4, 6, 7, 2019-09, 2020-12)");
  try {
    draft_ = root.is_object() && root.contains("$schema") ? draft_of(root) : fallback;
  } catch (const std::runtime_error& e) {
    fail("$schema", "/$schema", e.what());
  }
}

// What was read past, for SchemaNotes.
void Compiler::report(SchemaNotes* notes) const {
  notes->draft = draft_name(draft_);
  for (const auto& [k, at] : ignored_) notes->ignored[k] = static_cast<int>(at.size());
  for (const auto& [f, at] : unasserted_) notes->unasserted_formats[f] = static_cast<int>(at.size());
  for (const auto& [k, at] : by_validator_) notes->validator_decides[k] = static_cast<int>(at.size());
  notes->cut_off = cut_off_;
}

Re Compiler::compile(const json& raw, const std::string& ptr) {
  const bool rule_body = body_next_;
  body_next_ = false;
  if (raw.is_boolean()) return raw.get<bool>() ? json_value_regex_ws(o_.any_depth) : re_never();
  if (!raw.is_object()) fail("", ptr, "a schema is an object or a boolean");
  if (!rule_body && calls_allowed() && may_nest(raw)) return re_call(rule_for(raw, ptr));
  // Nesting is bounded (a schema of thousands of nested items would overflow the stack).
  if (depth_ >= kMaxSchemaDepth)
    fail("", ptr, "the schema nests deeper than " + std::to_string(kMaxSchemaDepth) + " levels (subschemas and $ref expansions)");
  // So is the work: conditionals and oneOf compile their parts more than once, recursive
  // references multiply that, and a schema past the budget is refused rather than compiled for
  // minutes.
  compile_budget_tick();
  if (++steps_ > o_.max_compile_steps)
    fail("max_compile_steps", ptr,
         "compiling the schema takes more than " + std::to_string(o_.max_compile_steps) +
             " subschema compiles (max_compile_steps; nested if/then/else, oneOf and recursive $ref multiply them)");
  struct Nest {
    int& d;
    explicit Nest(int& x) : d(++x) {}
    ~Nest() { --d; }
  } nest(depth_);
  const json s = read(raw, ptr);
  if (!o_.validator_fallback) return compile_read(s, ptr);
  // A refusal beyond the mask's reach in this object: compile the object without that keyword and
  // let the validator decide; once per keyword (widened() removes it), so this ends. A subschema
  // met again ($ref targets are compiled at their own pointer) starts from the widening found the
  // first time instead of failing its way there again.
  const std::pair<std::string, bool> at{ptr, over_};
  if (auto it = widened_at_.find(at); it != widened_at_.end())
    for (const auto& [from, to] : it->second)
      if (from == s) {
        const json known = to;  // a copy: the compile may add to this list
        return compile_read(known, ptr);
      }
  json cur = s;
  bool wider_than_s = false;
  for (;;) {
    try {
      Re out = compile_read(cur, ptr);
      if (wider_than_s) widened_at_[at].emplace_back(s, cur);
      return out;
    } catch (const SchemaError& e) {
      std::optional<json> wider = e.beyond() ? widened(cur, ptr, e) : std::nullopt;
      if (!wider) throw;
      by_validator_[e.keyword().empty() ? "automaton limits" : e.keyword()].insert(e.pointer());
      cur = std::move(*wider);
      wider_than_s = true;
    }
  }
}

Re Compiler::compile_read(const json& s, const std::string& ptr) {
  for (const auto& [k, v] : s.items())
    if (!supported().count(k)) fail(k, ptr + "/" + escape_pointer(k), "unsupported keyword '" + k + "'");
  std::vector<std::string> validation;
  for (const auto& [k, v] : s.items()) validation.push_back(k);

  // dependentSchemas {a: S}: objects holding a satisfy S as well. Split on a's presence: (the
  // rest with a required, merged with S) or (the rest with a ruled out); the two cases are
  // disjoint, so each is compiled as exactly as the rest is. Non-objects fall in the second.
  if (s.contains("dependentSchemas")) {
    const std::string dp = ptr + "/dependentSchemas";
    const json& deps = s["dependentSchemas"];
    if (!deps.is_object()) fail("dependentSchemas", dp, "dependentSchemas must be an object of schemas");
    if (deps.size() > kMaxDependentSchemas)
      beyond("dependentSchemas", dp, "more than " + std::to_string(kMaxDependentSchemas) + " dependent schemas in one object");
    json rest = s;
    rest.erase("dependentSchemas");
    if (deps.empty()) return compile(rest, ptr);
    const std::string name = deps.begin().key();
    json remaining = deps;
    remaining.erase(name);
    if (!remaining.empty()) rest["dependentSchemas"] = remaining;
    json present = rest, absent = rest;
    if (!present.contains("required")) present["required"] = json::array();
    if (std::find(present["required"].begin(), present["required"].end(), json(name)) == present["required"].end())
      present["required"].push_back(name);
    if (!absent.contains("properties")) absent["properties"] = json::object();
    absent["properties"][name] = false;
    // Either case may hold no document (the dependent schema rules out what the rest requires).
    auto or_never = [&](const std::function<Re()>& f) {
      try {
        return f();
      } catch (const SchemaError& e) {
        if (!e.unsatisfiable()) throw;
        return re_never();
      }
    };
    Re with = or_never([&] { return compile_conjunction({present, deps.begin().value()}, dp + "/" + escape_pointer(name)); });
    Re without = or_never([&] { return compile(absent, ptr); });
    if (with->kind == RegexNode::Kind::Never && without->kind == RegexNode::Kind::Never)
      unsatisfiable("dependentSchemas", dp, "no document satisfies the schema with or without '" + name + "'");
    return re_alt({with, without});
  }

  // not: the rest of the schema minus the negated schema's over-approximation (see json_schema.h).
  if (s.contains("not")) {
    json rest = s;
    rest.erase("not");
    const std::string np = ptr + "/not";
    // On the grammar path a base holding calls cannot enter a product: the negation as a union
    // of schemas merged with the rest, where the negated schema is one negation() rewrites. A
    // rest of scalar types holds no call (and is how the rewrite writes a scalar without values).
    if (calls_allowed() && !scalar_types_only(rest))
      if (auto rewritten = conjoined_negation({rest}, s["not"], np)) {
        // The rewrite is exact (or a subset with its cut-off reported): empty is unsatisfiable.
        if ((*rewritten)->kind == RegexNode::Kind::Never)
          unsatisfiable("not", np, "no document satisfies the schema and not the negated one");
        return *rewritten;
      }
    Re base = compile(rest, ptr);
    if (over_) {  // an over-approximation of rest ∧ ¬S: rest's minus S's exact language
      ++over_changes_;
      return product({base, exact(s["not"], np)}, ProductRule::Difference, "not", np, "not (over-approximated)");
    }
    Re out = product({base, looser(s["not"], np)}, ProductRule::Difference, "not", np,
                     "not (the schema minus the negated schema's over-approximation)");
    if (out->kind == RegexNode::Kind::Never) beyond("not", np, "no document satisfies the schema and not the negated one");
    return out;
  }
  // if/then/else: (rest ∧ then) ∩ if, compiled exactly, or (rest ∧ else) minus if's
  // over-approximation; then and else default to any value; without if they are ignored.
  if (s.contains("if")) {
    json rest = s;
    for (const char* k : {"if", "then", "else"}) rest.erase(k);
    auto with = [&](const char* k) {
      if (!s.contains(k)) return compile(rest, ptr);
      return compile_conjunction({rest, s[k]}, ptr + "/" + k);
    };
    const std::string ip = ptr + "/if";
    if (over_) {  // an over-approximation: the same with the roles of if's languages swapped
      ++over_changes_;
      Re then_lang = with("then"), else_lang = with("else");
      Re strict_if = exact(strict_if_schema(s["if"]), ip), looser_if = looser(s["if"], ip);
      return re_alt({product({then_lang, looser_if}, ProductRule::Intersection, "if", ip, "if/then (over-approximated)"),
                     product({else_lang, strict_if}, ProductRule::Difference, "if", ip, "if/else (over-approximated)")});
    }
    // The then branch where if holds: rest ∧ then ∧ if merged into one schema, written in the
    // merge's key order. (An intersection of the then branch with if's own language would keep only
    // documents whose keys if names come first, in if's order: if's language writes its extra keys
    // after them.) Where the three do not merge, or the merge is unsatisfiable or malformed, that
    // intersection (which then finds the branch empty, or reports the schema's fault); an automaton
    // cap passed deeper down would be passed there again, so it stands.
    Re yes;
    const std::string cp = s.contains("then") ? ptr + "/then" : ptr;
    try {
      std::vector<json> parts = {rest};
      if (s.contains("then")) parts.push_back(s["then"]);
      parts.push_back(strict_if_schema(s["if"]));
      yes = facts_unsatisfiable(parts) ? re_never() : compile_conjunction(std::move(parts), cp);
    } catch (const SchemaError& e) {
      const std::string& at = e.pointer();
      const bool merge =
          at == cp || (at.compare(0, cp.size() + 1, cp + "/") == 0 && at.find('/', cp.size() + 1) == std::string::npos);
      if (e.cap() && !merge) throw;
      yes = product({with("then"), exact(strict_if_schema(s["if"]), ip)}, ProductRule::Intersection, "if", ip,
                    "if/then (the then branch where if holds)");
    }
    // The else branch where if fails: as for not, a union of schemas on the grammar path (where
    // the else branch may hold calls) when if is one negation() rewrites, else a product.
    std::optional<Re> rewritten;
    if (calls_allowed()) {
      std::vector<json> parts = {rest};
      if (s.contains("else")) parts.push_back(s["else"]);
      rewritten = conjoined_negation(parts, s["if"], s.contains("else") ? ptr + "/else" : ptr);
    }
    Re no = rewritten ? *rewritten
                      : product({with("else"), looser(s["if"], ip)}, ProductRule::Difference, "if", ip,
                                "if/else (the else branch minus if's over-approximation)");
    if (yes->kind == RegexNode::Kind::Never && no->kind == RegexNode::Kind::Never)
      beyond("if", ip, "no document satisfies if/then/else as compiled");
    return re_alt({yes, no});
  }
  if (s.contains("$ref")) {
    if (validation.size() == 1) return ref(s["$ref"], ptr + "/$ref");
    // $ref beside other keywords: both apply (2020-12), so merge them as an allOf.
    return compile_conjunction({s}, ptr);
  }
  for (const char* comb : {"anyOf", "oneOf"}) {
    if (!s.contains(comb)) continue;
    const bool exclusive = std::string(comb) == "oneOf";
    const json& list = s[comb];
    if (!list.is_array() || list.empty()) fail(comb, ptr + "/" + comb, std::string(comb) + " must be a non-empty array");
    json siblings = json::object();
    for (const auto& [k, v] : s.items())
      if (k != comb) siblings[k] = v;
    std::vector<Re> alts;
    size_t unsatisfiable_branches = 0;
    auto branch = [&](size_t i) {
      const std::string bp = ptr + "/" + comb + "/" + std::to_string(i);
      // Keywords beside anyOf apply to every branch: distribute them. A branch no value
      // satisfies (an enum outside the type they bring) matches nothing; the others stand.
      try {
        if (!siblings.empty() && facts_unsatisfiable({siblings, list[i]})) {
          ++unsatisfiable_branches;
          return re_never();
        }
        return siblings.empty() ? compile(list[i], bp) : compile_conjunction({siblings, list[i]}, bp);
      } catch (const SchemaError& e) {
        if (!e.unsatisfiable()) throw;
        ++unsatisfiable_branches;
        return re_never();
      }
    };
    for (size_t i = 0; i < list.size(); ++i) alts.push_back(branch(i));
    if (unsatisfiable_branches == list.size())
      unsatisfiable(comb, ptr + "/" + comb, std::string("no value satisfies any branch of ") + comb);
    // anyOf, a single branch, and oneOf inside an over-approximation (the union of the
    // branches' over-approximations holds every document valid for exactly one) are unions.
    if (!exclusive || list.size() == 1 || over_) return re_alt(std::move(alts));
    // Branches no document satisfies two of (a discriminator, distinct types or values): exactly
    // one is at least one.
    if (branches_disjoint(list, siblings)) return re_alt(std::move(alts));
    // On the grammar path a product cannot hold the branches' calls: split by type first.
    if (calls_allowed() && std::any_of(alts.begin(), alts.end(), [](const Re& a) { return re_holds_call(a); }))
      if (auto split = one_of_by_type(list, siblings, ptr)) {
        if ((*split)->kind == RegexNode::Kind::Never)
          beyond("oneOf", ptr + "/oneOf", "no document matches exactly one branch of oneOf");
        return *split;
      }
    // oneOf: exactly one branch. The branches again as over-approximations: what a document
    // valid for branch j may look like in any spelling another branch writes (the same
    // language where nothing is approximated).
    std::vector<Re> overs;
    for (size_t i = 0; i < list.size(); ++i) {
      const int before = over_changes_;
      over_ = true;
      Re o = branch(i);
      over_ = false;
      overs.push_back(over_changes_ == before ? alts[i] : o);
    }
    alts.insert(alts.end(), overs.begin(), overs.end());
    Re out = product(alts, ProductRule::ExactlyOne, "oneOf", ptr + "/oneOf", "oneOf (exactly one branch)");
    if (out->kind == RegexNode::Kind::Never) beyond("oneOf", ptr + "/oneOf", "no document matches exactly one branch of oneOf");
    return out;
  }
  if (s.contains("allOf")) {
    if (!s["allOf"].is_array() || s["allOf"].empty()) fail("allOf", ptr + "/allOf", "allOf must be a non-empty array");
    return compile_conjunction({s}, ptr);
  }
  if (s.contains("const")) return one_of_values({s["const"]}, s, ptr);
  if (s.contains("enum")) {
    if (!s["enum"].is_array() || s["enum"].empty()) fail("enum", ptr + "/enum", "enum must be a non-empty array");
    return one_of_values(std::vector<json>(s["enum"].begin(), s["enum"].end()), s, ptr);
  }

  std::vector<std::string> types;
  if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_string())
      types.push_back(t.get<std::string>());
    else if (t.is_array() && !t.empty())
      for (const auto& x : t) types.push_back(x.is_string() ? x.get<std::string>() : "");
    else  // an empty list too (the meta-schema's minItems 1): it was read as "any type"
      fail("type", ptr + "/type", "type must be a string or a non-empty array of strings");
  } else {
    types = inferred_types(s);
    // The JSON Schema meaning: a keyword constrains values of its own type only, so without `type`
    // a value of any other type is valid too ({"format": "date"} holds 2, {"properties": ...}
    // holds "str"). strict_properties keeps the type the keywords imply (what a model should write).
    if (!types.empty() && !o_.strict_properties) types = {"null", "boolean", "number", "string", "object", "array"};
  }
  if (types.empty()) return json_value_regex_ws(o_.any_depth);
  if (over_ && !s.contains("type") && o_.strict_properties) {
    // Without type, a value of another type than the keywords suggest is valid too (each
    // keyword constrains its own type): an over-approximation holds every type.
    ++over_changes_;
    types = {"null", "boolean", "number", "string", "object", "array"};
  }
  std::vector<Re> alts;
  for (const auto& t : types) alts.push_back(typed(s, t, ptr));
  if (s.contains("nullable") && s["nullable"] == true) alts.push_back(re_literal("null"));
  return re_alt(std::move(alts));
}

// A schema object in 2020-12 spelling (schema_dialect.h), what it ignored recorded by pointer.
json Compiler::read(const json& raw, const std::string& ptr) {
  std::map<std::string, int> dropped;
  json s = to_2020_12(raw, draft_, &dropped);
  for (const auto& [k, n] : dropped) ignored_[k].insert(ptr);
  return s;
}

Re Compiler::in_mode(bool over, const json& s, const std::string& ptr) {
  const bool was = over_;
  over_ = over;
  ++inline_only_;  // both modes feed a product (not, if, uniqueItems): no calls
  Re out;
  try {
    out = compile(s, ptr);
  } catch (...) {
    over_ = was;
    --inline_only_;
    throw;
  }
  over_ = was;
  --inline_only_;
  return out;
}

// if's schema for the intersection with then: still only documents valid by if, but with any
// other keys where its top-level properties stand without additionalProperties, and values of
// every type where it has no type (its keywords constrain their own type only).
json Compiler::strict_if_schema(json i) {
  if (!i.is_object()) return i;
  bool plain = true;
  for (const char* k : {"$ref", "allOf", "anyOf", "oneOf", "enum", "const", "not", "if"}) plain = plain && !i.contains(k);
  if (!plain) return i;
  if (i.contains("properties") && !i.contains("additionalProperties")) i["additionalProperties"] = true;
  if (!i.contains("type") && !inferred_types(i).empty())
    i["type"] = json::array({"null", "boolean", "number", "string", "object", "array"});
  return i;
}

Re Compiler::over_also(Re exact, Re more) {
  ++over_changes_;
  return re_alt({std::move(exact), std::move(more)});
}

// The languages combined by product_dfa (automaton.h), as one AST node; a size cap passed is a
// SchemaError naming the keyword and the pointer.
Re Compiler::product(const std::vector<Re>& langs, ProductRule rule, const std::string& keyword, const std::string& ptr,
                     const std::string& what) {
  if (grammar_)
    for (const auto& l : langs)
      if (re_holds_call(l)) {
        // With the validator fallback, a keyword the fallback can widen goes to the validator
        // (its object compiled without it, or oneOf as anyOf) instead of the whole rule inline,
        // where every rule below it is expanded again, products in products.
        for (const char* widenable : {"oneOf", "not", "if", "contains", "uniqueItems"})
          if (o_.validator_fallback && keyword == widenable)
            beyond(keyword, ptr, what + ": a product of languages holding rule calls");
        throw NeedsInline{};
      }
  CompileLimits limits;
  limits.max_dfa_states = o_.max_product_states;
  try {
    std::vector<std::unique_ptr<Dfa>> dfas;
    std::map<const RegexNode*, const Dfa*> seen;  // a language given twice is compiled once
    std::vector<const Dfa*> parts;
    for (const auto& l : langs) {
      auto it = seen.find(l.get());
      if (it == seen.end()) {
        dfas.push_back(std::make_unique<Dfa>(compile_dfa(l, limits)));
        it = seen.emplace(l.get(), dfas.back().get()).first;
      }
      parts.push_back(it->second);
    }
    return re_automaton(std::make_shared<const Dfa>(product_dfa(parts, rule, limits)));
  } catch (const RegexError& e) {
    throw SchemaError(
        keyword, ptr,
        what + ": " + e.what() + " (SchemaOptions::max_product_states = " + std::to_string(o_.max_product_states) + ")", true,
        true);
  }
}

std::vector<std::string> Compiler::inferred_types(const json& s) {
  for (const char* k : {"properties", "required", "additionalProperties", "minProperties", "maxProperties", "dependentRequired",
                        "propertyNames", "patternProperties"})
    if (s.contains(k)) return {"object"};
  for (const char* k : {"items", "prefixItems", "minItems", "maxItems", "contains"})
    if (s.contains(k)) return {"array"};
  if (s.contains("uniqueItems") && s["uniqueItems"] == true) return {"array"};
  for (const char* k : {"minLength", "maxLength", "pattern", "format"})
    if (s.contains(k)) return {"string"};
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
    if (s.contains(k)) return {"number"};
  return {};
}

Re Compiler::json_value_regex_ws(int depth) {
  if (calls_allowed()) return any_value_rule();
  if (!over_ && depth == o_.any_depth && depth >= 0) ++cut_off_["free values past any_depth"];
  std::vector<Re> alts = {json_string_regex(), number_regex(true), re_literal("true"), re_literal("false"), re_literal("null")};
  if (depth > 0) {
    Re v = json_value_regex_ws(depth - 1);
    Re member = re_concat({json_string_regex(), ws_, re_byte(':'), ws_, v});
    Re members = re_concat({member, re_star(re_concat({ws_, re_byte(','), ws_, member}))});
    alts.push_back(re_concat({re_byte('{'), ws_, re_optional(members), ws_, re_byte('}')}));
    Re elements = re_concat({v, re_star(re_concat({ws_, re_byte(','), ws_, v}))});
    alts.push_back(re_concat({re_byte('['), ws_, re_optional(elements), ws_, re_byte(']')}));
  } else if (over_) {  // deeper values: containers any_depth levels deeper still (see json_schema.h)
    ++over_changes_;
    alts.push_back(deeper_containers());
  }
  return re_alt(std::move(alts));
}

// Objects and arrays of any values nested up to any_depth levels, exact: what an over-approximation
// holds where its own language stops (a regular language cannot hold every depth).
Re Compiler::deeper_containers() {
  const bool was = over_;
  over_ = false;
  Re v;
  {
    CallsOff scope(*this);  // it goes into a product, and its depth cuts off no valid document
    v = json_value_regex_ws(o_.any_depth + 1);
  }
  over_ = was;
  return v;
}

bool Compiler::value_has_type(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

// enum / const: the compact serialisations of the values (filtered by `type` when given).
Re Compiler::one_of_values(const std::vector<json>& values, const json& s, const std::string& ptr) {
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string())
      types.push_back(s["type"].get<std::string>());
    else if (s["type"].is_array())
      for (const auto& x : s["type"])
        if (x.is_string()) types.push_back(x.get<std::string>());
  }
  std::vector<Re> alts;
  for (const auto& v : values) {
    bool ok = types.empty();
    for (const auto& t : types) ok = ok || value_has_type(v, t);
    if (ok) alts.push_back(re_literal(v.dump()));
  }
  if (alts.empty())
    unsatisfiable(s.contains("const") ? "const" : "enum", ptr, "no value of the enum/const has the schema's type");
  Re exact = re_alt(std::move(alts));
  if (!over_) return exact;
  // Other spellings of the same values: numbers with a fraction or an exponent (or -0), strings
  // with escapes, containers with other key orders or layouts.
  std::vector<Re> more;
  for (const auto& v : values) {
    if (v.is_number()) more.push_back(non_canonical_number(false));
    // A whole number written with a fraction (1.0, -0.0) equals its integer spelling too.
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())
      more.push_back(std::fabs(v.get<double>()) < 1e15 ? re_literal(std::to_string(static_cast<long long>(v.get<double>())))
                                                       : number_regex(true));
    if (v.is_string()) more.push_back(quoted(escaped_content()));
    if (v.is_object() || v.is_array()) more.push_back(deeper_containers());
  }
  return more.empty() ? exact : over_also(exact, re_alt(std::move(more)));
}

Re Compiler::typed(const json& s, const std::string& t, const std::string& ptr) {
  if (t == "__none__") return re_never();  // an allOf whose types do not intersect
  if (t == "null") return re_literal("null");
  if (t == "boolean") return re_alt({re_literal("true"), re_literal("false")});
  if (t == "integer") return integer(s, ptr);
  if (t == "number") return number(s, ptr);
  if (t == "string") return string(s, ptr);
  if (t == "object") return object(s, ptr);
  if (t == "array") return array(s, ptr);
  fail("type", ptr + "/type", "unknown type '" + t + "'");
}

}  // namespace detail

using detail::Compiler;
using detail::json;

Re json_value_regex(int depth) {
  SchemaOptions o;
  o.any_depth = depth;
  return schema_to_regex(json(true), o);
}

// Walked with a stack of its own, before the compiler copies any part of it (a copy recurses per
// level): a value nested past kMaxJsonDepth (core/json_input.h) is refused first.
void check_schema_depth(const nlohmann::ordered_json& schema) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {{&schema, 1}};
  while (!stack.empty()) {
    const auto [j, depth] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    if (depth > kMaxJsonDepth)
      throw SchemaError("", "", "the schema's JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    for (const auto& v : *j) stack.emplace_back(&v, depth + 1);
  }
}

Re schema_to_regex(const nlohmann::ordered_json& schema, const SchemaOptions& options, SchemaNotes* notes) {
  check_schema_depth(schema);
  Compiler c(schema, options);
  Re out = c.compile(schema, "");
  if (notes) c.report(notes);
  return out;
}

std::string describe(const SchemaNotes& n) {
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  if (!n.draft.empty() && n.draft != "2020-12") add("draft " + n.draft);
  auto list = [](const std::map<std::string, int>& m, const char* quote) {
    std::string l;
    int shown = 0;
    for (const auto& [k, c] : m) {
      if (++shown > 8) {
        l += ", +" + std::to_string(m.size() - 8) + " more";
        break;
      }
      l += (l.empty() ? "" : ", ") + std::string(quote) + k + quote + (c > 1 ? " ×" + std::to_string(c) : "");
    }
    return l;
  };
  if (!n.ignored.empty()) add("ignored: " + list(n.ignored, ""));
  if (!n.unasserted_formats.empty()) add("formats not asserted: " + list(n.unasserted_formats, "'"));
  if (!n.validator_decides.empty()) add("left to the validator (not in the mask): " + list(n.validator_decides, ""));
  if (!n.cut_off.empty()) add("cut off: " + list(n.cut_off, ""));
  return out;
}

}  // namespace ib::constrain
