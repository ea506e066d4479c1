// infer-bench decode [SPEC]: the metrics experiments on the engine (experiments/decode.yaml).
#include "cli.h"

namespace ib::app {

void register_decode(Cli& cli) {
  static std::string spec = "experiments/decode.yaml";
  auto* sub = cli.app.add_subcommand(
      "decode", "The transformer engine: TTFT, TPOT, TPS, batch trade-off, CUDA Graphs, prefill cost");
  sub->add_option("spec", spec, "the spec file")->default_str("experiments/decode.yaml");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
