// The spec parser's entry: the top level (version, description, defaults, experiments), each
// experiment's name and kind, what `defaults:` and --set may name; the rest of SpecParser is in
// spec_yaml, spec_keys, spec_experiment, spec_sections and spec_json.cpp.
#include "core/spec.h"

#include <cctype>
#include <map>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/input_file.h"
#include "core/registry.h"
#include "core/spec_internal.h"

namespace ib {

namespace spec_detail {

Spec SpecParser::parse(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    SourceLoc l{file_, e.mark.line + 1, e.mark.column + 1};
    throw spec_error(l, "", "YAML syntax error: " + e.msg);
  }
  if (!root || root.IsNull()) throw spec_error(SourceLoc{file_, 1, 1}, "", "the spec is empty");
  if (!root.IsMap()) throw spec_error(loc_of(root, file_), "", "expected a map with an 'experiments' list");

  Spec spec;
  spec.file = file_;
  YAML::Node experiments, defaults;
  bool has_experiments = false, has_defaults = false;
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string k = it->first.Scalar();
    SourceLoc kl = loc_of(it->first, file_);
    if (!seen.insert(k).second) throw spec_error(kl, k, "duplicate key");
    if (k == "version") {
      int64_t v = 0;
      if (!it->second.IsScalar() || !parse_int(it->second.Scalar(), &v) || v != 1)
        throw spec_error(loc_of(it->second, file_), "version", "only version 1 exists");
    } else if (k == "description") {
      spec.description = scalar_text(it->second, "description");
    } else if (k == "experiments") {
      experiments = it->second;
      has_experiments = true;
    } else if (k == "defaults") {
      defaults = it->second;
      has_defaults = true;
    } else {
      throw spec_error(
          kl, "", "unknown top-level key '" + k + "'" + did_you_mean(k, {"version", "description", "defaults", "experiments"}));
    }
  }
  if (!has_experiments)
    throw spec_error(SourceLoc{file_, 1, 1}, "", "missing required key 'experiments' (the list of experiments)");
  if (!experiments.IsSequence())
    throw spec_error(loc_of(experiments, file_), "experiments",
                     std::string("expected a list of experiments, got ") + node_kind(experiments));
  if (experiments.size() == 0) throw spec_error(loc_of(experiments, file_), "experiments", "the list is empty");

  FieldMap default_fields;
  if (has_defaults) {
    if (!defaults.IsMap())
      throw spec_error(loc_of(defaults, file_), "defaults", std::string("expected a map, got ") + node_kind(defaults));
    read_map(defaults, "defaults", &default_fields);
  }

  std::vector<FieldMap> per_exp(experiments.size());
  std::vector<const KindInfo*> kinds(experiments.size());
  std::map<std::string, int> names;  // name -> line
  for (size_t i = 0; i < experiments.size(); ++i) {
    const YAML::Node& e = experiments[i];
    std::string path = fmt::format("experiments[{}]", i);
    if (!e.IsMap()) throw spec_error(loc_of(e, file_), path, std::string("expected a map, got ") + node_kind(e));
    read_map(e, path, &per_exp[i]);
    kinds[i] = require_kind(per_exp[i], loc_of(e, file_), path);
    const Field* nf = per_exp[i].get("name");
    if (!nf) throw spec_error(loc_of(e, file_), path, "missing required key 'name'");
    std::string name = scalar_text(nf->node, nf->path, nf->loc);
    check_name(name, *nf);
    auto [it, inserted] = names.emplace(name, nf->loc.line);
    if (!inserted)
      throw spec_error(nf->loc, nf->path, fmt::format("duplicate experiment name '{}' (first at line {})", name, it->second));
  }

  check_defaults(default_fields, kinds);
  apply_sets(&per_exp, kinds);

  for (size_t i = 0; i < experiments.size(); ++i) {
    FieldMap merged;
    for (const auto& [k, f] : default_fields.entries())
      if (accepts(*kinds[i], k)) merged.set(k, f);
    for (const auto& [k, f] : per_exp[i].entries()) merged.set(k, f);
    spec.experiments.push_back(build(merged, *kinds[i], loc_of(experiments[i], file_), fmt::format("experiments[{}]", i)));
  }
  return spec;
}

const KindInfo* SpecParser::require_kind(const FieldMap& fields, const SourceLoc& where, const std::string& path) const {
  auto names = Registry::instance().kind_names();
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  const Field* kf = fields.get("kind");
  if (!kf) throw spec_error(where, path, "missing required key 'kind' (one of: " + list + ")");
  std::string k = scalar_text(kf->node, kf->path, kf->loc);
  const KindInfo* kind = Registry::instance().kind(k);
  if (!kind) throw spec_error(kf->loc, kf->path, "unknown kind '" + k + "'" + did_you_mean(k, names) + "; known kinds: " + list);
  return kind;
}

void SpecParser::check_name(const std::string& name, const Field& f) const {
  bool ok = !name.empty();
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) ok = false;
  if (!ok) throw spec_error(f.loc, f.path, "'" + name + "' is not a valid name (letters, digits, '-' and '_')");
}

void SpecParser::check_defaults(const FieldMap& defaults, const std::vector<const KindInfo*>& kinds) const {
  for (const auto& [k, f] : defaults.entries()) {
    if (k == "name" || k == "kind" || k == "cpu") throw spec_error(key_loc(f), f.path, "'" + k + "' cannot have a default");
    bool any = false;
    std::vector<std::string> all;
    for (const auto* kind : kinds) {
      any = any || accepts(*kind, k);
      auto a = accepted_keys(*kind);
      all.insert(all.end(), a.begin(), a.end());
    }
    if (!any) throw spec_error(key_loc(f), f.path, "unknown key '" + k + "'" + did_you_mean(k, all));
  }
}

void SpecParser::apply_sets(std::vector<FieldMap>* per_exp, const std::vector<const KindInfo*>& kinds) const {
  for (const auto& s : opt_.sets) {
    const std::string where = "--set " + s;
    SourceLoc l{where, 0, 0};
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) throw InputError("--set '" + s + "': expected key=value or experiment.key=value");
    std::string lhs = s.substr(0, eq), rhs = s.substr(eq + 1);
    std::string target, k = lhs;
    if (auto dot = lhs.find('.'); dot != std::string::npos) {
      target = lhs.substr(0, dot);
      k = lhs.substr(dot + 1);
    }
    if (rhs.empty()) throw InputError("--set '" + s + "': no value after '='");
    if (k == "name" || k == "kind") throw InputError("--set '" + s + "': '" + k + "' cannot be overridden");
    YAML::Node value;
    try {
      value = YAML::Load(rhs);
    } catch (const YAML::ParserException& e) {
      throw InputError("--set '" + s + "': the value is not valid YAML: " + e.msg);
    }
    bool target_found = target.empty();
    int applied = 0;
    std::vector<std::string> names, keys;
    for (size_t i = 0; i < per_exp->size(); ++i) {
      const Field* nf = (*per_exp)[i].get("name");
      std::string name = nf->node.Scalar();
      names.push_back(name);
      if (!target.empty() && name != target) continue;
      target_found = true;
      auto a = accepted_keys(*kinds[i]);
      keys.insert(keys.end(), a.begin(), a.end());
      if (!accepts(*kinds[i], k)) continue;
      (*per_exp)[i].set(k, Field{value, l, k, true});
      ++applied;
    }
    if (!target_found)
      throw InputError("--set '" + s + "': no experiment named '" + target + "' in " + file_ + did_you_mean(target, names));
    if (applied == 0)
      throw InputError("--set '" + s + "': no experiment " + (target.empty() ? "in " + file_ : "'" + target + "'") +
                       " has a key '" + k + "'" + did_you_mean(k, keys));
  }
}

}  // namespace spec_detail

namespace {

// A spec is text a person writes: 64 MiB is far past any (an axis of 100,000 values is ~1 MiB).
std::string read_file(const std::string& path) { return read_input_file(path, uint64_t{64} << 20); }

}  // namespace

using spec_detail::SpecParser;

Spec parse_spec(const std::string& text, const std::string& file, const SpecOptions& options) {
  return SpecParser(file, options).parse(text);
}

Spec load_spec(const std::string& path, const SpecOptions& options) { return parse_spec(read_file(path), path, options); }

}  // namespace ib
