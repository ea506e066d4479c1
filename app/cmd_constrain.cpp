// infer-bench constrain [SPEC]: the constrained-decoding experiments (experiments/constrain.yaml).
#include "cli.h"

namespace ib::app {

void register_constrain(Cli& cli) {
  static std::string spec = "experiments/constrain.yaml";
  auto* sub = cli.app.add_subcommand(
      "constrain", "Constrained decoding (§8.5): JSON Schema -> regex -> DFA -> token masks; compile, mask, validity, jump-forward, overhead");
  sub->add_option("spec", spec, "the spec file")->default_str("experiments/constrain.yaml");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
