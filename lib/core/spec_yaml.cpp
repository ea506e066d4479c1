// Reading YAML nodes: where a node is (file:line:col), what it is, and a scalar as a key's typed
// value (integers with K/M, sizes, durations, booleans, enums) with its range checked.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/spec_internal.h"
#include "core/units.h"

namespace ib::spec_detail {

SourceLoc loc_of(const YAML::Node& n, const std::string& file) {
  const YAML::Mark m = n.Mark();
  SourceLoc l;
  l.file = file;
  if (m.line >= 0) {
    l.line = m.line + 1;
    l.col = m.column + 1;
  }
  return l;
}

const char* node_kind(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
      return "nothing";
    case YAML::NodeType::Scalar:
      return "a scalar";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    default:
      return "an undefined node";
  }
}

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  std::string t = text;
  int64_t mult = 1;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(t.back())));
  if (last == 'K' || last == 'M') {  // 32K = 32768 tokens, as the chapter writes lengths
    mult = last == 'K' ? 1024 : 1024 * 1024;
    t.pop_back();
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno == ERANGE) return false;
  return !__builtin_mul_overflow(static_cast<int64_t>(v), mult, out);  // 9223372036854775807K is out of range
}

bool parse_float(const std::string& text, double* out) {
  const std::optional<double> v = parse_fraction(text);
  if (v) *out = *v;
  return v.has_value();
}

std::string SpecParser::scalar_text(const YAML::Node& n, const std::string& path) const {
  return scalar_text(n, path, loc_of(n, file_));
}
std::string SpecParser::scalar_text(const YAML::Node& n, const std::string& path, const SourceLoc& l) const {
  if (!n.IsScalar()) throw spec_error(l, path, std::string("expected text, got ") + node_kind(n));
  return n.Scalar();
}

void SpecParser::read_map(const YAML::Node& m, const std::string& path, FieldMap* out) const {
  std::set<std::string> seen;
  for (auto it = m.begin(); it != m.end(); ++it) {
    SourceLoc kl = loc_of(it->first, file_);
    if (!it->first.IsScalar()) throw spec_error(kl, path, "keys must be plain names");
    std::string k = it->first.Scalar();
    if (!seen.insert(k).second) throw spec_error(kl, path + "." + k, "duplicate key");
    SourceLoc vl = it->second.IsNull() ? kl : loc_of(it->second, file_);
    out->set(k, Field{it->second, vl, path + "." + k});
    key_locs_[path + "." + k] = kl;
  }
}

SourceLoc SpecParser::key_loc(const Field& f) const {
  auto it = key_locs_.find(f.path);
  return it == key_locs_.end() ? f.loc : it->second;
}

Value SpecParser::convert(const YAML::Node& n, const KeySpec& ks, const SourceLoc& l, const std::string& path) const {
  if (!n.IsScalar()) throw spec_error(l, path, fmt::format("expected a {}, got {}", to_string(ks.type), node_kind(n)));
  const std::string text = n.Scalar();
  Value v;
  switch (ks.type) {
    case ParamType::Int: {
      int64_t i = 0;
      if (!parse_int(text, &i)) throw spec_error(l, path, "expected an integer, got '" + text + "'");
      v = i;
      break;
    }
    case ParamType::Float: {
      double d = 0;
      if (!parse_float(text, &d)) throw spec_error(l, path, "expected a number, got '" + text + "'");
      v = d;
      break;
    }
    case ParamType::Bool: {
      std::string t = lower(text);
      if (t == "true" || t == "yes" || t == "on")
        v = true;
      else if (t == "false" || t == "no" || t == "off")
        v = false;
      else
        throw spec_error(l, path, "expected true or false, got '" + text + "'");
      break;
    }
    case ParamType::String:
      v = text;
      break;
    case ParamType::Enum: {
      bool ok = false;
      for (const auto& c : ks.choices) ok = ok || c == text;
      if (!ok) {
        std::string list;
        for (const auto& c : ks.choices) list += (list.empty() ? "" : ", ") + c;
        throw spec_error(l, path, "'" + text + "' is not one of " + list + did_you_mean(text, ks.choices));
      }
      v = text;
      break;
    }
    case ParamType::Bytes: {
      auto b = parse_bytes(text);
      if (!b) throw spec_error(l, path, "expected a size like 4096, 64MiB or 80GB, got '" + text + "'");
      v = *b;
      break;
    }
    case ParamType::Seconds: {
      auto sec = parse_seconds(text);
      if (!sec) throw spec_error(l, path, "expected a duration like 0.5, 500ms or 2s, got '" + text + "'");
      v = *sec;
      break;
    }
  }
  if (ks.type != ParamType::String && ks.type != ParamType::Enum && ks.type != ParamType::Bool) {
    double x = as_number(v);
    auto show = [&](double b) {
      Value bv = (ks.type == ParamType::Int || ks.type == ParamType::Bytes) ? Value(static_cast<int64_t>(b)) : Value(b);
      return format_value(bv, ks.type);
    };
    if (ks.min && x < *ks.min)
      throw spec_error(l, path, "must be at least " + show(*ks.min) + ", got " + format_value(v, ks.type));
    if (ks.max && x > *ks.max)
      throw spec_error(l, path, "must be at most " + show(*ks.max) + ", got " + format_value(v, ks.type));
  }
  return v;
}

std::vector<std::string> SpecParser::string_list(const Field& f) const {
  std::vector<std::string> out;
  if (f.node.IsScalar()) {
    out.push_back(f.node.Scalar());
  } else if (f.node.IsSequence()) {
    if (f.node.size() == 0) throw spec_error(f.loc, f.path, "the list is empty");
    for (size_t i = 0; i < f.node.size(); ++i) out.push_back(scalar_text(f.node[i], f.path + fmt::format("[{}]", i)));
  } else {
    throw spec_error(f.loc, f.path, std::string("expected a name or a list of names, got ") + node_kind(f.node));
  }
  return out;
}

}  // namespace ib::spec_detail
