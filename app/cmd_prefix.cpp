// infer-bench prefix [SPEC]: the prefix-caching experiments (experiments/prefix.yaml).
#include "cli.h"

namespace ib::app {

void register_prefix(Cli& cli) {
  static std::string spec = "experiments/prefix.yaml";
  auto* sub = cli.app.add_subcommand(
      "prefix", "Prefix caching (§8.4): block hashes (vLLM) and a radix tree (SGLang) vs none; TTFT, hit rate, cost");
  sub->add_option("spec", spec, "the spec file")->default_str("experiments/prefix.yaml");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
