// The compiler's grammar path (json_schema.h's schema_to_grammar): which subschemas become rules,
// a rule's body compiled once per pointer and schema, the free-value rule, and the driver.
#include "constrain/grammar.h"
#include "constrain/json_schema_internal.h"

namespace ib::constrain::detail {

// A subschema that may hold an object or an array (or refers elsewhere) is a rule; scalars, enums
// and combinators stay inline (a combinator's branches decide for themselves).
bool Compiler::may_nest(const json& raw) {
  for (const char* k : {"$ref", "$dynamicRef", "$recursiveRef"})
    if (raw.contains(k)) return true;
  if (raw.contains("enum") || raw.contains("const")) return false;
  std::vector<std::string> types;
  if (raw.contains("type")) {
    const json& t = raw["type"];
    if (t.is_string()) types.push_back(t.get<std::string>());
    if (t.is_array())
      for (const auto& x : t)
        if (x.is_string()) types.push_back(x.get<std::string>());
  } else {
    types = inferred_types(raw);
  }
  for (const auto& t : types)
    if (t == "object" || t == "array") return true;
  return false;
}

int32_t Compiler::rule_for(const json& raw, const std::string& ptr) {
  // Keyed by the schema's text alone: references resolve against the root whatever the pointer
  // (json_schema_refs.cpp), so equal text is an equal language. A schema that reaches itself
  // through a merged reference (items: {anyOf: [..., {$ref: "#"}]}) is then one recursive rule,
  // not a new rule at each longer pointer.
  std::string key = raw.dump();
  if (auto it = rule_of_.find(key); it != rule_of_.end()) return it->second;
  if (rule_bodies_.size() >= static_cast<size_t>(kMaxGrammarRules))
    beyond("", ptr, "the grammar needs more than " + std::to_string(kMaxGrammarRules) + " rules");
  const auto id = static_cast<int32_t>(rule_bodies_.size());
  rule_bodies_.push_back(re_never());  // a recursive reference calls it before its body is known
  rule_names_.push_back(ptr.empty() ? "/" : ptr);
  const auto at = rule_of_.emplace(std::move(key), id).first;
  // A rule's body is compiled in its own context: the references its callers are inside of do
  // not count toward its recursion bound (recursion through rules is a call, ended by the memo
  // above; expansions within the body, as allOf merges, are still bounded).
  struct FreshRefs {
    Compiler& c;
    std::map<std::string, int> depth;
    int entries;
    explicit FreshRefs(Compiler& x) : c(x), depth(std::move(x.ref_depth_)), entries(x.recursive_entries_) {
      c.ref_depth_.clear();
      c.recursive_entries_ = 0;
    }
    FreshRefs(const FreshRefs&) = delete;
    FreshRefs& operator=(const FreshRefs&) = delete;
    ~FreshRefs() {
      c.ref_depth_ = std::move(depth);
      c.recursive_entries_ = entries;
    }
  } fresh(*this);
  try {
    Re body;
    try {
      body_next_ = true;
      body = compile(raw, ptr);
    } catch (const NeedsInline&) {
      // A product (not, if, oneOf, contains, ...) over languages holding calls: this rule's body
      // is compiled as one regular language, as the whole-schema path does.
      ++inline_only_;
      ++inlined_rules_;
      try {
        body_next_ = true;
        body = compile(raw, ptr);
      } catch (...) {
        --inline_only_;
        throw;
      }
      --inline_only_;
    }
    rule_bodies_[static_cast<size_t>(id)] = body;
  } catch (...) {
    body_next_ = false;
    rule_of_.erase(at);  // its number stays, unused: calls of it were in the failed body only
    throw;
  }
  return id;
}

// Any JSON value at any depth: containers call the rule again for their values.
Re Compiler::any_value_rule() {
  if (any_rule_ >= 0) return re_call(any_rule_);
  if (rule_bodies_.size() >= static_cast<size_t>(kMaxGrammarRules))
    beyond("", "", "the grammar needs more than " + std::to_string(kMaxGrammarRules) + " rules");
  any_rule_ = static_cast<int32_t>(rule_bodies_.size());
  rule_bodies_.push_back(re_never());
  rule_names_.push_back("any value");
  Re v = re_call(any_rule_);
  Re member = re_concat({json_string_regex(), ws_, re_byte(':'), ws_, v});
  Re members = re_concat({member, re_star(re_concat({ws_, re_byte(','), ws_, member}))});
  Re elements = re_concat({v, re_star(re_concat({ws_, re_byte(','), ws_, v}))});
  rule_bodies_[static_cast<size_t>(any_rule_)] =
      re_alt({json_string_regex(), number_regex(true), re_literal("true"), re_literal("false"), re_literal("null"),
              re_concat({re_byte('{'), ws_, re_optional(members), ws_, re_byte('}')}),
              re_concat({re_byte('['), ws_, re_optional(elements), ws_, re_byte(']')})});
  return v;
}

}  // namespace ib::constrain::detail

namespace ib::constrain {

SchemaGrammar schema_to_grammar(const nlohmann::ordered_json& schema, const SchemaOptions& options, SchemaNotes* notes) {
  check_schema_depth(schema);
  detail::Compiler c(schema, options);
  c.use_grammar();
  const int32_t root = c.rule_for(schema, "");
  if (notes) c.report(notes);
  SchemaGrammar out;
  out.grammar = std::make_shared<const Grammar>(build_grammar(c.rule_bodies(), c.rule_names(), root));
  out.inlined_rules = c.inlined_rules();
  return out;
}

}  // namespace ib::constrain
