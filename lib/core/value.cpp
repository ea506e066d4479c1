#include "core/value.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/units.h"

namespace ib {

const char* to_string(ParamType t) {
  switch (t) {
    case ParamType::Int:
      return "integer";
    case ParamType::Float:
      return "number";
    case ParamType::Bool:
      return "boolean";
    case ParamType::String:
      return "string";
    case ParamType::Enum:
      return "choice";
    case ParamType::Bytes:
      return "size";
    case ParamType::Seconds:
      return "duration";
  }
  return "?";
}

KeySpec enum_key(std::string name, std::string doc, std::string def, std::vector<std::string> choices) {
  KeySpec k = key_spec(std::move(name), ParamType::Enum, std::move(doc), Value(std::move(def)));
  k.choices = std::move(choices);
  return k;
}

KeySpec key_spec(std::string name, ParamType type, std::string doc, std::optional<Value> default_value, std::optional<double> min,
                 std::optional<double> max) {
  KeySpec k;
  k.name = std::move(name);
  k.type = type;
  k.doc = std::move(doc);
  k.default_value = std::move(default_value);
  k.min = min;
  k.max = max;
  return k;
}

std::string format_value(const Value& v, ParamType t) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (t == ParamType::Bytes) return format_bytes(as_number(v));
  if (t == ParamType::Seconds) return format_seconds(as_number(v));
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return format_number(std::get<double>(v));
}

nlohmann::json value_to_json(const Value& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

Value value_from_json(const nlohmann::json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  throw std::runtime_error("value_from_json: not a scalar: " + j.dump());
}

double as_number(const Value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::get<double>(v);
}

bool values_equal(const Value& a, const Value& b) {
  const bool as = std::holds_alternative<std::string>(a), bs = std::holds_alternative<std::string>(b);
  if (as || bs) return as && bs && std::get<std::string>(a) == std::get<std::string>(b);
  return as_number(a) == as_number(b);
}

std::string value_identity(const Value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return "s" + *s;
  double d = as_number(v);
  if (d == 0) d = 0;  // -0 equals 0
  uint64_t bits = 0;
  std::memcpy(&bits, &d, sizeof bits);
  return "n" + std::to_string(bits);
}

}  // namespace ib
