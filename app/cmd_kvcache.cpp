// infer-bench kvcache [SPEC]: the KV-cache experiments (experiments/kvcache.yaml).
#include "cli.h"

namespace ib::app {

void register_kvcache(Cli& cli) {
  static std::string spec = "experiments/kvcache.yaml";
  auto* sub = cli.app.add_subcommand(
      "kvcache", "KV cache (§8.3): memory per token, FP8/INT8 KV decode attention, PagedAttention, eviction policies");
  sub->add_option("spec", spec, "the spec file")->default_str("experiments/kvcache.yaml");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] { cli.action = [&cli] { return run_spec_file(spec, cli.session()); }; });
}

}  // namespace ib::app
