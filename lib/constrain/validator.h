// An independent JSON Schema validator for the keywords the compiler supports: the oracle that
// generated documents are checked against (tests and the validity experiment). Written from the
// specification, not from the compiler, so the two can disagree when one is wrong. Patterns use
// std::regex (ECMAScript) on the UTF-8 bytes.
#pragma once

#include <cmath>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

namespace ib::constrain {

class SchemaValidator {
 public:
  using json = nlohmann::ordered_json;
  explicit SchemaValidator(const json& root) : root_(root) {}

  bool valid(const json& doc) const { return check(root_, doc); }

 private:
  const json& root_;

  static size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }

  // Instance equality (enum, const): objects compare as unordered maps, numbers by value (1 == 1.0);
  // ordered_json's own == would compare object members in document order.
  static bool same(const json& a, const json& b) {
    if (a.is_object() && b.is_object()) {
      if (a.size() != b.size()) return false;
      for (const auto& [k, x] : a.items())
        if (!b.contains(k) || !same(x, b[k])) return false;
      return true;
    }
    if (a.is_array() && b.is_array()) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i)
        if (!same(a[i], b[i])) return false;
      return true;
    }
    return a == b;
  }

  static bool has_type(const json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (t == "number") return v.is_number();
    if (t == "string") return v.is_string();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    return false;
  }

  const json& resolve(const std::string& ref) const {
    const json* node = &root_;
    std::string p = ref.substr(1);
    size_t pos = 1;
    while (!p.empty() && pos <= p.size()) {
      size_t next = p.find('/', pos);
      std::string key = p.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      node = node->is_array() ? &(*node)[std::stoul(key)] : &(*node)[key];
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return *node;
  }

  static bool is_date(const std::string& s) {
    static const std::regex re("^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$");
    return std::regex_match(s, re);
  }

  static bool format_ok(const std::string& f, const std::string& s) {
    static const std::regex time("^([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$");
    static const std::regex uuid("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$");
    static const std::regex email("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$");
    if (f == "date") return is_date(s);
    if (f == "time") return std::regex_match(s, time);
    if (f == "date-time") {
      if (s.size() < 11 || (s[10] != 'T' && s[10] != 't')) return false;
      return is_date(s.substr(0, 10)) && std::regex_match(s.substr(11), time);
    }
    if (f == "uuid") return std::regex_match(s, uuid);
    if (f == "email") return std::regex_match(s, email);
    return true;
  }

  bool check(const json& s, const json& v) const {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return check(resolve(s["$ref"].get<std::string>()), v);
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) ok = has_type(v, s["type"].get<std::string>());
      else
        for (const auto& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
      if (s.contains("nullable") && s["nullable"] == true) ok = ok || v.is_null();
      if (!ok) return false;
    }
    if (s.contains("enum")) {
      bool ok = false;
      for (const auto& e : s["enum"]) ok = ok || same(e, v);
      if (!ok) return false;
    }
    if (s.contains("const") && !same(s["const"], v)) return false;
    if (s.contains("anyOf")) {
      bool ok = false;
      for (const auto& x : s["anyOf"]) ok = ok || check(x, v);
      if (!ok) return false;
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const auto& x : s["oneOf"]) n += check(x, v);
      if (n != 1) return false;
    }
    if (s.contains("allOf"))
      for (const auto& x : s["allOf"])
        if (!check(x, v)) return false;
    if (s.contains("not") && check(s["not"], v)) return false;
    if (s.contains("if")) {
      const char* branch = check(s["if"], v) ? "then" : "else";
      if (s.contains(branch) && !check(s[branch], v)) return false;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return false;
      if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return false;
      if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript)))
        return false;
      if (s.contains("format") && !format_ok(s["format"].get<std::string>(), str)) return false;
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const auto& r : s["required"])
          if (!v.contains(r.get<std::string>())) return false;
      for (const auto& [k, x] : v.items()) {
        if (s.contains("properties") && s["properties"].contains(k)) {
          if (!check(s["properties"][k], x)) return false;
        } else if (s.contains("additionalProperties") && !check(s["additionalProperties"], x)) {
          return false;
        }
      }
    }
    if (v.is_array()) {
      const size_t n = v.size();
      if (s.contains("minItems") && n < s["minItems"].get<size_t>()) return false;
      if (s.contains("maxItems") && n > s["maxItems"].get<size_t>()) return false;
      size_t k = 0;
      if (s.contains("prefixItems")) {
        k = s["prefixItems"].size();
        for (size_t i = 0; i < std::min(k, n); ++i)
          if (!check(s["prefixItems"][i], v[i])) return false;
      }
      if (s.contains("items"))
        for (size_t i = k; i < n; ++i)
          if (!check(s["items"], v[i])) return false;
    }
    return true;
  }
};

}  // namespace ib::constrain
