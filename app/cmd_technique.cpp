// infer-bench attention|constrain|decode|prefix|specdec|kvcache|lora [SPEC]: one subcommand per
// technique, each running its own spec (experiments/<name>.yaml) with the options `run` takes.
// They differ only in the row of the table below.
#include <array>
#include <iterator>
#include <string>

#include "cli.h"

namespace ib::app {
namespace {

struct Technique {
  const char* name;  // the subcommand, the kinds' group and the spec's stem
  const char* description;
};

// In the order `infer-bench --help` lists them.
constexpr Technique kTechniques[] = {
    {"attention", "FlashAttention (§8.1): standard vs flash1/flash2/flash3 on one layer; memory, ms, TFLOP/s, speedup"},
    {"constrain",
     "Constrained decoding (§8.5): JSON Schema -> regex -> DFA -> token masks; compile, mask, validity, jump-forward, overhead"},
    {"decode", "The transformer engine: TTFT, TPOT, TPS, batch trade-off, CUDA Graphs, prefill cost"},
    {"prefix", "Prefix caching (§8.4): block hashes (vLLM) and a radix tree (SGLang) vs none; TTFT, hit rate, cost"},
    {"specdec", "Speculative decoding (§8.2): draft model, n-gram, token trees and lookahead vs autoregressive, exact outputs"},
    {"kvcache", "KV cache (§8.3): memory per token, FP8/INT8 KV decode attention, PagedAttention, eviction policies"},
    {"lora", "LoRA serving: many adapters over one base model; batched low-rank products vs merged weights vs one at a time"},
};

}  // namespace

void register_techniques(Cli& cli) {
  static std::array<std::string, std::size(kTechniques)> specs;  // CLI11 writes the SPEC argument here
  for (size_t i = 0; i < specs.size(); ++i) {
    const Technique& t = kTechniques[i];
    std::string& spec = specs[i];
    const std::string default_spec = std::string("experiments/") + t.name + ".yaml";
    spec = default_spec;
    auto* sub = cli.app.add_subcommand(t.name, t.description);
    sub->add_option("spec", spec, "the spec file")->default_str(default_spec);
    add_common_options(sub, cli.common, true);
    sub->callback([&cli, &spec] { cli.action = [&cli, &spec] { return run_spec_file(spec, cli.session()); }; });
  }
}

}  // namespace ib::app
