// infer-bench load [SPEC] --endpoint URL: a seeded workload sent to a running OpenAI-compatible
// server (ours, llama.cpp's llama-server, vLLM, SGLang) and measured from the client's side
// (kind serve-endpoint). The flags are shorthands for `--set` on the spec's keys, so a sweep,
// a report, a plot and `compare` work on its rows as on any other kind's.
#include <string>
#include <vector>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace ib::app {
namespace {

struct LoadFlags {
  std::string spec = "experiments/load.yaml";
  std::vector<std::string> endpoints;
  std::string weights, served_model, api, dataset, trace, duration;
  std::vector<double> qps;
  int64_t requests = -1, max_concurrency = -1, prompt_len = -1, output_len = -1;
};

// A YAML value for --set: JSON is YAML, so a string is quoted whatever it holds; several values
// are an axis.
template <class T>
std::string yaml_value(const std::vector<T>& v) {
  return v.size() == 1 ? nlohmann::json(v.front()).dump() : nlohmann::json(v).dump();
}

}  // namespace

void register_load(Cli& cli) {
  static LoadFlags f;
  auto* sub = cli.app.add_subcommand(
      "load",
      "A running OpenAI-compatible server (ours, llama.cpp, vLLM, SGLang) under a seeded load: TTFT/TPOT/ITL/E2E as vLLM "
      "defines them, every request accounted for, the client's own lag reported");
  sub->add_option("spec", f.spec, "the spec file")->default_str(f.spec);
  sub->add_option("--endpoint", f.endpoints, "the server, http://HOST:PORT (repeat it to measure several, one row each)")
      ->allow_extra_args(false);
  sub->add_option("--weights", f.weights, "the checkpoint the server serves (HF directory or GGUF): its vocabulary");
  sub->add_option("--served-model", f.served_model, "the `model` requests name (default: the server's first)");
  sub->add_option("--api", f.api, "completions (token-id prompts of exact lengths) or chat");
  sub->add_option("--qps", f.qps, "mean arrival rate (repeat it for a sweep)")->allow_extra_args(false);
  sub->add_option("--requests", f.requests, "requests in the load");
  sub->add_option("--max-concurrency", f.max_concurrency, "requests in flight at most (0: no bound)");
  sub->add_option("--prompt-len", f.prompt_len, "prompt tokens of a request");
  sub->add_option("--output-len", f.output_len, "output tokens of a request (all generated: ignore_eos)");
  sub->add_option("--dataset", f.dataset,
                  "ShareGPT-style conversations (JSON Lines or a JSON array): real prompts and output lengths");
  sub->add_option("--trace", f.trace, "a Mooncake-format JSON Lines trace: arrival times, lengths, shared prompt blocks");
  sub->add_option("--duration", f.duration, "the schedule ends here (e.g. 60s): requests due later are not sent");
  add_common_options(sub, cli.common, true);
  sub->callback([&cli] {
    std::vector<std::string>& sets = cli.common.sets;
    if (!f.endpoints.empty()) sets.push_back("endpoint=" + yaml_value(f.endpoints));
    if (!f.weights.empty()) sets.push_back("weights=" + nlohmann::json(f.weights).dump());
    if (!f.served_model.empty()) sets.push_back("served_model=" + nlohmann::json(f.served_model).dump());
    if (!f.api.empty()) sets.push_back("api=" + nlohmann::json(f.api).dump());
    if (!f.qps.empty()) sets.push_back("qps=" + yaml_value(f.qps));
    if (f.requests >= 0) sets.push_back(fmt::format("requests={}", f.requests));
    if (f.max_concurrency >= 0) sets.push_back(fmt::format("max_concurrency={}", f.max_concurrency));
    if (f.prompt_len >= 0) sets.push_back(fmt::format("prompt_len={}", f.prompt_len));
    if (f.output_len >= 0) sets.push_back(fmt::format("output_len={}", f.output_len));
    if (!f.dataset.empty()) sets.push_back("dataset=" + nlohmann::json(f.dataset).dump());
    if (!f.trace.empty()) sets.push_back("trace=" + nlohmann::json(f.trace).dump());
    if (!f.duration.empty()) sets.push_back("duration=" + nlohmann::json(f.duration).dump());
    cli.action = [&cli] { return run_spec_file(f.spec, cli.session()); };
  });
}

}  // namespace ib::app
