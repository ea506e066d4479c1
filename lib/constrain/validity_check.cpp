#include "constrain/validity_check.h"

#include <exception>

#include <nlohmann/json.hpp>

#include "constrain/validator.h"
#include "core/json_input.h"

namespace ib::constrain {

std::function<bool(const std::string&)> validity_check(const CompiledConstraint& c) {
  if (!c.schema) {
    auto dfa = c.dfa;
    return [dfa](const std::string& text) { return dfa->matches(text); };
  }
  auto schema = c.schema;
  Draft draft = Draft::Draft2020_12;
  parse_draft(c.notes.draft, &draft);  // the draft the compiler read it as
  return [schema, draft](const std::string& text) {
    nlohmann::ordered_json doc;
    try {
      doc = parse_json_bounded<nlohmann::ordered_json>(text, "a generated document");
    } catch (const std::exception&) {  // not JSON, or nested past any schema's reach: invalid
      return false;
    }
    return SchemaValidator(*schema, draft).valid(doc);
  };
}

}  // namespace ib::constrain
