// JSON Schema (draft 2020-12, the subset tool-call schemas use) -> a byte-level regular
// expression whose language is the set of JSON documents the generator may emit.
//
// Approximations (documented; all but oneOf keep soundness: every accepted document is valid;
// the constrain-keywords experiment shows each with documents, lib/constrain/keyword_cases.h):
// - objects: properties appear in the schema's order; without additionalProperties (or with
//   false) no other keys appear; with true / a schema, extra keys follow the named ones, are
//   written without escapes and are never one of the named keys;
// - oneOf is treated as anyOf (exclusivity is not enforced): the one exception to soundness,
//   when branches overlap a document matching several is accepted (exact for disjoint branches);
// - strings with `pattern` never contain characters that JSON must escape;
// - numbers: at most 18 integer digits, 18 fraction digits and a 2-digit exponent (what a
//   double can hold); bounded numbers take whole-number bounds and are written without exponent;
// - allOf (and $ref or anyOf beside other keywords) by merging keywords; unmergeable -> refused;
// - formats: date (day 01-31 for every month), time, date-time, uuid, email (a practical subset);
// - recursive $ref: expanded to `max_recursion` levels, deeper branches dropped;
// - true / {} (any value): nested to `any_depth` levels.
// Anything else is refused with a SchemaError naming the keyword and the JSON pointer.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain/regex.h"

namespace ib::constrain {

struct SchemaOptions {
  enum class Whitespace { Compact, Flexible };
  Whitespace whitespace = Whitespace::Compact;  // flexible: up to max_whitespace of [ \n\t] between tokens
  int max_whitespace = 2;
  int max_recursion = 3;
  int any_depth = 2;
};

class SchemaError : public std::runtime_error {
 public:
  SchemaError(const std::string& keyword, const std::string& pointer, const std::string& what)
      : std::runtime_error("schema " + (pointer.empty() ? std::string("/") : pointer) + ": " + what), keyword_(keyword),
        pointer_(pointer) {}
  const std::string& keyword() const { return keyword_; }
  const std::string& pointer() const { return pointer_; }

 private:
  std::string keyword_, pointer_;
};

Re schema_to_regex(const nlohmann::ordered_json& schema, const SchemaOptions& options = {});

// Pieces other constraints reuse.
Re json_string_regex();             // any JSON string, quotes included
Re json_value_regex(int depth);     // any JSON value nested at most `depth` levels
// Decimal integers in [lo, hi] (no leading zeros, "-0" excluded); bounds may be INT64 limits.
Re integer_range_regex(int64_t lo, int64_t hi);

}  // namespace ib::constrain
