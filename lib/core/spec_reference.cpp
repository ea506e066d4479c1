// The spec reference that `infer-bench keys` prints (and the README holds): generated from the
// registry's kinds, keys and variants, so the documentation cannot drift from the parser.
#include "core/spec_reference.h"

#include <fmt/format.h>

#include "core/registry.h"
#include "core/spec.h"
#include "core/spec_internal.h"

namespace ib {

using spec_detail::kStructuralKeys;

std::string spec_reference_markdown() {
  auto def = [](const KeySpec& k) -> std::string {
    if (!k.default_value) return "required";
    std::string s = format_value(*k.default_value, k.type);
    return s.empty() ? "\"\"" : "`" + s + "`";
  };
  auto range = [](const KeySpec& k) -> std::string {
    if (!k.choices.empty()) {
      std::string s;
      for (const auto& c : k.choices) s += (s.empty() ? "" : ", ") + c;
      return s;
    }
    auto show = [&](double b) {
      Value v = (k.type == ParamType::Int || k.type == ParamType::Bytes) ? Value(static_cast<int64_t>(b)) : Value(b);
      return format_value(v, k.type);
    };
    if (k.min && k.max) return show(*k.min) + " … " + show(*k.max);
    if (k.min) return "≥ " + show(*k.min);
    if (k.max) return "≤ " + show(*k.max);
    return "";
  };
  std::string out;
  out +=
      "Top level: `version` (1), `description`, `defaults` (any experiment key, applied to every experiment "
      "whose kind has it), `experiments` (the list).\n\n";
  out += "#### Keys of every experiment\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : common_keys()) {
    bool structural = kStructuralKeys.count(k.name) > 0;
    out +=
        fmt::format("| `{}` | {} | {} | {} |\n", k.name, structural ? "—" : to_string(k.type),
                    k.name == "name" || k.name == "kind" ? "required" : (structural && !k.default_value ? "—" : def(k)), k.doc);
  }
  for (const KindInfo* kind : Registry::instance().kinds()) {
    out += fmt::format("\n#### kind `{}` ({})\n\n{}\n\n", kind->name, kind->group, kind->doc);
    if (!kind->keys.empty()) {
      out += "| key | type | default | range | axis | meaning |\n|---|---|---|---|---|---|\n";
      for (const auto& k : kind->keys)
        out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", k.name, to_string(k.type), def(k), range(k),
                           k.sweepable ? "yes" : "no", k.doc);
    }
    out += "\n| variant | backend | keys it reads | what it is |\n|---|---|---|---|\n";
    for (const auto& v : kind->variants) {
      std::string uses;
      for (const auto& u : v.uses) uses += (uses.empty() ? "" : ", ") + u;
      out += fmt::format("| `{}` | {} | {} | {} |\n", v.name, v.host ? "host (any)" : to_string(v.backend),
                         uses.empty() ? "all" : uses, v.doc);
    }
  }
  return out;
}

}  // namespace ib
