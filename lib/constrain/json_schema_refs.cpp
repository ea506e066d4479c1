// The compiler's references: $ref resolution (local pointers, percent-encoding, $anchor / $id
// fragments, the root's base URI) and the recursion bound on re-entered references (RefScope).
#include "constrain/json_schema_internal.h"

#include <cctype>

namespace ib::constrain::detail {

// The root's base URI ($id, or id in draft 4) without its fragment: a reference that starts with
// it is local.
std::string Compiler::base_uri() const {
  const char* key = draft_ == Draft::Draft4 ? "id" : "$id";
  if (!root_.is_object() || !root_.contains(key) || !root_[key].is_string()) return {};
  std::string id = root_[key].get<std::string>();
  return id.substr(0, id.find('#'));
}

// The subschema that declares a plain-name fragment: $anchor (2019-09 on), or an $id / id of
// "#name" (drafts 4-7). Depth-first, bounded like the compiler's own recursion.
const json* Compiler::find_anchor(const json& node, const std::string& name, int depth) {
  if (depth > 512) return nullptr;
  if (node.is_object()) {
    for (const char* k : {"$anchor", "$id", "id"})
      if (node.contains(k) && node[k].is_string()) {
        const std::string v = node[k].get<std::string>();
        if ((std::string(k) == "$anchor" && v == name) || (std::string(k) != "$anchor" && v == "#" + name)) return &node;
      }
    for (const auto& [k, v] : node.items()) {
      if (k == "enum" || k == "const" || k == "default" || k == "examples") continue;  // values, not schemas
      if (const json* hit = find_anchor(v, name, depth + 1)) return hit;
    }
  } else if (node.is_array()) {
    for (const auto& v : node)
      if (const json* hit = find_anchor(v, name, depth + 1)) return hit;
  }
  return nullptr;
}

// The schema a local reference points at ("#", "#/$defs/x", percent-encoded or not, "#anchor",
// or any of these after the root's own $id).
json Compiler::resolve(const json& r, const std::string& ptr) {
  if (!r.is_string()) fail("$ref", ptr, "$ref must be a string");
  std::string target = r.get<std::string>();
  const std::string base = base_uri();
  if (!base.empty() && target.rfind(base, 0) == 0) target = target.substr(base.size());
  if (target.empty()) target = "#";
  if (target[0] != '#') fail("$ref", ptr, "only local references (#/..., #anchor) are supported, not '" + target + "'");
  std::string p;
  for (size_t i = 1; i < target.size(); ++i) {  // percent-decoding (URI fragment)
    if (target[i] == '%' && i + 2 < target.size() + 0 && std::isxdigit(static_cast<unsigned char>(target[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(target[i + 2]))) {
      p += static_cast<char>(std::stoi(target.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      p += target[i];
    }
  }
  const json* node = &root_;
  if (!p.empty()) {
    if (p[0] != '/') {
      const json* anchored = find_anchor(root_, p, 0);
      if (!anchored) fail("$ref", ptr, "reference '" + target + "': no subschema declares the anchor '" + p + "'");
      return *anchored;
    }
    size_t pos = 1;
    while (pos <= p.size()) {
      size_t next = p.find('/', pos);
      std::string part = p.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
      std::string key;
      for (size_t i = 0; i < part.size(); ++i) {
        if (part[i] == '~' && i + 1 < part.size()) {
          key += part[i + 1] == '1' ? '/' : '~';
          ++i;
        } else {
          key += part[i];
        }
      }
      if (node->is_object() && node->contains(key))
        node = &(*node)[key];
      else if (node->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(key) < node->size())
        node = &(*node)[std::stoul(key)];
      else
        fail("$ref", ptr, "reference '" + target + "' does not resolve");
      if (next == std::string::npos) break;
      pos = next + 1;
    }
  }
  return *node;
}

Re Compiler::ref(const json& r, const std::string& ptr) {
  const json target = resolve(r, ptr);
  const std::string key = r.get<std::string>();
  RefScope entered(*this);
  if (!entered.enter(key)) {
    if (over_) return over_also(re_never(), json_value_regex_ws(0));
    ++cut_off_["$ref recursion past max_recursion"];
    return re_never();
  }
  return compile(target, key.size() > 1 ? key.substr(1) : "");
}

}  // namespace ib::constrain::detail
