// infer-bench specdec [SPEC]: the speculative decoding experiments (experiments/specdec.yaml).
#include "cli.h"

namespace ib::app {

void register_specdec(Cli& cli) {
  static std::string spec = "experiments/specdec.yaml";
  auto* sub = cli.app.add_subcommand(
      "specdec", "Speculative decoding (§8.2): draft model, n-gram, token trees and lookahead vs autoregressive, exact outputs");
  sub->add_option("spec", spec, "the spec file")->default_str("experiments/specdec.yaml");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
