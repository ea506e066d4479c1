// infer-bench list SPEC.yaml: the experiments and their expanded sweep, without running.
#include "cli.h"

namespace ib::app {

void register_list(Cli& cli) {
  static std::string spec;
  auto* sub = cli.app.add_subcommand("list", "Show a spec's experiments and every row it would run (with NVTX range names)");
  sub->add_option("spec", spec, "the spec file")->required();
  add_list_options(sub, cli.common);
  sub->callback([&cli] { cli.action = [&cli] { return list_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
