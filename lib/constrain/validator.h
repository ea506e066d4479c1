// An independent JSON Schema validator for the keywords the compiler supports: the oracle that
// generated documents are checked against (tests and the validity experiment). Written from the
// specification, not from the compiler, so the two can disagree when one is wrong. Patterns use
// std::regex (ECMAScript) on the UTF-8 bytes.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

  // A number's value as decimal digits × 10^exp10, the digits without leading or trailing zeros
  // ("" for zero): integers as parsed, doubles by their shortest spelling that reads back the same
  // double (the decimal a document wrote, when it had at most 15 digits).
  struct Decimal {
    std::string digits;
    int exp10 = 0;
  };
  static Decimal decimal(const json& v) {
    std::string text;
    if (v.is_number_unsigned()) text = std::to_string(v.get<uint64_t>());
    else if (v.is_number_integer()) text = std::to_string(v.get<int64_t>());
    else {
      const double x = v.get<double>();
      char buf[48];
      for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*e", p - 1, x);
        if (std::strtod(buf, nullptr) == x) break;
      }
      text = buf;
    }
    Decimal d;
    size_t i = 0;
    for (; i < text.size() && text[i] != 'e'; ++i) {
      if (text[i] == '.') {
        for (size_t j = i + 1; j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])); ++j) --d.exp10;
      } else if (std::isdigit(static_cast<unsigned char>(text[i]))) {
        d.digits += text[i];
      }
    }
    if (i < text.size()) d.exp10 += std::atoi(text.c_str() + i + 1);
    d.digits.erase(0, std::min(d.digits.find_first_not_of('0'), d.digits.size()));
    while (!d.digits.empty() && d.digits.back() == '0') {
      d.digits.pop_back();
      ++d.exp10;
    }
    return d;
  }

  // multipleOf in decimal arithmetic: x = X·10^p, m = M·10^q (X, M without trailing zeros), x / m
  // = (X / M)·10^(p - q) is whole iff p >= q and X·10^(p - q) = 0 mod M (for p < q, X would need
  // the factor 10 it does not have).
  static bool multiple_of(const json& x, const json& m) {
    const Decimal dx = decimal(x), dm = decimal(m);
    if (dx.digits.empty()) return true;
    if (dm.digits.empty() || dx.exp10 < dm.exp10) return false;
    const uint64_t modulus = std::stoull(dm.digits);
    uint64_t r = 0;
    for (char c : dx.digits) r = (r * 10 + static_cast<uint64_t>(c - '0')) % modulus;
    for (int i = 0; i < dx.exp10 - dm.exp10; ++i) r = r * 10 % modulus;
    return r == 0;
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
      if (s.contains("multipleOf") && !multiple_of(v, s["multipleOf"])) return false;
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
      if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) return false;
      if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) return false;
      if (s.contains("dependentRequired"))
        for (const auto& [a, list] : s["dependentRequired"].items())
          if (v.contains(a))
            for (const auto& b : list)
              if (!v.contains(b.get<std::string>())) return false;
      for (const auto& [k, x] : v.items()) {
        if (s.contains("propertyNames") && !check(s["propertyNames"], json(k))) return false;
        // properties and every matching pattern apply; additionalProperties where none does.
        bool evaluated = false;
        if (s.contains("properties") && s["properties"].contains(k)) {
          evaluated = true;
          if (!check(s["properties"][k], x)) return false;
        }
        if (s.contains("patternProperties"))
          for (const auto& [pattern, sub] : s["patternProperties"].items())
            if (std::regex_search(k, std::regex(pattern, std::regex::ECMAScript))) {
              evaluated = true;
              if (!check(sub, x)) return false;
            }
        if (!evaluated && s.contains("additionalProperties") && !check(s["additionalProperties"], x)) return false;
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
      if (s.contains("contains")) {
        size_t hits = 0;
        for (const auto& x : v) hits += check(s["contains"], x);
        const size_t lo = s.contains("minContains") ? s["minContains"].get<size_t>() : 1;
        if (hits < lo) return false;
        if (s.contains("maxContains") && hits > s["maxContains"].get<size_t>()) return false;
      }
      if (s.contains("uniqueItems") && s["uniqueItems"] == true)
        for (size_t i = 0; i < n; ++i)
          for (size_t j = i + 1; j < n; ++j)
            if (same(v[i], v[j])) return false;
    }
    return true;
  }
};

}  // namespace ib::constrain
