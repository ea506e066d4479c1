// The JSON Schema compiler's internals, shared by its files: json_schema.cpp (the dispatch), _refs, _allof,
// _numbers, _strings, _objects and _arrays (one part of the language each). Not a public interface.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/automaton.h"
#include "constrain/json_schema.h"
#include "constrain/regex.h"
#include "constrain/schema_dialect.h"

namespace ib::constrain::detail {

using json = nlohmann::ordered_json;

// json_schema_numbers.cpp
ByteSet range_set(char a, char b);
Re number_regex(bool allow_negative);
uint64_t gcd_u64(uint64_t x, uint64_t y);
// json_schema_strings.cpp
const std::vector<CodePointRange>& raw_string_chars();
Re raw_string_char();
// Whether JSON must escape byte b in a string (a quote, a backslash, a control character).
bool must_escape(int b);
Re escaped_content();
Re spelt_content_with_quote();
Re quoted(Re inner);
// json_schema.cpp
std::string escape_pointer(const std::string& key);
const std::set<std::string>& supported();
// The JSON types a type keyword names (integer within number), and the one type a keyword
// constrains (properties: object, minLength: string, ...; nullptr for keywords of every type).
const std::vector<std::string>& json_types();
const char* keyword_type(const std::string& keyword);

class Compiler {
 public:
  Compiler(const json& root, const SchemaOptions& o);

  void report(SchemaNotes* notes) const;

  Re compile(const json& raw, const std::string& ptr);

  // The grammar path (schema_to_grammar): subschemas that may nest (objects, arrays, references,
  // free values) become rules called from their value positions instead of being inlined, so the
  // structure lives in the parser's stack; rule_for compiles `raw` as a rule's body (once per
  // pointer and schema) and returns its number.
  void use_grammar() { grammar_ = true; }
  int32_t rule_for(const json& raw, const std::string& ptr);
  const std::vector<Re>& rule_bodies() const { return rule_bodies_; }
  const std::vector<std::string>& rule_names() const { return rule_names_; }
  int inlined_rules() const { return inlined_rules_; }

 private:
  // Thrown by product() when a language it combines holds calls (a product of rule calls is not
  // the product of their languages): the rule being compiled is compiled again inline.
  struct NeedsInline {};
  bool grammar_ = false;
  int inline_only_ = 0;     // > 0: no calls (a rule compiled inline, an over-approximation)
  bool body_next_ = false;  // the next compile() is a rule's body: not a call of it
  std::vector<Re> rule_bodies_;
  std::vector<std::string> rule_names_;
  std::map<std::string, int32_t> rule_of_;  // schema text -> rule
  int32_t any_rule_ = -1;
  int inlined_rules_ = 0;
  bool calls_allowed() const { return grammar_ && !over_ && inline_only_ == 0; }
  // While in scope: no calls (the language goes into a product), and what it cuts off is not
  // counted (only part of it is used: an over-approximation's depth, the strings of propertyNames).
  class CallsOff {
   public:
    explicit CallsOff(Compiler& c) : c_(c), cut_(c.cut_off_) { ++c_.inline_only_; }
    CallsOff(const CallsOff&) = delete;
    CallsOff& operator=(const CallsOff&) = delete;
    ~CallsOff() {
      --c_.inline_only_;
      c_.cut_off_ = cut_;
    }

   private:
    Compiler& c_;
    std::map<std::string, int> cut_;
  };
  static bool may_nest(const json& raw);
  Re any_value_rule();

  const json& root_;
  SchemaOptions o_;
  Re ws_;
  Draft draft_ = Draft::Draft2020_12;
  std::map<std::string, std::set<std::string>> ignored_, unasserted_, by_validator_;  // key / format -> pointers
  std::map<std::string, int> ref_depth_;
  // validator_fallback: (pointer, over-approximation?) -> (schema object, what it widened to).
  std::map<std::pair<std::string, bool>, std::vector<std::pair<json, json>>> widened_at_;
  std::map<std::string, int> cut_off_;  // SchemaNotes::cut_off
  int recursive_entries_ = 0;           // re-entered references on the current path
  int depth_ = 0;                       // compile() calls on the current path
  int64_t steps_ = 0;                   // compile() calls in all

  // The references a compile is inside of, left when the scope ends. A deeper level of a
  // recursive schema is dropped (enter() is false): past max_recursion re-entries of one
  // reference, or of all references together on the way here (schemas whose definitions refer to
  // one another would otherwise nest max_recursion levels per definition: exponentially).
  class RefScope {
   public:
    explicit RefScope(Compiler& c) : c_(c) {}
    RefScope(const RefScope&) = delete;
    RefScope& operator=(const RefScope&) = delete;
    ~RefScope() {
      for (const auto& [key, recursive] : entered_) {
        --c_.ref_depth_[key];
        c_.recursive_entries_ -= recursive;
      }
    }
    bool enter(const std::string& key) {
      int& depth = c_.ref_depth_[key];
      if (depth > c_.o_.max_recursion || (depth > 0 && c_.recursive_entries_ >= c_.o_.max_recursion)) return false;
      const bool recursive = depth > 0;
      ++depth;
      c_.recursive_entries_ += recursive;
      entered_.emplace_back(key, recursive);
      return true;
    }

   private:
    Compiler& c_;
    std::vector<std::pair<std::string, bool>> entered_;
  };

  // Compiling a oneOf branch as an over-approximation: every valid document in every spelling a
  // compiled language may write is held (see json_schema.h); over_changes_ counts the places where
  // that differs from the exact compile, so an unchanged branch reuses its exact language.
  bool over_ = false;
  int over_changes_ = 0;

  // A schema's exact language (documents valid by it, in the spellings the compiler writes) and
  // its over-approximation (as oneOf subtracts other branches), whichever mode is on: for not and if.
  Re exact(const json& s, const std::string& ptr) { return in_mode(false, s, ptr); }
  Re looser(const json& s, const std::string& ptr) { return in_mode(true, s, ptr); }

  [[noreturn]] static void fail(const std::string& keyword, const std::string& ptr, const std::string& what) {
    throw SchemaError(keyword, ptr, what);
  }
  // No value satisfies the subschema at ptr (SchemaError::unsatisfiable).
  [[noreturn]] static void unsatisfiable(const std::string& keyword, const std::string& ptr, const std::string& what) {
    throw SchemaError(keyword, ptr, what, false, false, true);
  }
  // A refusal for want of capability, not of a valid schema (SchemaError::beyond).
  [[noreturn]] static void beyond(const std::string& keyword, const std::string& ptr, const std::string& what) {
    throw SchemaError(keyword, ptr, what, true);
  }
  // validator_fallback: `s` without the keyword a beyond() refusal at `e` names (a superset of its
  // documents), or nothing where the refusal is not this object's to widen.
  std::optional<json> widened(const json& s, const std::string& ptr, const SchemaError& e) const;
  Re compile_read(const json& s, const std::string& ptr);

  // json_schema.cpp: reading a schema object, the modes, products, any value, enum/const
  json read(const json& raw, const std::string& ptr);
  Re in_mode(bool over, const json& s, const std::string& ptr);
  static json strict_if_schema(json i);
  Re over_also(Re exact, Re more);
  Re product(const std::vector<Re>& langs, ProductRule rule, const std::string& keyword, const std::string& ptr,
             const std::string& what);
  static std::vector<std::string> inferred_types(const json& s);
  Re json_value_regex_ws(int depth);
  Re deeper_containers();
  static bool value_has_type(const json& v, const std::string& t);
  Re one_of_values(const std::vector<json>& values, const json& s, const std::string& ptr);
  Re typed(const json& s, const std::string& t, const std::string& ptr);

  // json_schema_disjoint.cpp: oneOf branches no document satisfies two of (then a union suffices)
  struct Facts;
  void gather(const json& raw, Facts& f, int depth);
  bool disjoint(const Facts& a, const Facts& b, int depth);
  bool disjoint_here(const Facts& a, const Facts& b, int depth);
  bool vacuous_for(const json& raw, const std::set<std::string>& types, int depth);
  bool branches_disjoint(const json& branches, const json& siblings);
  bool facts_unsatisfiable(const std::vector<json>& parts);
  std::optional<Re> exactly_one_by_negation(const json& list, const std::vector<size_t>& live, const std::vector<Facts>& facts,
                                            const json& siblings, const json& by_type, const std::string& ptr);
  std::optional<Re> one_of_by_type(const json& list, const json& siblings, const std::string& ptr);

  // json_schema_negation.cpp: not S as a union of schemas (nullopt where S is beyond the rewrite),
  // and rest ∧ ¬S compiled as that union merged with rest
  std::optional<std::vector<json>> negation(const json& raw, int depth, int* dropped,
                                            const std::set<std::string>* context_keys = nullptr);
  std::optional<std::vector<json>> union_of_negation(const json& raw, const std::set<std::string>* context_keys = nullptr);
  static bool scalar_types_only(const json& s);
  std::optional<Re> conjoined_negation(const std::vector<json>& rest, const json& negated, const std::string& ptr);

  // json_schema_refs.cpp
  std::string base_uri() const;
  static const json* find_anchor(const json& node, const std::string& name, int depth);
  json resolve(const json& r, const std::string& ptr);
  Re ref(const json& r, const std::string& ptr);

  // json_schema_allof.cpp
  Re compile_conjunction(std::vector<json> conjuncts, const std::string& ptr);
  template <typename ObjectPart>
  static void merge_additional_properties(json& merged, const std::vector<ObjectPart>& objects, const std::string& ptr);
  template <typename ArrayPart>
  static void merge_items(json& merged, const std::vector<ArrayPart>& arrays);
  static void merge_keyword(json& m, const std::string& k, const json& v, const std::string& ptr);

  // json_schema_numbers.cpp
  static std::optional<double> num(const json& s, const char* k, const std::string& ptr);
  struct MultipleOf;
  Re integer(const json& s, const std::string& ptr);
  MultipleOf multiple_of(const json& s, const std::string& ptr) const;
  Re multiple_of_language(uint64_t a, int k, const std::string& ptr) const;
  Re integer_multiples(int64_t lo, int64_t hi, uint64_t step, const std::string& ptr);
  static Re short_numeral();
  struct Bound;
  Re number(const json& s, const std::string& ptr);
  static Re frac_any();
  static Re frac_zero();
  static Re frac_nonzero();
  static Re unsigned_number_range(const Bound& lo, const Bound& hi);
  static Re signed_number_range(const Bound& lo, const Bound& hi);
  static Re non_canonical_number(bool integral);

  // json_schema_strings.cpp
  Re format(const json& s, const std::string& ptr);
  static int length_bound(const json& s, const char* k, const std::string& ptr);
  Re string(const json& s, const std::string& ptr);

  // json_schema_objects.cpp
  Re member(const std::string& key, Re value);
  struct PatternProperty;
  std::vector<PatternProperty> pattern_properties(const json& s, const std::string& ptr);
  Re object(const json& s, const std::string& ptr);
  Re object_over(const std::vector<std::pair<std::string, Re>>& props, const std::set<std::string>& required, const Re& extra,
                 const std::string& ptr);

  // json_schema_arrays.cpp
  Re array(const json& s, const std::string& ptr);
  std::optional<std::vector<json>> finite_values(const json& raw, int depth);
  Re unique_enum_array(const std::vector<json>& values, int mn, int mx, const Re& comma, const Re& item, const std::string& ptr);
  void unique_prefix_items(const json& s, int longest, const std::string& ptr);
  Re array_contains(const json& s, const std::vector<Re>& prefix, const Re& item, int mn, int mx, const std::string& ptr);
};

}  // namespace ib::constrain::detail
