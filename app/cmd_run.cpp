// infer-bench run SPEC.yaml: every experiment of a spec, dispatched by kind.
#include "cli.h"

namespace ib::app {

void register_run(Cli& cli) {
  static std::string spec;
  auto* sub = cli.app.add_subcommand("run", "Run every experiment of a YAML spec (e.g. experiments/chapter8.yaml)");
  sub->add_option("spec", spec, "the spec file")->required();
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
