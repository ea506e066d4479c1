// Subcommands whose issue has not landed yet: each says so and exits 2, printing no results.
#include <cstdio>

#include "cli.h"

namespace ib::app {

void register_pending(Cli& cli) {
  struct Pending {
    const char* name;
    const char* what;
    const char* issue;
  };
  static const Pending pending[] = {
      {"kvcache", "KV memory, FP8/INT8 KV, PagedAttention, sliding window, StreamingLLM, H2O", "#5"},
  };
  for (const auto& p : pending) {
    auto* sub = cli.app.add_subcommand(p.name, std::string(p.what) + " (not implemented yet)");
    sub->allow_extras();
    sub->callback([&cli, &p] {
      cli.action = [&p] {
        std::fprintf(stderr, "infer-bench %s: not implemented yet (%s, issue %s); nothing was run\n", p.name, p.what, p.issue);
        return 2;
      };
    });
  }
}

}  // namespace ib::app
