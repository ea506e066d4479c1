// infer-bench compare BASE.json NEW.json: two runs row by row (your card beside results/h200/, a
// build beside the previous one).
#include "cli.h"

namespace ib::app {

void register_compare(Cli& cli) {
  static std::string base, next;
  static CompareFileOptions o;
  auto* sub = cli.app.add_subcommand(
      "compare", "Compare two results.json row by row: new vs base speedup with its interval, status changes");
  sub->add_option("base", base, "the reference run's results.json")->required();
  sub->add_option("new", next, "the run to compare with it")->required();
  sub->add_option("--only", o.only, "compare only the named experiments (repeatable)")->allow_extra_args(false);
  sub->add_option("--format", o.format, "md or csv on stdout")->default_str("md");
  sub->add_option("--fail-slower", o.fail_slower,
                  "exit 1 when a row is slower than this (5% or 0.05), its whole interval included");
  sub->callback([&cli] { cli.action = [] { return compare_results_files(base, next, o); }; });
}

}  // namespace ib::app
