// Command-line wiring shared by the subcommand files: the common options and how a
// subcommand registers the action it runs after parsing.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/session.h"

namespace ib::app {

struct CommonOptions {
  std::string backend = "auto";
  std::string format = "md";
  std::string output;
  std::vector<std::string> sets;
  std::vector<std::string> only;
  // kUnset: not given (any other value, negative ones included, is checked).
  static constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  int64_t warmup = kUnset, min_samples = kUnset, seed = kUnset;
  int64_t max_rows = kUnset;
  std::string min_time, max_noise, timeout, memory_limit;
  std::string columns;  // --columns: "all" or a comma-separated list ("" = each spec's)
  bool cold_l2 = false, profile = false, quiet = false;
};

struct Cli {
  CLI::App app;
  CommonOptions common;
  std::vector<std::string> argv;
  std::function<int()> action;  // set by the subcommand that was given

  // The common options as SessionOptions; throws InputError on malformed values.
  SessionOptions session() const;
};

// Registers common options on a subcommand that runs experiments.
void add_common_options(CLI::App* sub, CommonOptions& c, bool with_only);
// The options that change what `list` shows (it measures and writes nothing, so the output and
// stopping-rule flags would be silently ignored: they are refused instead).
void add_list_options(CLI::App* sub, CommonOptions& c);

void register_run(Cli& cli);
void register_list(Cli& cli);
void register_info(Cli& cli);
void register_keys(Cli& cli);
void register_plot(Cli& cli);
void register_compare(Cli& cli);
void register_serve(Cli& cli);
void register_load(Cli& cli);
void register_merge(Cli& cli);
// attention, constrain, decode, prefix, specdec, kvcache: one table (cmd_technique.cpp).
void register_techniques(Cli& cli);

}  // namespace ib::app
