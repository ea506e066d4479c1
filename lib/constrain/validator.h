// An independent JSON Schema validator for the keywords the compiler supports: the oracle that
// generated documents are checked against (tests and the validity experiment). Written from the
// specification, not from the compiler, so the two can disagree when one is wrong. Patterns use
// std::regex (ECMAScript) on the UTF-8 bytes; formats are parsed (format_check.h). Drafts are read
// as schema_dialect.h spells them (shared with the compiler: the golden labels of the
// JSON-Schema-Test-Suite's drafts and of the jsonschema package check that part).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "constrain/schema_dialect.h"

namespace ib::constrain {

class SchemaValidator {
 public:
  using json = nlohmann::ordered_json;
  // `default_draft`: the draft where the root's $schema names none.
  explicit SchemaValidator(const json& root, Draft default_draft = Draft::Draft2020_12) : root_(root), draft_(default_draft) {
    try {
      if (root.is_object() && root.contains("$schema")) draft_ = draft_of(root);
    } catch (const std::exception&) {
    }
  }

  // The validator keeps a reference to its root: a temporary would dangle (and accept anything).
  explicit SchemaValidator(json&& root, Draft default_draft = Draft::Draft2020_12) = delete;

  bool valid(const json& doc) const { return check(root_, doc); }
  // A subschema of the root (its references resolve in the root).
  bool valid_at(const json& schema, const json& doc) const { return check(schema, doc); }
  // The schema a reference names ("#/...", "#anchor", after the root's $id); `false` when none.
  const json& target(const std::string& ref) const { return resolve(ref); }
  Draft draft() const { return draft_; }

 private:
  const json& root_;
  Draft draft_;

  static size_t code_points(const std::string& s);

  // Instance equality (enum, const): objects compare as unordered maps, numbers by value (1 == 1.0);
  // ordered_json's own == would compare object members in document order.
  static bool same(const json& a, const json& b);

  static bool has_type(const json& v, const std::string& t);

  // A number's value as decimal digits × 10^exp10, the digits without leading or trailing zeros
  // ("" for zero): integers as parsed, doubles by their shortest spelling that reads back the same
  // double (the decimal a document wrote, when it had at most 15 digits).
  struct Decimal {
    std::string digits;
    int exp10 = 0;
  };
  static Decimal decimal(const json& v);

  // multipleOf in decimal arithmetic: x = X·10^p, m = M·10^q (X, M without trailing zeros), x / m
  // = (X / M)·10^(p - q) is whole iff p >= q and X·10^(p - q) = 0 mod M (for p < q, X would need
  // the factor 10 it does not have).
  static bool multiple_of(const json& x, const json& m);

  // A plain-name fragment: the subschema whose $anchor is the name, or whose $id / id is "#name".
  static const json* anchor(const json& node, const std::string& name);

  const json& resolve(std::string ref) const;

  bool check(const json& raw, const json& v) const;
};

}  // namespace ib::constrain
