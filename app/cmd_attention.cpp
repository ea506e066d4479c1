// infer-bench attention [SPEC]: the FlashAttention experiments (experiments/attention.yaml).
#include "cli.h"

namespace ib::app {

void register_attention(Cli& cli) {
  static std::string spec = "experiments/attention.yaml";
  auto* sub = cli.app.add_subcommand(
      "attention", "FlashAttention (§8.1): standard vs flash1/flash2/flash3 on one layer; memory, ms, TFLOP/s, speedup");
  sub->add_option("spec", spec, "the spec file")->default_str("experiments/attention.yaml");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
