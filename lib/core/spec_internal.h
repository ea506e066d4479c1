// Shared by the spec parser's files (spec*.cpp): the key tables, the YAML helpers, the fields read
// from the spec and the SpecParser class, whose members are defined across those files by topic.
// Internal: only lib/core/spec*.cpp include it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/errors.h"
#include "core/registry.h"
#include "core/spec.h"
#include "core/value.h"

// A namespace of the spec parser's own (not a core-wide detail): the names here are generic.
namespace ib::spec_detail {

// Keys that are not parameters of a kind; handled by the parser itself.
extern const std::set<std::string> kStructuralKeys;

// Run-control and structural keys are never axes.
KeySpec key(std::string name, ParamType type, std::string doc, std::optional<Value> def = std::nullopt,
            std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);

// The run-control keys (warmup, min_samples, ...), with RunControl's defaults.
const std::vector<KeySpec>& control_keys();

SourceLoc loc_of(const YAML::Node& n, const std::string& file);
// "nothing", "a scalar", "a list", "a map": for "expected X, got Y".
const char* node_kind(const YAML::Node& n);
bool parse_int(const std::string& text, int64_t* out);
bool parse_float(const std::string& text, double* out);

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

  Spec parse(const std::string& text);  // spec.cpp

 private:
  std::string file_;
  const SpecOptions& opt_;

  // spec_yaml.cpp: YAML nodes, their locations and typed values.
  std::string scalar_text(const YAML::Node& n, const std::string& path) const;
  std::string scalar_text(const YAML::Node& n, const std::string& path, const SourceLoc& l) const;
  void read_map(const YAML::Node& m, const std::string& path, FieldMap* out) const;
  SourceLoc key_loc(const Field& f) const;
  Value convert(const YAML::Node& n, const KeySpec& ks, const SourceLoc& l, const std::string& path) const;
  std::vector<std::string> string_list(const Field& f) const;

  // spec.cpp: names, kinds, defaults and --set.
  const KindInfo* require_kind(const FieldMap& fields, const SourceLoc& where, const std::string& path) const;
  void check_name(const std::string& name, const Field& f) const;
  void check_defaults(const FieldMap& defaults, const std::vector<const KindInfo*>& kinds) const;
  void apply_sets(std::vector<FieldMap>* per_exp, const std::vector<const KindInfo*>& kinds) const;

  // spec_keys.cpp: which keys a kind accepts.
  static const KeySpec* find_key(const std::vector<KeySpec>& keys, const std::string& k);
  static bool accepts(const KindInfo& kind, const std::string& k);
  static std::vector<std::string> accepted_keys(const KindInfo& kind);

  // spec_experiment.cpp: one experiment from its merged fields.
  void check_variant(const KindInfo& kind, const std::string& v, const SourceLoc& l, const std::string& path) const;
  ExperimentSpec build(FieldMap fields, const KindInfo& kind, const SourceLoc& where, const std::string& path) const;
  void build_body(const FieldMap& fields, const KindInfo& kind, const std::string& path, Backend backend,
                  ExperimentSpec* ex) const;
  void check_row_count(const ExperimentSpec& ex, const std::string& path) const;

  // spec_sections.cpp: skip, plot, summary and book.
  std::vector<SkipRule> parse_skip(const Field& f, const KindInfo& kind) const;
  std::vector<PlotSpec> parse_plots(const Field& f, const KindInfo& kind) const;
  SummarySpec parse_summary(const Field& f, const KindInfo& kind) const;
  Book parse_book(const Field& f, const KindInfo& kind) const;

  // spec_json.cpp: the experiment as run, for results.json.
  nlohmann::json resolved_json(const ExperimentSpec& ex) const;

  mutable std::map<std::string, SourceLoc> key_locs_;
};

}  // namespace ib::spec_detail
