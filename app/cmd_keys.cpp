// infer-bench keys: the spec reference (every key of every kind), as in docs/spec-reference.md.
#include <cstdio>

#include "cli.h"
#include "core/spec_reference.h"

namespace ib::app {

void register_keys(Cli& cli) {
  cli.app.add_subcommand("keys", "Print the spec reference: every key of every experiment kind, and its variants")
      ->callback([&cli] {
        cli.action = [] {
          std::fputs(spec_reference_markdown().c_str(), stdout);
          return 0;
        };
      });
}

}  // namespace ib::app
