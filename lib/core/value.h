// Parameter values and the schema of the keys an experiment kind accepts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

// The declarations only: nearly every file includes this header, few need JSON itself.
#include <nlohmann/json_fwd.hpp>

namespace ib {

using Value = std::variant<bool, int64_t, double, std::string>;

enum class ParamType {
  Int,      // integer
  Float,    // real number
  Bool,     // true/false
  String,   // free text
  Enum,     // one of `choices`
  Bytes,    // a size: 4096, 64MiB, 80GB
  Seconds,  // a duration: 0.5, 500ms
};

const char* to_string(ParamType t);

struct KeySpec {
  std::string name;
  ParamType type = ParamType::Int;
  std::string doc;
  std::optional<Value> default_value;  // nullopt: the key is required
  std::optional<double> min;           // inclusive bounds for numeric types
  std::optional<double> max;
  std::vector<std::string> choices;  // Enum
  bool sweepable = true;             // may be given as a list (an axis)
};

KeySpec key_spec(std::string name, ParamType type, std::string doc, std::optional<Value> default_value = std::nullopt,
                 std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);

// An Enum key: one of `choices`, default `def`.
KeySpec enum_key(std::string name, std::string doc, std::string def, std::vector<std::string> choices);

// Human form of a value, with the type's units ("1 GiB", "500 ms", "true").
std::string format_value(const Value& v, ParamType t);
// Machine form: the raw value (bytes as an integer, seconds as a number).
nlohmann::json value_to_json(const Value& v);
Value value_from_json(const nlohmann::json& j);
// Numeric view (bool as 0/1); throws std::bad_variant_access for strings.
double as_number(const Value& v);
bool values_equal(const Value& a, const Value& b);
// A key equal for two values exactly when values_equal says so (a hash set's key).
std::string value_identity(const Value& v);

}  // namespace ib
