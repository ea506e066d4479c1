// What `run`, `list` and `info` do, independent of the command-line parser: resolve the
// backend, load and validate the spec, measure, print and write results.
#pragma once

#include <string>
#include <vector>

#include "core/spec.h"

namespace ib {

struct SessionOptions {
  std::vector<std::string> argv;
  std::string backend = "auto";   // auto | cuda | cpu
  std::string format = "md";      // stdout: md | csv | json
  std::string output;             // run directory ("" = results/runs/<UTC>-<label>)
  std::vector<std::string> sets;  // --set overrides
  std::vector<std::string> only;  // run only these experiments
  RunControlOverrides overrides;
  int64_t max_rows = SpecOptions::kDefaultMaxRows;  // --max-rows
  std::vector<std::string> columns;                 // --columns: stdout tables' columns ({"all"}: every one; empty: each spec's)
  bool quiet = false;
  bool profile = false;
};

// Exit codes: 0 every row measured; 1 some row FAILED; 2 bad input (thrown as InputError by
// the callee and turned into 2 by the app); 3 a result file could not be written (OutputError);
// 130 interrupted.
int run_spec_file(const std::string& path, const SessionOptions& options);
int list_spec_file(const std::string& path, const SessionOptions& options);
int show_info(const SessionOptions& options);

struct CompareFileOptions {
  std::vector<std::string> only;  // experiments to compare (all by default)
  std::string format = "md";      // md | csv
  std::string fail_slower;        // "5%" or "0.05": exit 1 when a row is slower than that, its interval included
};

// `infer-bench compare BASE NEW`: core/compare.h on two results.json files, to stdout. Returns 0,
// or 1 when --fail-slower finds a slower row (listed on stderr); throws InputError on bad input.
int compare_results_files(const std::string& base_path, const std::string& new_path, const CompareFileOptions& options);

// `infer-bench plot`: redraws the plots of a results.json (written by `run`) into `out_dir`
// (default: beside the file), each named `prefix` + "<experiment>[-N].svg". With `spec_path`,
// the plot: blocks of that spec's experiments of the same name replace the recorded ones (to
// plot results measured before the spec declared them). Returns 0, or throws InputError (bad
// file, bad spec, nothing to plot).
int plot_results_file(const std::string& results_path, const std::string& spec_path, const std::string& out_dir,
                      const std::string& prefix, bool quiet);

}  // namespace ib
