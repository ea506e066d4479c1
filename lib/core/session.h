// What `run`, `list` and `info` do, independent of the command-line parser: resolve the
// backend, load and validate the spec, measure, print and write results.
#pragma once

#include <string>
#include <vector>

#include "core/spec.h"

namespace ib {

struct SessionOptions {
  std::vector<std::string> argv;
  std::string backend = "auto";          // auto | cuda | cpu
  std::string format = "md";            // stdout: md | csv | json
  std::string output;                    // run directory ("" = results/runs/<UTC>-<label>)
  std::vector<std::string> sets;         // --set overrides
  std::vector<std::string> only;         // run only these experiments
  RunControlOverrides overrides;
  bool quiet = false;
  bool profile = false;
};

// Exit codes: 0 every row measured; 1 some row FAILED; 2 bad input (thrown as InputError by
// the callee and turned into 2 by the app); 130 interrupted.
int run_spec_file(const std::string& path, const SessionOptions& options);
int list_spec_file(const std::string& path, const SessionOptions& options);
int show_info(const SessionOptions& options);

}  // namespace ib
