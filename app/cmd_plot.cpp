// infer-bench plot RESULTS.json: redraw a run's SVG plots (e.g. with a spec's newer plot: blocks).
#include "cli.h"

namespace ib::app {

void register_plot(Cli& cli) {
  static std::string results, spec, output, prefix;
  static bool quiet = false;
  auto* sub = cli.app.add_subcommand("plot", "Draw the SVG plots of a results.json (the plot: blocks it recorded, or --spec's)");
  sub->add_option("results", results, "a results.json written by run (or a curated copy such as results/h200/chapter8.json)")
      ->required();
  sub->add_option("--spec", spec, "take the plot: blocks of this spec's experiments of the same name");
  sub->add_option("--output,-o", output, "directory for the SVG files (default: the results file's directory)");
  sub->add_option("--prefix", prefix, "prepended to every file name (e.g. chapter8-)");
  sub->add_flag("--quiet,-q", quiet, "no notes on stderr");
  sub->callback([&cli] { cli.action = [] { return plot_results_file(results, spec, output, prefix, quiet); }; });
}

}  // namespace ib::app
