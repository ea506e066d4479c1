// Results as Markdown (stdout, report.md), CSV (RFC 4180) and versioned JSON.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/runner.h"
#include "core/sysinfo.h"

namespace ib {

constexpr int kResultsSchemaVersion = 1;

struct RunMeta {
  std::vector<std::string> argv;
  std::string version;
  std::string git_sha;
  std::string started_utc;
  std::string finished_utc;  // empty while running
  Backend backend = Backend::Cpu;
  DeviceInfo device;
  Ceilings ceilings;
  std::string spec_file;
  bool interrupted = false;
  // Why the run stopped before its end, other than an interruption (bad input that only a
  // variant could see, a result file that could not be written); empty when it ran through.
  std::string error;
};

struct ResultSet {
  RunMeta meta;
  std::vector<ExperimentResult> experiments;
};

// "### name (kind)", the description and the row count: printed before an experiment runs.
std::string markdown_heading(const ExperimentSpec& spec, const SweepPlan& plan, Backend backend);
// How a table is printed. The default is report.md's: every column, unpadded.
struct TableOptions {
  // stdout's table: only the requested columns (besides variant and the varying params), padded
  // into aligned columns and fitted: the unrequested ones dropped past target_width, then the
  // requested ones and long cells shortened past max_width (0: no limit).
  bool compact = false;
  // compact: the columns to show ({"all"}: report.md's whole table); empty = the spec's `columns:`, else the default
  std::vector<std::string> columns;
  size_t target_width = 120;
  size_t max_width = 160;
};

// The line of constant parameters and the table (columns that never vary are folded above it).
// Book rows no row matches (a role this backend has no variant for, a point the sweep does not
// hold) are "(chapter)" rows with nothing measured in them.
std::string markdown_table(const ExperimentResult& result, const Ceilings& ceilings, const TableOptions& options = {});
// The experiment's line in the run's summary: the chapter's claim (spec `summary:`), the measured
// figure's range, and whether the measured shape is the claim's.
std::string summary_line(const ExperimentResult& e, const Ceilings& c);
// "## Summary" and one list item per experiment.
std::string markdown_summary(const ResultSet& results);
// The line under every plot's title: device, backend, version and git revision.
std::string plot_subtitle(const RunMeta& m);
// report.md: the run's metadata, then every experiment's heading, table and plots (links to the
// SVG files write_plots puts beside it).
std::string markdown_report(const ResultSet& results);
// Writes every experiment's plots (core/plot.h) into `dir`, each atomically and named `prefix` +
// its file name; returns the names written. `skipped` (optional) receives one line per declared
// plot without data.
std::vector<std::string> write_plots(const ResultSet& results, const std::string& dir,
                                     std::vector<std::string>* skipped = nullptr, const std::string& prefix = "");

std::string csv_report(const ResultSet& results);

nlohmann::json json_report(const ResultSet& results);
// Reads a results.json back (checks the schema version; throws std::runtime_error).
ResultSet results_from_json(const nlohmann::json& j);

// Text for a Markdown table cell: '|' escaped, line breaks as spaces.
std::string md_escape(const std::string& s);

// RFC 4180 field quoting.
std::string csv_field(const std::string& s);

}  // namespace ib
