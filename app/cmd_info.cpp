// infer-bench info: the device and its measured peaks (copy bandwidth, GEMM rate; on the CPU the FMA peak).
#include "cli.h"

namespace ib::app {

void register_info(Cli& cli) {
  auto* sub = cli.app.add_subcommand(
      "info", "Describe the device and measure its peaks (copy bandwidth, GEMM rate; on the CPU the FMA peak)");
  add_common_options(sub, cli.common, false);
  sub->callback([&cli] { cli.action = [&cli] { return show_info(cli.session()); }; });
}

}  // namespace ib::app
