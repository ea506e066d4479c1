#include "constrain/validator.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>

#include "constrain/format_check.h"

namespace ib::constrain {

size_t SchemaValidator::code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool SchemaValidator::same(const json& a, const json& b) {
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

bool SchemaValidator::has_type(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

SchemaValidator::Decimal SchemaValidator::decimal(const json& v) {
  std::string text;
  if (v.is_number_unsigned())
    text = std::to_string(v.get<uint64_t>());
  else if (v.is_number_integer())
    text = std::to_string(v.get<int64_t>());
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

bool SchemaValidator::multiple_of(const json& x, const json& m) {
  const Decimal dx = decimal(x), dm = decimal(m);
  if (dx.digits.empty()) return true;
  if (dm.digits.empty() || dx.exp10 < dm.exp10) return false;
  const uint64_t modulus = std::stoull(dm.digits);
  uint64_t r = 0;
  for (char c : dx.digits) r = (r * 10 + static_cast<uint64_t>(c - '0')) % modulus;
  for (int i = 0; i < dx.exp10 - dm.exp10; ++i) r = r * 10 % modulus;
  return r == 0;
}

const SchemaValidator::json* SchemaValidator::anchor(const json& node, const std::string& name) {
  if (node.is_object()) {
    if (node.contains("$anchor") && node["$anchor"] == name) return &node;
    for (const char* k : {"$id", "id"})
      if (node.contains(k) && node[k] == "#" + name) return &node;
    for (const auto& [k, v] : node.items())
      if (k != "enum" && k != "const" && k != "default" && k != "examples")
        if (const json* hit = anchor(v, name)) return hit;
  } else if (node.is_array()) {
    for (const auto& v : node)
      if (const json* hit = anchor(v, name)) return hit;
  }
  return nullptr;
}

const SchemaValidator::json& SchemaValidator::resolve(std::string ref) const {
  const char* id_key = draft_ == Draft::Draft4 ? "id" : "$id";
  if (root_.is_object() && root_.contains(id_key) && root_[id_key].is_string()) {
    const std::string id = root_[id_key].get<std::string>(), base = id.substr(0, id.find('#'));
    if (!base.empty() && ref.rfind(base, 0) == 0) ref = ref.substr(base.size());
  }
  if (ref.empty()) ref = "#";
  if (ref.size() > 1 && ref[1] != '/') {
    static const json never = false;
    const json* hit = anchor(root_, ref.substr(1));
    return hit ? *hit : never;
  }
  const json* node = &root_;
  std::string p;
  for (size_t i = 1; i < ref.size(); ++i) {  // percent-decoding
    if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
      p += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      p += ref[i];
    }
  }
  static const json unresolved = false;  // a reference to nothing: no document is valid
  size_t pos = 1;
  while (!p.empty() && pos <= p.size()) {
    size_t next = p.find('/', pos);
    std::string part = p.substr(pos, next == std::string::npos ? std::string::npos : next - pos), key;
    for (size_t i = 0; i < part.size(); ++i) {
      if (part[i] == '~' && i + 1 < part.size())
        key += part[++i] == '1' ? '/' : '~';
      else
        key += part[i];
    }
    if (node->is_object() && node->contains(key))
      node = &(*node)[key];
    else if (node->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
             std::stoul(key) < node->size())
      node = &(*node)[std::stoul(key)];
    else
      return unresolved;
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return *node;
}

bool SchemaValidator::check(const json& raw, const json& v) const {
  if (raw.is_boolean()) return raw.get<bool>();
  if (!raw.is_object()) return true;
  const json s = to_2020_12(raw, draft_);
  // $ref and its siblings both apply (2019-09 on; schema_dialect.h drops the siblings before that).
  if (s.contains("$ref") && s["$ref"].is_string() && !check(resolve(s["$ref"].get<std::string>()), v)) return false;
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string())
      ok = has_type(v, s["type"].get<std::string>());
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
    if (s.contains("format") && s["format"].is_string() && !format_valid(s["format"].get<std::string>(), str)) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) return false;
    if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) return false;
    if (s.contains("dependentSchemas"))
      for (const auto& [a, sub] : s["dependentSchemas"].items())
        if (v.contains(a) && !check(sub, v)) return false;
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

}  // namespace ib::constrain
