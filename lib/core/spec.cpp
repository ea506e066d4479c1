#include "core/spec.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <unordered_set>
#include <sys/stat.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/input_file.h"
#include "core/registry.h"
#include "core/units.h"

namespace ib {

namespace {

// Keys that are not parameters of a kind; handled by the parser itself.
const std::set<std::string> kStructuralKeys = {"name", "kind", "description", "variants", "baseline",
                                               "skip", "book", "plot", "cpu", "columns", "summary"};

// Run-control and structural keys are never axes.
KeySpec key(std::string name, ParamType type, std::string doc, std::optional<Value> def = std::nullopt,
            std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt) {
  KeySpec k = key_spec(std::move(name), type, std::move(doc), std::move(def), min, max);
  k.sweepable = false;
  return k;
}

const std::vector<KeySpec>& control_keys() {
  static const std::vector<KeySpec> keys = [] {
    RunControl d;
    return std::vector<KeySpec>{
        key("warmup", ParamType::Int, "unmeasured runs after validation (flag --warmup)", Value(d.warmup), 0.0),
        key("min_samples", ParamType::Int, "at least this many samples (flag --min-samples)", Value(d.min_samples),
            1.0),
        key("min_time", ParamType::Seconds, "at least this much measured time (flag --min-time)",
            Value(d.min_time), 0.0),
        key("max_noise", ParamType::Float,
            "stop once the relative stdev is below this fraction (0.01 or 1%) (flag --max-noise)",
            Value(d.max_noise), 1e-6, 1.0),
        key("timeout", ParamType::Seconds,
            "wall-clock cap per row; the row names the condition left unmet (flag --timeout)", Value(d.timeout),
            1e-3),
        key("cold_l2", ParamType::Bool, "flush L2 (GPU) or the last-level cache (CPU) before each sample (flag --cold-l2)",
            Value(d.cold_l2)),
        key("memory_limit", ParamType::Bytes,
            "emulate a smaller card: allocations past this become an OOM row; 0 = the real memory "
            "(flag --memory-limit)",
            Value(d.memory_limit), 0.0),
        key("seed", ParamType::Int, "seed of the random inputs (flag --seed)", Value(d.seed), 0.0),
    };
  }();
  return keys;
}

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
    case YAML::NodeType::Null: return "nothing";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "an undefined node";
  }
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

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

// A value with the place it came from.
struct Field {
  YAML::Node node;
  SourceLoc loc;
  std::string path;
  bool from_command_line = false;  // a --set override: wins over the cpu: block
};

// Ordered key -> Field. Fields are held by pointer and replaced, never assigned: yaml-cpp's
// Node::operator= rebinds the shared node, which would rewrite the parsed tree itself.
class FieldMap {
 public:
  void set(const std::string& k, Field f) {
    auto p = std::make_shared<const Field>(std::move(f));
    for (auto& [key, field] : entries_)
      if (key == k) {
        field = std::move(p);
        return;
      }
    entries_.emplace_back(k, std::move(p));
  }
  const Field* get(const std::string& k) const {
    for (const auto& [key, field] : entries_)
      if (key == k) return field.get();
    return nullptr;
  }
  void erase(const std::string& k) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->first == k) {
        entries_.erase(it);
        return;
      }
  }
  bool empty() const { return entries_.empty(); }
  // Copies (Node copies share, they do not rebind): safe to iterate while setting others.
  std::vector<std::pair<std::string, Field>> entries() const {
    std::vector<std::pair<std::string, Field>> out;
    for (const auto& [key, field] : entries_) out.emplace_back(key, *field);
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<const Field>>> entries_;
};

class SpecParser {
 public:
  SpecParser(std::string file, const SpecOptions& opt) : file_(std::move(file)), opt_(opt) {}

  Spec parse(const std::string& text) {
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
        throw spec_error(kl, "", "unknown top-level key '" + k + "'" +
                                     did_you_mean(k, {"version", "description", "defaults", "experiments"}));
      }
    }
    if (!has_experiments) throw spec_error(SourceLoc{file_, 1, 1}, "", "missing required key 'experiments' (the list of experiments)");
    if (!experiments.IsSequence())
      throw spec_error(loc_of(experiments, file_), "experiments",
                       std::string("expected a list of experiments, got ") + node_kind(experiments));
    if (experiments.size() == 0)
      throw spec_error(loc_of(experiments, file_), "experiments", "the list is empty");

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

 private:
  std::string file_;
  const SpecOptions& opt_;

  std::string scalar_text(const YAML::Node& n, const std::string& path) const {
    return scalar_text(n, path, loc_of(n, file_));
  }
  std::string scalar_text(const YAML::Node& n, const std::string& path, const SourceLoc& l) const {
    if (!n.IsScalar()) throw spec_error(l, path, std::string("expected text, got ") + node_kind(n));
    return n.Scalar();
  }

  void read_map(const YAML::Node& m, const std::string& path, FieldMap* out) const {
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

  SourceLoc key_loc(const Field& f) const {
    auto it = key_locs_.find(f.path);
    return it == key_locs_.end() ? f.loc : it->second;
  }

  const KindInfo* require_kind(const FieldMap& fields, const SourceLoc& where, const std::string& path) const {
    auto names = Registry::instance().kind_names();
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    const Field* kf = fields.get("kind");
    if (!kf) throw spec_error(where, path, "missing required key 'kind' (one of: " + list + ")");
    std::string k = scalar_text(kf->node, kf->path, kf->loc);
    const KindInfo* kind = Registry::instance().kind(k);
    if (!kind)
      throw spec_error(kf->loc, kf->path, "unknown kind '" + k + "'" + did_you_mean(k, names) + "; known kinds: " + list);
    return kind;
  }

  void check_name(const std::string& name, const Field& f) const {
    bool ok = !name.empty();
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) ok = false;
    if (!ok) throw spec_error(f.loc, f.path, "'" + name + "' is not a valid name (letters, digits, '-' and '_')");
  }

  static const KeySpec* find_key(const std::vector<KeySpec>& keys, const std::string& k) {
    for (const auto& ks : keys)
      if (ks.name == k) return &ks;
    return nullptr;
  }

  static bool accepts(const KindInfo& kind, const std::string& k) {
    return kStructuralKeys.count(k) || find_key(control_keys(), k) || find_key(kind.keys, k);
  }

  static std::vector<std::string> accepted_keys(const KindInfo& kind) {
    std::vector<std::string> out(kStructuralKeys.begin(), kStructuralKeys.end());
    for (const auto& k : control_keys()) out.push_back(k.name);
    for (const auto& k : kind.keys) out.push_back(k.name);
    return out;
  }

  void check_defaults(const FieldMap& defaults, const std::vector<const KindInfo*>& kinds) const {
    for (const auto& [k, f] : defaults.entries()) {
      if (k == "name" || k == "kind" || k == "cpu")
        throw spec_error(key_loc(f), f.path, "'" + k + "' cannot have a default");
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

  void apply_sets(std::vector<FieldMap>* per_exp, const std::vector<const KindInfo*>& kinds) const {
    for (const auto& s : opt_.sets) {
      const std::string where = "--set " + s;
      SourceLoc l{where, 0, 0};
      auto eq = s.find('=');
      if (eq == std::string::npos || eq == 0)
        throw InputError("--set '" + s + "': expected key=value or experiment.key=value");
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

  Value convert(const YAML::Node& n, const KeySpec& ks, const SourceLoc& l, const std::string& path) const {
    if (!n.IsScalar())
      throw spec_error(l, path, fmt::format("expected a {}, got {}", to_string(ks.type), node_kind(n)));
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
        if (t == "true" || t == "yes" || t == "on") v = true;
        else if (t == "false" || t == "no" || t == "off") v = false;
        else throw spec_error(l, path, "expected true or false, got '" + text + "'");
        break;
      }
      case ParamType::String: v = text; break;
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

  std::vector<std::string> string_list(const Field& f) const {
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

  void check_variant(const KindInfo& kind, const std::string& v, const SourceLoc& l, const std::string& path) const {
    if (find_variant(kind, v)) return;
    std::vector<std::string> names;
    std::string list;
    for (const auto& d : kind.variants) {
      names.push_back(d.name);
      list += (list.empty() ? "" : ", ") + d.name;
    }
    throw spec_error(l, path, "unknown variant '" + v + "' of kind " + kind.name + did_you_mean(v, names) +
                                  "; variants: " + list);
  }

  ExperimentSpec build(FieldMap fields, const KindInfo& kind, const SourceLoc& where, const std::string& path) const {
    // Unknown keys first: a typo should be named before anything it causes.
    for (const auto& [k, f] : fields.entries())
      if (!accepts(kind, k))
        throw spec_error(key_loc(f), f.path, "unknown key '" + k + "' for kind " + kind.name + did_you_mean(k, accepted_keys(kind)));

    ExperimentSpec ex;
    ex.kind = kind.name;
    ex.loc = where;
    ex.name = fields.get("name")->node.Scalar();

    // The cpu: block is validated on every backend, applied only on the CPU.
    if (const Field* cf = fields.get("cpu")) {
      if (!cf->node.IsMap()) throw spec_error(cf->loc, cf->path, std::string("expected a map, got ") + node_kind(cf->node));
      FieldMap cpu;
      read_map(cf->node, cf->path, &cpu);
      for (const auto& [k, f] : cpu.entries()) {
        if (k == "name" || k == "kind" || k == "cpu")
          throw spec_error(key_loc(f), f.path, "'" + k + "' cannot be changed for the CPU backend");
        if (!accepts(kind, k))
          throw spec_error(key_loc(f), f.path, "unknown key '" + k + "' for kind " + kind.name + did_you_mean(k, accepted_keys(kind)));
      }
      // Validate the CPU values by building them once (errors point into the cpu: block).
      if (opt_.backend != Backend::Cpu) {
        FieldMap trial = fields;
        trial.erase("cpu");
        for (const auto& [k, f] : cpu.entries()) trial.set(k, f);
        SpecOptions cpu_opt = opt_;
        cpu_opt.backend = Backend::Cpu;
        SpecParser(file_, cpu_opt).build_body(trial, kind, path, Backend::Cpu, &ex);
        ex = ExperimentSpec{};
        ex.kind = kind.name;
        ex.loc = where;
        ex.name = fields.get("name")->node.Scalar();
      } else {
        // --set fields must still win over the cpu block.
        for (const auto& [k, f] : cpu.entries()) {
          const Field* cur = fields.get(k);
          if (cur && cur->from_command_line) continue;
          fields.set(k, f);
        }
        ex.cpu_overrides_applied = !cpu.empty();
      }
      fields.erase("cpu");
    }
    build_body(fields, kind, path, opt_.backend, &ex);
    return ex;
  }

  void build_body(const FieldMap& fields, const KindInfo& kind, const std::string& path, Backend backend,
                  ExperimentSpec* ex) const {
    if (const Field* f = fields.get("description")) ex->description = scalar_text(f->node, f->path, f->loc);

    // Variants: listed, or every variant of the kind for this backend.
    if (const Field* f = fields.get("variants")) {
      ex->variants = string_list(*f);
      std::set<std::string> seen;
      for (size_t i = 0; i < ex->variants.size(); ++i) {
        SourceLoc l = f->loc;
        if (f->node.IsSequence() && loc_of(f->node[i], file_).line > 0) l = loc_of(f->node[i], file_);
        check_variant(kind, ex->variants[i], l, f->path);
        if (!seen.insert(ex->variants[i]).second)
          throw spec_error(l, f->path, "variant '" + ex->variants[i] + "' is listed twice");
      }
    } else {
      for (const auto& d : kind.variants)
        if (d.backend == backend || d.host) ex->variants.push_back(d.name);
      if (ex->variants.empty())
        throw spec_error(ex->loc, path, std::string("kind ") + kind.name + " has no variant for the " + to_string(backend) +
                                            " backend; list 'variants' explicitly");
    }

    if (const Field* f = fields.get("baseline")) {
      std::string b = scalar_text(f->node, f->path, f->loc);
      if (b != "none") {
        check_variant(kind, b, f->loc, f->path);
        bool listed = false;
        for (const auto& v : ex->variants) listed = listed || v == b;
        if (!listed) {
          std::string list;
          for (const auto& v : ex->variants) list += (list.empty() ? "" : ", ") + v;
          throw spec_error(f->loc, f->path, "baseline '" + b + "' is not among the variants run (" + list + ")");
        }
        ex->baseline = b;
      }
    }

    // Run control.
    RunControl& c = ex->control;
    auto ctl = [&](const char* name) -> std::optional<Value> {
      const Field* f = fields.get(name);
      if (!f) return std::nullopt;
      const KeySpec* ks = find_key(control_keys(), name);
      if (f->node.IsSequence())
        throw spec_error(f->loc, f->path, std::string(name) + " cannot be a list: run-control keys are not axes");
      return convert(f->node, *ks, f->loc, f->path);
    };
    if (auto v = ctl("warmup")) c.warmup = std::get<int64_t>(*v);
    if (auto v = ctl("min_samples")) c.min_samples = std::get<int64_t>(*v);
    if (auto v = ctl("min_time")) c.min_time = std::get<double>(*v);
    if (auto v = ctl("max_noise")) c.max_noise = std::get<double>(*v);
    if (auto v = ctl("timeout")) c.timeout = std::get<double>(*v);
    if (auto v = ctl("cold_l2")) c.cold_l2 = std::get<bool>(*v);
    if (auto v = ctl("memory_limit")) c.memory_limit = std::get<int64_t>(*v);
    if (auto v = ctl("seed")) c.seed = std::get<int64_t>(*v);
    const RunControlOverrides& o = opt_.overrides;
    if (o.warmup) c.warmup = *o.warmup;
    if (o.min_samples) c.min_samples = *o.min_samples;
    if (o.min_time) c.min_time = *o.min_time;
    if (o.max_noise) c.max_noise = *o.max_noise;
    if (o.timeout) c.timeout = *o.timeout;
    if (o.cold_l2) c.cold_l2 = *o.cold_l2;
    if (o.memory_limit) c.memory_limit = *o.memory_limit;
    if (o.seed) c.seed = *o.seed;

    // Axes, in the kind's key order, for the keys some listed variant reads.
    std::set<std::string> used;
    bool uses_all = false;
    for (const auto& name : ex->variants) {
      const VariantDecl* d = find_variant(kind, name);
      if (d->uses.empty()) uses_all = true;
      used.insert(d->uses.begin(), d->uses.end());
    }
    std::map<std::string, std::vector<Value>> all_values;  // every key's values, for kind.check
    // The kinds hold their integers in int (sizes, counts, token ids): a larger one would wrap.
    auto convert_param = [&](const YAML::Node& n, const KeySpec& ks, const SourceLoc& l, const std::string& p) {
      Value v = convert(n, ks, l, p);
      if (ks.type == ParamType::Int && !ks.max && std::get<int64_t>(v) > std::numeric_limits<int32_t>::max())
        throw spec_error(l, p, fmt::format("must be at most {}, got {}", std::numeric_limits<int32_t>::max(), std::get<int64_t>(v)));
      return v;
    };
    for (const auto& ks : kind.keys) {
      Axis axis;
      axis.key = ks.name;
      axis.type = ks.type;
      const Field* f = fields.get(ks.name);
      if (!f) {
        if (!ks.default_value) throw spec_error(ex->loc, path, "missing required key '" + ks.name + "' (" + ks.doc + ")");
        axis.values.push_back(*ks.default_value);
      } else if (f->node.IsSequence()) {
        if (!ks.sweepable) throw spec_error(f->loc, f->path, ks.name + " cannot be a list (it is not an axis)");
        std::unordered_set<std::string> seen_values;  // a set, not pairwise: an axis may hold 100,000 values
        if (f->node.size() == 0) throw spec_error(f->loc, f->path, "empty list: an axis needs at least one value");
        for (size_t i = 0; i < f->node.size(); ++i) {
          SourceLoc l = loc_of(f->node[i], file_);
          if (l.line == 0) l = f->loc;
          Value v = convert_param(f->node[i], ks, l, f->path + fmt::format("[{}]", i));
          if (!seen_values.insert(value_identity(v)).second)
            throw spec_error(l, f->path, "value " + format_value(v, ks.type) + " appears twice in the axis");
          axis.values.push_back(v);
        }
      } else {
        axis.values.push_back(convert_param(f->node, ks, f->loc, f->path));
      }
      all_values[ks.name] = axis.values;
      if (uses_all || used.count(ks.name)) ex->axes.push_back(std::move(axis));
    }
    check_row_count(*ex, path);
    if (kind.check)
      if (std::optional<KeyProblem> problem = kind.check(all_values)) {
        for (const auto& k : problem->keys)
          if (const Field* f = fields.get(k)) throw spec_error(f->loc, f->path, problem->message);
        throw spec_error(ex->loc, problem->keys.empty() ? path : path + "." + problem->keys[0], problem->message);
      }

    if (const Field* f = fields.get("skip")) ex->skip = parse_skip(*f, kind);
    if (const Field* f = fields.get("book")) ex->book = parse_book(*f, kind);
    if (const Field* f = fields.get("plot")) ex->plots = parse_plots(*f, kind);
    if (const Field* f = fields.get("columns")) ex->columns = string_list(*f);
    if (const Field* f = fields.get("summary")) ex->summary = parse_summary(*f, kind);
    ex->resolved = resolved_json(*ex);
  }

  std::vector<SkipRule> parse_skip(const Field& f, const KindInfo& kind) const {
    if (!f.node.IsSequence())
      throw spec_error(f.loc, f.path, std::string("expected a list of rules like {variant: x, seq_len: 32K}, got ") + node_kind(f.node));
    std::vector<SkipRule> rules;
    for (size_t i = 0; i < f.node.size(); ++i) {
      const YAML::Node& r = f.node[i];
      std::string rp = f.path + fmt::format("[{}]", i);
      if (!r.IsMap() || r.size() == 0)
        throw spec_error(loc_of(r, file_), rp, "a skip rule is a non-empty map of key: value(s)");
      SkipRule rule;
      for (auto it = r.begin(); it != r.end(); ++it) {
        std::string k = it->first.Scalar();
        std::string kp = rp + "." + k;
        std::vector<YAML::Node> vals;
        if (it->second.IsSequence()) {
          if (it->second.size() == 0) throw spec_error(loc_of(it->second, file_), kp, "the list is empty");
          for (size_t j = 0; j < it->second.size(); ++j) vals.push_back(it->second[j]);
        } else {
          vals.push_back(it->second);
        }
        std::vector<Value> converted;
        if (k == "variant") {
          for (const auto& v : vals) {
            std::string name = scalar_text(v, kp);
            check_variant(kind, name, loc_of(v, file_), kp);
            converted.push_back(name);
          }
        } else {
          const KeySpec* ks = find_key(kind.keys, k);
          if (!ks) {
            std::vector<std::string> names = {"variant"};
            for (const auto& x : kind.keys) names.push_back(x.name);
            throw spec_error(loc_of(it->first, file_), kp, "unknown key '" + k + "' in a skip rule" + did_you_mean(k, names));
          }
          for (const auto& v : vals) converted.push_back(convert(v, *ks, loc_of(v, file_), kp));
        }
        rule.conditions.emplace_back(k, std::move(converted));
      }
      rules.push_back(std::move(rule));
    }
    return rules;
  }

  // plot: {x: seq, y: ms, ...} or a list of them (core/plot.h draws them).
  std::vector<PlotSpec> parse_plots(const Field& f, const KindInfo& kind) const {
    std::vector<YAML::Node> maps;
    std::vector<std::string> paths;
    if (f.node.IsMap()) {
      maps.push_back(f.node);
      paths.push_back(f.path);
    } else if (f.node.IsSequence() && f.node.size() > 0) {
      for (size_t i = 0; i < f.node.size(); ++i) {
        maps.push_back(f.node[i]);
        paths.push_back(f.path + fmt::format("[{}]", i));
      }
    } else {
      throw spec_error(f.loc, f.path, std::string("expected a map like {x: seq, y: ms} or a non-empty list of them, got ") +
                                          node_kind(f.node));
    }
    const std::vector<std::string> known = {"x", "y", "book", "log_x", "log_y", "title"};
    std::vector<PlotSpec> plots;
    for (size_t i = 0; i < maps.size(); ++i) {
      const YAML::Node& m = maps[i];
      if (!m.IsMap()) throw spec_error(loc_of(m, file_), paths[i], std::string("expected a map like {x: seq, y: ms}, got ") + node_kind(m));
      PlotSpec p;
      bool has_x = false;
      for (auto it = m.begin(); it != m.end(); ++it) {
        const std::string k = it->first.Scalar();
        const std::string kp = paths[i] + "." + k;
        const SourceLoc vl = it->second.IsNull() ? loc_of(it->first, file_) : loc_of(it->second, file_);
        if (k == "x") {
          p.x = scalar_text(it->second, kp, vl);
          const KeySpec* ks = find_key(kind.keys, p.x);
          if (!ks) {
            std::vector<std::string> names;
            for (const auto& x : kind.keys) names.push_back(x.name);
            throw spec_error(vl, kp, "'" + p.x + "' is not a key of kind " + kind.name + did_you_mean(p.x, names));
          }
          if (ks->type != ParamType::Int && ks->type != ParamType::Float && ks->type != ParamType::Bytes &&
              ks->type != ParamType::Seconds)
            throw spec_error(vl, kp, "'" + p.x + "' is a " + to_string(ks->type) + " key: the x axis needs an integer, number, size or duration key");
          has_x = true;
        } else if (k == "y") {
          p.y.clear();
          for (const auto& v : string_list(Field{it->second, vl, kp})) {
            if (v.empty()) throw spec_error(vl, kp, "expected a name, got an empty text");
            if (std::find(p.y.begin(), p.y.end(), v) != p.y.end()) throw spec_error(vl, kp, "'" + v + "' is listed twice");
            p.y.push_back(v);
          }
        } else if (k == "book" || k == "title") {
          std::string v = scalar_text(it->second, kp, vl);
          if (v.empty() && k != "title") throw spec_error(vl, kp, "expected a name, got an empty text");
          (k == "book" ? p.book : p.title) = v;
        } else if (k == "log_x" || k == "log_y") {
          KeySpec b = key(k, ParamType::Bool, "");
          const bool v = std::get<bool>(convert(it->second, b, vl, kp));
          (k == "log_x" ? p.log_x : p.log_y) = v;
        } else {
          throw spec_error(loc_of(it->first, file_), kp, "unknown key '" + k + "' in plot" + did_you_mean(k, known));
        }
      }
      if (!has_x) throw spec_error(loc_of(m, file_), paths[i], "a plot needs x: the numeric parameter on the x axis");
      plots.push_back(std::move(p));
    }
    return plots;
  }

  SummarySpec parse_summary(const Field& f, const KindInfo& kind) const {
    if (!f.node.IsMap()) throw spec_error(f.loc, f.path, std::string("expected a map {claim, figure, role, holds}, got ") + node_kind(f.node));
    SummarySpec sum;
    for (auto it = f.node.begin(); it != f.node.end(); ++it) {
      const std::string k = it->first.Scalar();
      const std::string kp = f.path + "." + k;
      if (k == "claim") sum.claim = scalar_text(it->second, kp);
      else if (k == "figure") sum.figure = scalar_text(it->second, kp);
      else if (k == "role") {
        sum.role = scalar_text(it->second, kp);
        const std::vector<std::string> roles = kind_roles(kind);
        if (std::find(roles.begin(), roles.end(), sum.role) == roles.end())
          throw spec_error(loc_of(it->second, file_), kp, "no variant of kind " + kind.name + " plays the role '" + sum.role + "'" +
                                                              did_you_mean(sum.role, roles));
      } else if (k == "holds") {
        std::vector<YAML::Node> items;
        if (it->second.IsSequence())
          for (size_t i = 0; i < it->second.size(); ++i) items.push_back(it->second[i]);
        else
          items.push_back(it->second);
        for (const auto& n : items) {
          const SourceLoc vl = loc_of(n, file_);
          const std::string h = scalar_text(n, kp);
          auto starts = [&](const char* p) { return h.rfind(p, 0) == 0; };
          double x = 0;
          if (h == "faster") {
          } else if (starts("grows with ") || starts("shrinks with ")) {
            const std::string key = h.substr(h.find(" with ") + 6);
            if (!find_key(kind.keys, key)) throw spec_error(vl, kp, "'" + key + "' is not a key of kind " + kind.name);
          } else if (((starts("below ") || starts("above ")) && parse_float(h.substr(6), &x)) ||
                     ((starts("at least ") || starts("at most ")) && parse_float(h.substr(h.find(' ', 3) + 1), &x))) {
          } else {
            throw spec_error(vl, kp, "expected faster, grows with <key>, shrinks with <key>, below <n>, above <n>, at least <n> or "
                                     "at most <n>, got '" + h + "'");
          }
          sum.holds.push_back(h);
        }
      } else {
        throw spec_error(loc_of(it->first, file_), kp, "unknown key '" + k + "' in summary" + did_you_mean(k, {"claim", "figure", "role", "holds"}));
      }
    }
    return sum;
  }

  // Rows = the product of the axes' lengths × the variants, saturating; past opt_.max_rows the
  // experiment is refused, naming the axes that make it.
  void check_row_count(const ExperimentSpec& ex, const std::string& path) const {
    int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(ex.variants.size()));
    std::string factors;
    for (const auto& a : ex.axes) {
      const int64_t n = static_cast<int64_t>(a.values.size());
      rows = rows > std::numeric_limits<int64_t>::max() / n ? std::numeric_limits<int64_t>::max() : rows * n;
      if (n > 1) factors += fmt::format("{} {} × ", n, a.key);
    }
    if (rows <= opt_.max_rows) return;
    throw spec_error(ex.loc, path,
                     fmt::format("the sweep has {}{} rows ({}{} variant{}), past the limit of {} rows an experiment may have (--max-rows raises it)",
                                 rows == std::numeric_limits<int64_t>::max() ? "more than " : "", rows, factors, ex.variants.size(),
                                 ex.variants.size() == 1 ? "" : "s", opt_.max_rows));
  }

  Book parse_book(const Field& f, const KindInfo& kind) const {
    if (!f.node.IsMap()) throw spec_error(f.loc, f.path, std::string("expected a map with source and rows, got ") + node_kind(f.node));
    Book book;
    for (auto it = f.node.begin(); it != f.node.end(); ++it) {
      std::string k = it->first.Scalar();
      std::string kp = f.path + "." + k;
      if (k == "source") book.source = scalar_text(it->second, kp);
      else if (k == "note") book.note = scalar_text(it->second, kp);
      else if (k == "rows") {
        // A copy: the iterator's -> yields a proxy that dies at the end of the statement, so a reference would dangle.
        const YAML::Node rows = it->second;
        if (!rows.IsSequence()) throw spec_error(loc_of(rows, file_), kp, "expected a list of rows");
        for (size_t i = 0; i < rows.size(); ++i) {
          std::string rp = kp + fmt::format("[{}]", i);
          if (!rows[i].IsMap()) throw spec_error(loc_of(rows[i], file_), rp, "expected a map of keys and figures");
          BookRow row;
          for (auto jt = rows[i].begin(); jt != rows[i].end(); ++jt) {
            std::string rk = jt->first.Scalar();
            std::string fp = rp + "." + rk;
            SourceLoc vl = loc_of(jt->second, file_);
            if (rk == "variant") {
              std::string v = scalar_text(jt->second, fp);
              check_variant(kind, v, vl, fp);
              row.match.emplace_back(rk, v);
            } else if (rk == "role") {
              std::string v = scalar_text(jt->second, fp);
              const std::vector<std::string> roles = kind_roles(kind);
              if (std::find(roles.begin(), roles.end(), v) == roles.end()) {
                std::string list;
                for (const auto& r : roles) list += (list.empty() ? "" : ", ") + r;
                throw spec_error(vl, fp, "no variant of kind " + kind.name + " plays the role '" + v + "' (roles: " + list + ")" +
                                             did_you_mean(v, roles));
              }
              row.match.emplace_back(rk, v);
            } else if (const KeySpec* ks = find_key(kind.keys, rk)) {
              row.match.emplace_back(rk, convert(jt->second, *ks, vl, fp));
            } else {
              bool ident = !rk.empty() && (std::islower(static_cast<unsigned char>(rk[0])) || rk[0] == '_');
              for (char c : rk) ident = ident && (std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_');
              if (!ident) throw spec_error(loc_of(jt->first, file_), fp, "a figure name is lower_case_with_underscores");
              if (!jt->second.IsScalar()) throw spec_error(vl, fp, "a figure is a number or a short text");
              double d = 0;
              if (parse_float(jt->second.Scalar(), &d)) row.figures.emplace_back(rk, d);
              else row.figures.emplace_back(rk, jt->second.Scalar());
            }
          }
          if (row.figures.empty()) throw spec_error(loc_of(rows[i], file_), rp, "a book row needs at least one figure");
          book.rows.push_back(std::move(row));
        }
      } else {
        throw spec_error(loc_of(it->first, file_), kp, "unknown key '" + k + "' in book" + did_you_mean(k, {"source", "note", "rows"}));
      }
    }
    return book;
  }

  nlohmann::json resolved_json(const ExperimentSpec& ex) const {
    nlohmann::json j;
    j["name"] = ex.name;
    j["kind"] = ex.kind;
    if (!ex.description.empty()) j["description"] = ex.description;
    j["variants"] = ex.variants;
    j["baseline"] = ex.baseline.empty() ? nlohmann::json(nullptr) : nlohmann::json(ex.baseline);
    nlohmann::json axes = nlohmann::json::object();
    for (const auto& a : ex.axes) {
      nlohmann::json vals = nlohmann::json::array();
      for (const auto& v : a.values) vals.push_back(value_to_json(v));
      axes[a.key] = vals;
    }
    j["params"] = axes;
    nlohmann::json skip = nlohmann::json::array();
    for (const auto& r : ex.skip) {
      nlohmann::json rj = nlohmann::json::object();
      for (const auto& [k, vals] : r.conditions) {
        nlohmann::json vj = nlohmann::json::array();
        for (const auto& v : vals) vj.push_back(value_to_json(v));
        rj[k] = vj;
      }
      skip.push_back(rj);
    }
    j["skip"] = skip;
    const RunControl& c = ex.control;
    j["control"] = {{"warmup", c.warmup}, {"min_samples", c.min_samples}, {"min_time", c.min_time},
                    {"max_noise", c.max_noise}, {"timeout", c.timeout},    {"cold_l2", c.cold_l2},
                    {"memory_limit", c.memory_limit}, {"seed", c.seed}};
    j["cpu_overrides_applied"] = ex.cpu_overrides_applied;
    if (!ex.book.empty()) {
      nlohmann::json b;
      b["source"] = ex.book.source;
      if (!ex.book.note.empty()) b["note"] = ex.book.note;
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& r : ex.book.rows) {
        nlohmann::json rj = nlohmann::json::object();
        for (const auto& [k, v] : r.match) rj[k] = value_to_json(v);
        for (const auto& [k, v] : r.figures) rj[k] = v;
        rows.push_back(rj);
      }
      b["rows"] = rows;
      j["book"] = b;
    }
    if (!ex.columns.empty()) j["columns"] = ex.columns;
    if (!ex.summary.empty()) j["summary"] = summary_to_json(ex.summary);
    if (!ex.plots.empty()) {
      nlohmann::json plots = nlohmann::json::array();
      for (const auto& p : ex.plots) plots.push_back(plot_to_json(p));
      j["plot"] = plots;
    }
    return j;
  }

  mutable std::map<std::string, SourceLoc> key_locs_;
};

// A spec is text a person writes: 64 MiB is far past any (an axis of 100,000 values is ~1 MiB).
std::string read_file(const std::string& path) { return read_input_file(path, uint64_t{64} << 20); }

}  // namespace

nlohmann::json plot_to_json(const PlotSpec& p) {
  nlohmann::json j = {{"x", p.x}, {"y", p.y.size() == 1 ? nlohmann::json(p.y[0]) : nlohmann::json(p.y)}};
  if (!p.book.empty()) j["book"] = p.book;
  if (p.log_x) j["log_x"] = *p.log_x;
  if (p.log_y) j["log_y"] = *p.log_y;
  if (!p.title.empty()) j["title"] = p.title;
  return j;
}

PlotSpec plot_from_json(const nlohmann::json& j) {
  PlotSpec p;
  p.x = j.at("x").get<std::string>();
  if (j.contains("y")) p.y = j.at("y").is_array() ? j.at("y").get<std::vector<std::string>>() : std::vector<std::string>{j.at("y").get<std::string>()};
  // The spec parser refuses these; a results.json edited by hand must not get further (#19).
  if (p.x.empty() || p.y.empty() || std::any_of(p.y.begin(), p.y.end(), [](const std::string& y) { return y.empty(); }))
    throw std::runtime_error("/spec/plot: a plot needs an x and at least one y, none empty");
  p.book = j.value("book", std::string());
  if (j.contains("log_x")) p.log_x = j.at("log_x").get<bool>();
  if (j.contains("log_y")) p.log_y = j.at("log_y").get<bool>();
  p.title = j.value("title", std::string());
  return p;
}

nlohmann::json summary_to_json(const SummarySpec& s) {
  return {{"claim", s.claim}, {"figure", s.figure}, {"role", s.role}, {"holds", s.holds}};
}

SummarySpec summary_from_json(const nlohmann::json& j) {
  SummarySpec s;
  s.claim = j.value("claim", std::string());
  s.figure = j.value("figure", std::string());
  s.role = j.value("role", std::string());
  s.holds = j.value("holds", std::vector<std::string>{});
  return s;
}

const std::vector<KeySpec>& common_keys() {
  static const std::vector<KeySpec> keys = [] {
    std::vector<KeySpec> k = {
        key("name", ParamType::String, "unique name of the experiment (letters, digits, '-', '_'); required"),
        key("kind", ParamType::String, "experiment kind (see below); required"),
        key("description", ParamType::String, "one line shown above the table", Value(std::string())),
        key("variants", ParamType::String, "variants to run, baseline first (default: every variant of the kind for the backend)"),
        key("baseline", ParamType::String, "variant the others are compared with (speedup, verdict); 'none' for no comparison",
            Value(std::string("none"))),
        key("skip", ParamType::String, "list of rules {key: value(s), variant: name(s)}: matching rows are not run"),
        key("book", ParamType::String,
            "the chapter's figures: {source, note, rows: [{<param>: v, role: r, <figure>: number}]}; `role` matches every "
            "variant that plays it on any backend (cpu_flash plays flash2, cpu_X plays X), `variant` one variant by name"),
        key("plot", ParamType::String,
            "SVG plots written beside the tables: {x: a numeric param, y: ms, speedup, tflops, gbps or a metric's name (or a list "
            "of them), book: the figure to show, log_x, log_y, title}, or a list of such maps; one line per variant and "
            "combination of the other varying params"),
        key("cpu", ParamType::String, "map of keys that replace these on the CPU backend (scaled sizes)"),
        key("columns", ParamType::String,
            "the columns of the stdout table besides variant and the varying params (report.md, CSV and JSON keep every "
            "one): ms, tflops, pct_gemm, gbps, pct_copy, peak_mem, speedup, verdict, book (every book figure) or book_<figure>, "
            "check, samples, stop, note, or a metric's name; default ms, tflops, gbps, speedup, book, check, note; "
            "`--columns all|LIST` overrides"),
        key("summary", ParamType::String,
            "the experiment's line in the run's summary: {claim: the chapter's claim in words, figure: the column summarised "
            "(default ms; overhead = 100·(1/speedup − 1) %), role: only the rows of that role, holds: a check or a list of "
            "them — faster, grows with <param>, shrinks with <param>, below <n>, above <n>, at least <n>, at most <n>}"),
    };
    for (const auto& c : control_keys()) k.push_back(c);
    return k;
  }();
  return keys;
}

Spec parse_spec(const std::string& text, const std::string& file, const SpecOptions& options) {
  return SpecParser(file, options).parse(text);
}

Spec load_spec(const std::string& path, const SpecOptions& options) {
  return parse_spec(read_file(path), path, options);
}

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
  out += "Top level: `version` (1), `description`, `defaults` (any experiment key, applied to every experiment "
         "whose kind has it), `experiments` (the list).\n\n";
  out += "#### Keys of every experiment\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& k : common_keys()) {
    bool structural = kStructuralKeys.count(k.name) > 0;
    out += fmt::format("| `{}` | {} | {} | {} |\n", k.name, structural ? "—" : to_string(k.type),
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
      out += fmt::format("| `{}` | {} | {} | {} |\n", v.name, v.host ? "host (any)" : to_string(v.backend), uses.empty() ? "all" : uses, v.doc);
    }
  }
  return out;
}

}  // namespace ib
