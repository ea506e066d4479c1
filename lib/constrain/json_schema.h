// JSON Schema (draft 2020-12, the subset tool-call schemas use) -> a byte-level regular
// expression whose language is the set of JSON documents the generator may emit.
//
// Approximations (documented; they keep soundness: every accepted document is valid; the
// constrain-keywords experiment shows each with documents, lib/constrain/keyword_cases.h):
// - objects: properties appear in the schema's order; without additionalProperties (or with
//   false) no other keys appear; with true / a schema, extra keys follow the named ones, are
//   written without escapes and are never one of the named keys;
// - oneOf: a document of exactly one branch's language that no other branch accepts, by product
//   construction (automaton.h's product_dfa, ExactlyOne). The other branches are subtracted as
//   over-approximations (numbers in every spelling, strings with escapes, objects with members in
//   any order, required keys as their quoted names, any-value and recursion cut-offs as values
//   any_depth + 1 levels deeper; past the product cap, only the first half of the required keys,
//   halved again until it fits), so a document valid for two branches is not accepted as long as
//   its values nest no deeper than that; a document the over-approximation of another branch
//   holds but that branch rejects is lost (by design). Branches that keywords alone show no document
//   satisfies two of (distinct types or const/enum values, or a required discriminator key whose
//   values differ: json_schema_disjoint.cpp) are united instead, and then nothing is lost;
// - over-approximations hold, where a schema has no `type`, values of every type (a keyword
//   constrains only its own type);
// - not: S beside other keywords: the rest of the schema minus S's over-approximation (the same
//   one oneOf subtracts), so no document satisfies S; a document S's over-approximation holds but
//   S rejects (another spelling of a value, members in another order, ...) is lost (by design);
//   two nots merged by allOf are not of their anyOf;
// - if: I, then: T, else: E (then/else default to any value): (rest ∧ T) ∩ I compiled exactly
//   (with any other keys where I's top-level properties stand without additionalProperties, and
//   values of every type where I has no type), united with (rest ∧ E) minus I's
//   over-approximation; lost by design: documents valid by I outside that exact language (other
//   layouts, key orders, spellings) and documents not valid by I that I's over-approximation holds;
//   if/then/else from different allOf members are refused;
// - inside an over-approximation (a oneOf branch, a negated schema, an if) the roles swap: not S is
//   rest's over-approximation minus S's exact language, if/then/else is (rest ∧ T)'s
//   over-approximation ∩ I's, united with (rest ∧ E)'s minus I's exact language. As for oneOf, values
//   nested deeper than the over-approximation's any_depth + 1 levels are not subtracted;
// - a string under a `pattern` alone is written as JSON writers write it: the characters JSON
//   must escape (" \ and the controls) as their mandatory escapes (\" \\ \b \f \n \r \t, else
//   \u00xx), the others raw (other escapes, e.g. \u0061 for a, are lost by design); with `format`
//   or minLength/maxLength, never a character that JSON must escape; pattern, format and
//   minLength/maxLength (code points) together: the intersection, by product construction;
// - numbers: at most 18 integer digits, 18 fraction digits and a 2-digit exponent (what a
//   double can hold); bounded numbers take whole-number bounds and are written without exponent;
// - multipleOf (a positive decimal a / 10^k of at most 18 digits): integers in their canonical
//   spelling that are multiples, by a remainder automaton (a states) intersected with the bounds
//   (listed when the bounds leave fewer than 256); numbers written without exponent and with at
//   most 15 digits (so the double a parser reads has the value written), a multiple iff the
//   fraction digits past the k-th are zeros and the rest is 0 mod a; an automaton above
//   max_product_states (a·(k + 3) states) is refused; two whole multipleOf in allOf: their lcm;
// - minProperties/maxProperties: the members are counted as they are chosen; extra keys count
//   toward maxProperties, but at most one toward minProperties (extra keys may repeat one another
//   and a parser keeps one of them: a regular language cannot keep them apart); maxProperties
//   above 64 where extra keys may appear is refused;
// - dependentRequired: the presence of the properties it relates (at most 12) is tracked while
//   members are chosen; a name it mentions that properties does not declare becomes an optional
//   property whose value follows the patterns that match it, else additionalProperties;
// - propertyNames: extra keys are intersected with its exact language; a declared name its
//   automaton rejects (as a compact JSON string) is left out, a required one refused;
// - patternProperties: extra keys a pattern matches take its schema, other extra keys
//   additionalProperties' (only with additionalProperties, as above); a declared name a pattern
//   matches takes both schemas (allOf); patterns whose (unescaped) keys overlap are refused;
// - contains/minContains/maxContains: each item is a hit (its language ∩ contains' exact one) or a
//   miss (its language minus contains' over-approximation), the hits counted up to the bounds (at
//   most 32; with maxItems, positions × counts at most 4096); an item contains holds in another
//   spelling is neither and is lost (by design);
// - uniqueItems over items of a finite enumeration (enum, const, boolean; at most 64 values): each
//   value at most once, written in the enumeration's order; otherwise, with
//   unique_items_by_validator, the items are compiled without it and a validator decides;
// - uniqueItems: true where at most one item is allowed, or every item is a prefixItems entry
//   (items: false or maxItems) and no entry's exact language meets another's over-approximation
//   (so no two items can be equal values); refused otherwise;
// - in an over-approximation, min/maxProperties, dependentRequired, propertyNames, contains and
//   uniqueItems are left out, and keys a pattern matches take any value;
// - allOf (and $ref or anyOf beside other keywords) by merging keywords; unmergeable -> refused;
// - validator_fallback: a refusal for want of capability (SchemaError::beyond: the caps, lookaround,
//   overlapping patternProperties, an unmergeable allOf, ...) compiles that schema object without
//   the keyword (oneOf as anyOf, if/then/else and contains with their partners, patternProperties
//   as additionalProperties: true), a superset, and records it in SchemaNotes::validator_decides: the
//   finished document is then checked by the validator (validator.h), which must read the keyword
//   (a pattern std::regex cannot parse stays refused);
// - drafts: `$schema` decides (4, 6, 7, 2019-09, 2020-12; none: 2020-12, or SchemaOptions::draft);
//   each schema object is read in 2020-12 spelling (schema_dialect.h); keys that are not keywords
//   of the draft (x-*, vendor keys, annotations) are ignored and reported in SchemaNotes;
// - formats: schema_formats.h (exact or a documented subset, never an invalid value); integer
//   formats (int32, ...) bound integers; a format it does not know is not asserted (reported);
// - dependentSchemas (and draft 4-7 `dependencies` of schemas): each dependency splits the
//   object's language in two, the key present (with the dependent schema merged in) or absent; at
//   most 6 per schema object (64 cases);
// - recursive $ref: expanded to `max_recursion` levels, deeper branches dropped;
// - true / {} (any value): nested to `any_depth` levels.
// - absent additionalProperties: no other keys (strict_properties, the default: a model writes the
//   declared keys only, as XGrammar's strict mode does) or any other keys with any values (the
//   JSON Schema meaning, strict_properties = false).
// Anything else (unevaluatedProperties, $dynamicRef, remote references, ...) is refused with a
// SchemaError naming the keyword and the JSON pointer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain/regex.h"

namespace ib::constrain {

struct Grammar;  // grammar.h

struct SchemaOptions {
  enum class Whitespace { Compact, Flexible };
  Whitespace whitespace = Whitespace::Compact;  // flexible: up to max_whitespace of [ \n\t] between tokens
  int max_whitespace = 2;
  int max_recursion = 3;
  int any_depth = 2;
  // Cap on the states of each product automaton (pattern ∩ lengths ∩ format, oneOf): past it the
  // schema is refused naming the keyword and the JSON pointer.
  int64_t max_product_states = 200'000;
  // Absent additionalProperties: true = no keys but the declared ones, and a schema without `type`
  // takes the type its keywords imply (XGrammar's strict mode: what a model should write); false =
  // the JSON Schema meaning: any other keys, and without `type` values of every type (a keyword
  // constrains its own type only).
  bool strict_properties = true;
  // With strict_properties, an object that declares no properties and no patternProperties still
  // takes any keys (the JSON Schema meaning) when this is true: a tool call's
  // `"arguments": {"type": "object"}` and response_format json_object would otherwise allow only
  // `{}`. The server sets it; the experiments keep XGrammar's strict meaning.
  bool open_undeclared_objects = false;
  // Subschema compiles for the whole schema (each is one compile() of an object): past it the
  // schema is refused, so that a compile never runs for minutes.
  int64_t max_compile_steps = 5'000;
  // CPU seconds a compile (constraint.h's compile_schema: the schema to its DFA or its grammar) may
  // take; past it the schema is refused naming max_compile_seconds. 0: no budget.
  double max_compile_seconds = 0;
  // uniqueItems over items that are no finite enumeration: refused (false), or left to a
  // validator pass on the finished document (true; reported in SchemaNotes, the mask alone is then
  // not sound for it).
  bool unique_items_by_validator = false;
  // A keyword beyond what the mask holds exactly (SchemaError::beyond: a oneOf or pattern product
  // past max_product_states, a pattern with lookaround, overlapping patternProperties, an allOf it
  // cannot merge, ...): refused (false), or compiled as the schema object without it (a superset
  // of its documents) and left to a validator pass on the finished document (true; reported in
  // SchemaNotes::validator_decides with the pointer count, the mask alone is then not sound).
  // Implies unique_items_by_validator. Malformed or unsatisfiable schemas are refused either way.
  bool validator_fallback = false;
  // The draft when the schema's $schema names none ("" = 2020-12; "4", "6", "7", "2019-09").
  std::string default_draft;
};

// What the compiler read past: reported in a row's note.
struct SchemaNotes {
  std::string draft;                              // the draft the schema was read as
  std::map<std::string, int> ignored;             // ignored key -> schema objects it was in
  std::map<std::string, int> unasserted_formats;  // formats not known -> schema objects
  std::map<std::string, int> validator_decides;   // keywords compiled as if absent, checked after generation
  // Where a regular language cut valid documents off (free values past any_depth, a recursive $ref
  // past max_recursion) -> times: the grammar path has none where it keeps the rules apart.
  std::map<std::string, int> cut_off;
};
// One line for a note ("draft 7; ignored: x-order ×3, self; format 'foo' not asserted"), "" when
// there is nothing to say beyond 2020-12.
std::string describe(const SchemaNotes& notes);

class SchemaError : public std::runtime_error {
 public:
  // `beyond`: the schema is well formed but past what the mask can hold exactly (a cap, a regex
  // feature, a combination the compiler does not merge), as opposed to malformed or unsatisfiable:
  // only such a refusal may fall back to the validator (SchemaOptions::validator_fallback).
  // `cap`: a beyond refusal because an automaton passed a size limit (compiling the same part again
  // passes it again). `unsatisfiable`: no value satisfies the subschema at `pointer` (an enum or
  // const outside its type, allOf members with no value in common): where that subschema is an
  // optional property's, the property cannot appear and the schema is still satisfiable.
  SchemaError(const std::string& keyword, const std::string& pointer, const std::string& what, bool beyond = false,
              bool cap = false, bool unsatisfiable = false)
      : std::runtime_error("schema " + (pointer.empty() ? std::string("/") : pointer) + ": " + what),
        keyword_(keyword),
        pointer_(pointer),
        beyond_(beyond || cap),
        cap_(cap),
        unsatisfiable_(unsatisfiable) {}
  const std::string& keyword() const { return keyword_; }
  const std::string& pointer() const { return pointer_; }
  bool beyond() const { return beyond_; }
  bool cap() const { return cap_; }
  bool unsatisfiable() const { return unsatisfiable_; }

 private:
  std::string keyword_, pointer_;
  bool beyond_ = false, cap_ = false, unsatisfiable_ = false;
};

// `notes`, when given, receives what was ignored (see SchemaNotes).
Re schema_to_regex(const nlohmann::ordered_json& schema, const SchemaOptions& options = {}, SchemaNotes* notes = nullptr);

// The grammar path (grammar.h): the same language, but subschemas that may nest (objects, arrays,
// references) and free values are rules called from their value positions, so recursive $ref is
// not expanded (max_recursion does not apply) and a free value is any JSON value at any depth
// (any_depth does not apply). A rule whose body needs a product (oneOf over overlapping branches,
// not, if/then/else, contains, ...) is compiled as one regular language, as the whole-schema path
// compiles it (inlined_rules counts them); the caps then apply to that rule alone.
struct SchemaGrammar {
  std::shared_ptr<const Grammar> grammar;
  int inlined_rules = 0;
};
SchemaGrammar schema_to_grammar(const nlohmann::ordered_json& schema, const SchemaOptions& options = {},
                                SchemaNotes* notes = nullptr);
// Which automaton a schema compiles to: one DFA (schema_to_regex), the grammar (schema_to_grammar),
// or Auto: the DFA where it compiles and cuts no valid document off (SchemaNotes::cut_off), else
// the grammar (constraint.h's compile_schema).
enum class SchemaPath { Dfa, Grammar, Auto };

// Refuses a schema whose JSON nests past kMaxJsonDepth (before any recursive copy of it).
void check_schema_depth(const nlohmann::ordered_json& schema);

// Pieces other constraints reuse.
Re json_string_regex();          // any JSON string, quotes included
Re json_value_regex(int depth);  // any JSON value nested at most `depth` levels
// Decimal integers in [lo, hi] (no leading zeros, "-0" excluded); bounds may be INT64 limits.
Re integer_range_regex(int64_t lo, int64_t hi);

}  // namespace ib::constrain
