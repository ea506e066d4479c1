// One experiment from its merged keys: the cpu: block, variants and baseline, run control, the
// sweep's axes (a list is an axis) with the kind's own check, and the row-count limit.
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/registry.h"
#include "core/spec_internal.h"

namespace ib::spec_detail {

void SpecParser::check_variant(const KindInfo& kind, const std::string& v, const SourceLoc& l, const std::string& path) const {
  if (find_variant(kind, v)) return;
  std::vector<std::string> names;
  std::string list;
  for (const auto& d : kind.variants) {
    names.push_back(d.name);
    list += (list.empty() ? "" : ", ") + d.name;
  }
  throw spec_error(l, path, "unknown variant '" + v + "' of kind " + kind.name + did_you_mean(v, names) + "; variants: " + list);
}

ExperimentSpec SpecParser::build(FieldMap fields, const KindInfo& kind, const SourceLoc& where, const std::string& path) const {
  // Unknown keys first: a typo should be named before anything it causes.
  for (const auto& [k, f] : fields.entries())
    if (!accepts(kind, k))
      throw spec_error(key_loc(f), f.path,
                       "unknown key '" + k + "' for kind " + kind.name + did_you_mean(k, accepted_keys(kind)));

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
        throw spec_error(key_loc(f), f.path,
                         "unknown key '" + k + "' for kind " + kind.name + did_you_mean(k, accepted_keys(kind)));
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

void SpecParser::build_body(const FieldMap& fields, const KindInfo& kind, const std::string& path, Backend backend,
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
      if (!seen.insert(ex->variants[i]).second) throw spec_error(l, f->path, "variant '" + ex->variants[i] + "' is listed twice");
    }
  } else {
    for (const auto& d : kind.variants)
      if (d.backend == backend || d.host) ex->variants.push_back(d.name);
    if (ex->variants.empty())
      throw spec_error(ex->loc, path,
                       std::string("kind ") + kind.name + " has no variant for the " + to_string(backend) +
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
      throw spec_error(l, p,
                       fmt::format("must be at most {}, got {}", std::numeric_limits<int32_t>::max(), std::get<int64_t>(v)));
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
    if (std::optional<KeyProblem> problem = kind.check(SpecKeyValues(std::move(all_values)))) {
      for (const auto& k : problem->keys)
        if (const Field* f = fields.get(k)) throw spec_error(f->loc, f->path, problem->message);
      throw spec_error(ex->loc, problem->keys.empty() ? path : path + "." + problem->keys[0], problem->message);
    }

  if (const Field* f = fields.get("skip")) ex->skip = parse_skip(*f, kind);
  if (const Field* f = fields.get("book")) ex->book = parse_book(*f, kind);
  if (const Field* f = fields.get("plot")) ex->plots = parse_plots(*f, kind);
  if (const Field* f = fields.get("columns")) ex->columns = string_list(*f);
  if (const Field* f = fields.get("summary")) ex->summary = parse_summary(*f, kind);
  ex->resolved = std::make_shared<const nlohmann::json>(resolved_json(*ex));
}

// Rows = the product of the axes' lengths × the variants, saturating; past opt_.max_rows the
// experiment is refused, naming the axes that make it.
void SpecParser::check_row_count(const ExperimentSpec& ex, const std::string& path) const {
  int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(ex.variants.size()));
  std::string factors;
  for (const auto& a : ex.axes) {
    const int64_t n = static_cast<int64_t>(a.values.size());
    rows = rows > std::numeric_limits<int64_t>::max() / n ? std::numeric_limits<int64_t>::max() : rows * n;
    if (n > 1) factors += fmt::format("{} {} × ", n, a.key);
  }
  if (rows <= opt_.max_rows) return;
  throw spec_error(
      ex.loc, path,
      fmt::format(
          "the sweep has {}{} rows ({}{} variant{}), past the limit of {} rows an experiment may have (--max-rows raises it)",
          rows == std::numeric_limits<int64_t>::max() ? "more than " : "", rows, factors, ex.variants.size(),
          ex.variants.size() == 1 ? "" : "s", opt_.max_rows));
}

}  // namespace ib::spec_detail
