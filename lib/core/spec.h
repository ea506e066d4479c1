// YAML experiment specs -> validated, typed experiments with their sweep axes.
//
// A spec file:
//   version: 1
//   description: ...
//   defaults: {warmup: 5}          # any experiment key, applied to every experiment
//   experiments:
//     - name: copy-bandwidth
//       kind: ceiling
//       variants: [copy]
//       bytes: [256MiB, 1GiB]      # a list is an axis of the sweep
//       skip: [{bytes: 1GiB, variant: copy}]
//       book: {source: "...", rows: [{variant: copy, gbps: 1555}]}
//       cpu: {variants: [memcpy], bytes: 64MiB}   # replaces keys on the CPU backend
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/backend.h"
#include "core/errors.h"
#include "core/value.h"

namespace ib {

// How a row is measured. Precedence: built-in defaults < spec `defaults:` < the experiment <
// its `cpu:` block (CPU backend) < --set < command-line flags.
struct RunControl {
  int64_t warmup = 3;        // unmeasured runs after validation
  int64_t min_samples = 10;  // at least this many samples
  double min_time = 0.25;    // and at least this much measured time (s)
  double max_noise = 0.01;   // stop when relative stdev falls below this
  double timeout = 10.0;     // wall-clock cap per row (s); the row names what was unmet
  bool cold_l2 = false;      // flush caches before every sample
  int64_t memory_limit = 0;  // bytes; 0 = the real card/host
  int64_t seed = 20260101;   // inputs are fresh random data from this seed
};

// Command-line overrides of RunControl (set only when the flag was given).
struct RunControlOverrides {
  std::optional<int64_t> warmup, min_samples, memory_limit, seed;
  std::optional<double> min_time, max_noise, timeout;
  std::optional<bool> cold_l2;
};

struct Axis {
  std::string key;
  ParamType type = ParamType::Int;
  std::vector<Value> values;  // one value: a constant
};

struct SkipRule {
  // Every condition must hold: key equals one of the values ("variant" matches the variant).
  std::vector<std::pair<std::string, std::vector<Value>>> conditions;
};

// A chapter figure: a number, or a short text ("< 100", "~25", "1.5-2", "OOM").
using BookFigure = std::variant<double, std::string>;
// Its JSON (results.json: a number or a string), and back (any other JSON becomes its text).
nlohmann::json figure_to_json(const BookFigure& f);
BookFigure figure_from_json(const nlohmann::json& j);

struct BookRow {
  std::vector<std::pair<std::string, Value>> match;         // params and/or "variant"
  std::vector<std::pair<std::string, BookFigure>> figures;  // the chapter's numbers
};

struct Book {
  std::string source;  // "Chapter 8, §8.1, A100"
  std::string note;
  std::vector<BookRow> rows;
  bool empty() const { return rows.empty(); }
};

// A plot of the experiment's rows (core/plot.h renders it): `plot: {x: seq, y: ms}` or a list.
struct PlotSpec {
  std::string x;  // a numeric parameter of the kind (int, float, bytes, seconds)
  // ms | speedup | tflops | gbps | a metric's key, as in the table; several share the y axis
  // (measured speedup beside the analytic prediction, say), one line style each.
  std::vector<std::string> y = {"ms"};
  std::string book;           // the book figure drawn beside y ("" = the figure named like y)
  std::optional<bool> log_x;  // unset: log when every value is positive and they span >= 16x
  std::optional<bool> log_y;
  std::string title;  // "" = "<y> vs <x>"
};

nlohmann::json plot_to_json(const PlotSpec& p);
PlotSpec plot_from_json(const nlohmann::json& j);

// The experiment's line in the run's summary: the chapter's claim, the measured figure beside it
// and whether the measured shape is the claim's.
struct SummarySpec {
  std::string claim;  // the chapter's claim in words ("" = the experiment makes none)
  // The column summarised: ms, speedup, overhead (100·(1/speedup − 1) %), tflops, gbps or a
  // metric's key ("" = ms).
  std::string figure;
  std::string role;  // only the rows of the variants playing this role ("" = every row)
  // The shape checks, each: "faster" (every compared row's verdict), "grows with <param>" /
  // "shrinks with <param>" (the figure along that axis, per variant), "below <n>", "above <n>",
  // "at least <n>", "at most <n>" (every row).
  std::vector<std::string> holds;
  bool empty() const { return claim.empty() && figure.empty() && holds.empty() && role.empty(); }
};

nlohmann::json summary_to_json(const SummarySpec& s);
SummarySpec summary_from_json(const nlohmann::json& j);

struct ExperimentSpec {
  std::string name;
  std::string kind;
  std::string description;
  SourceLoc loc;
  std::vector<std::string> variants;
  std::string baseline;  // "" = no baseline
  std::vector<Axis> axes;
  std::vector<SkipRule> skip;
  Book book;
  std::vector<PlotSpec> plots;
  std::vector<std::string> columns;  // the stdout table's columns (besides variant and varying params); empty = the default
  SummarySpec summary;
  RunControl control;
  bool cpu_overrides_applied = false;              // the `cpu:` block replaced keys (scaled sizes)
  std::shared_ptr<const nlohmann::json> resolved;  // the experiment as run, for results.json
};

struct Spec {
  std::string file;
  std::string description;
  std::vector<ExperimentSpec> experiments;
};

struct SpecOptions {
  // An experiment whose sweep (axes × variants, before skip rules) has more rows is refused at
  // parse time: a typo'd axis must not start a billion-row run. --max-rows raises it.
  static constexpr int64_t kDefaultMaxRows = 100'000;
  int64_t max_rows = kDefaultMaxRows;
  Backend backend = Backend::Cpu;
  std::vector<std::string> sets;  // "key=value" or "experiment.key=value"
  RunControlOverrides overrides;
};

// Throws InputError ("file:line:col: key.path: message") on any problem.
Spec load_spec(const std::string& path, const SpecOptions& options);
Spec parse_spec(const std::string& text, const std::string& file, const SpecOptions& options);

// The keys every experiment accepts besides its kind's keys, for docs and suggestions.
const std::vector<KeySpec>& common_keys();

// The spec reference (`infer-bench keys`) is in core/spec_reference.h.

}  // namespace ib
