// The per-keyword completeness table of the JSON Schema compiler (issue #6's keyword list), shared
// by the `constrain-keywords` experiment and tests/unit/test_json_schema.cpp.
//
// A supported keyword is a small bundled case: a schema (or a regex: / choice: constraint),
// hand-written documents that are valid and invalid, and documents that are valid by the schema
// but outside the compiled language by design (json_schema.h's documented approximations: key
// order, compact layout, no escapes where a pattern applies, ...). The check compiles the case to
// a DFA and asks an oracle that does not share code with the compiler (SchemaValidator for
// schemas, std::regex for regex:, plain membership for choice:):
//   - the DFA accepts every valid document and rejects every invalid one;
//   - it rejects every by-design document (one it accepts means the approximation is gone and
//     the case is stale);
//   - N random walks through the DFA parse with nlohmann_json and satisfy the schema;
//   - the oracle agrees with the hand-written labels (a mislabelled case is a failure too).
// An unsupported keyword is a schema that must be refused with a SchemaError naming the keyword
// and the JSON pointer, in its fields and in its message.
//
// The cases live in code (keyword_cases.cpp), rather than in a data file: the unit tests and the
// experiment read one table, and the binary needs no file at run time to check its own compiler.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/json_schema.h"

namespace ib::constrain {

struct KeywordCase {
  std::string name;                    // the row: "type-null", "additionalProperties-schema", "regex", ...
  std::string constraint;              // JSON Schema text, or "regex:PATTERN" / "choice:a|b|c"
  std::vector<std::string> valid;      // the DFA must accept them (compact, keys in schema order)
  std::vector<std::string> invalid;    // the oracle rejects them; the DFA must too
  std::vector<std::string> by_design;  // the oracle accepts them; the DFA rejects them by design
  SchemaOptions options = {};
};

struct RefusalCase {
  std::string name;  // the row: "dependentSchemas", "$ref-remote", ...
  std::string schema;
  std::string keyword;  // the keyword the error must name
  std::string pointer;  // the JSON pointer it must name
};

SchemaOptions flexible_whitespace();
SchemaOptions open_properties();
SchemaOptions recursion(int levels);

// One row per supported keyword of the list (type ×7, properties, required,
// additionalProperties, items, prefixItems, minItems/maxItems, enum, const, anyOf/oneOf,
// minLength/maxLength, pattern, integer minimum/maximum, format ×4, $ref/$defs, nullable, not, if/then/else,
// whitespace), a few the compiler supports beyond it (min/maxProperties, dependentRequired,
// propertyNames, patternProperties, contains/minContains/maxContains, uniqueItems where regular,
// multipleOf), and the regex: / choice: constraints.
const std::vector<KeywordCase>& keyword_cases();
// One row per unsupported keyword: the schema must be refused, naming the keyword and where.
const std::vector<RefusalCase>& refusal_cases();
const KeywordCase* find_keyword_case(const std::string& name);
const RefusalCase* find_refusal_case(const std::string& name);
// Every row name: the supported keywords, then the refused ones.
std::vector<std::string> keyword_case_names();

// The oracle: does `doc` satisfy the constraint? Independent of the regex engine and the DFA.
class KeywordOracle {
 public:
  explicit KeywordOracle(const std::string& constraint);
  // Schemas: the document must parse with nlohmann_json (`*why` says so when it does not).
  bool valid(const std::string& doc, std::string* why = nullptr) const;

 private:
  enum class Kind { Schema, Regex, Choice };
  struct Pattern;  // std::regex, kept out of this header (its templates are slow to compile)
  Kind kind_ = Kind::Schema;
  nlohmann::ordered_json schema_;
  std::shared_ptr<const Pattern> regex_;
  std::set<std::string> choices_;
};

// A document as a row's note shows it: control and non-ASCII bytes as \xHH, long ones cut.
std::string show_document(const std::string& doc, size_t max_bytes = 60);

struct KeywordReport {
  bool compiled = false;
  int32_t dfa_states = 0;
  int valid_accepted = 0, valid_docs = 0;
  int invalid_rejected = 0, invalid_docs = 0;
  int by_design_rejected = 0, by_design_docs = 0;
  int walks_valid = 0, walks = 0;
  int mislabelled = 0;                // hand-written documents the oracle disagrees with
  std::vector<std::string> problems;  // what went wrong, first ones first

  int disagreements() const {
    return (compiled ? 0 : 1) + (valid_docs - valid_accepted) + (invalid_docs - invalid_rejected) +
           (by_design_docs - by_design_rejected) + (walks - walks_valid) + mislabelled;
  }
  bool ok() const { return disagreements() == 0; }
  std::string summary() const;  // the counts, then the first problems
};

// Compiles the case and checks it against the oracle (see the top of this file); `walks`
// random documents from the DFA, drawn with generate.h's random_document from `seed`.
KeywordReport check_keyword_case(const KeywordCase& c, int walks, uint64_t seed);

struct RefusalOutcome {
  bool ok = false;
  std::string message;  // the compiler's error when ok, else what went wrong
};

// The schema must be refused with a SchemaError whose keyword and pointer are the expected ones
// and whose message names both.
RefusalOutcome check_refusal(const RefusalCase& c);

}  // namespace ib::constrain
