// infer-bench merge FILE... [-o OUT]: the shards of one load (`infer-bench load --set shard=i/N
// --set save_result=FILE`, N clients sending one seeded schedule from a common start_at) joined
// into the whole load's report: the same metrics one client would have measured, and a merged
// result file in vLLM's --save-result format.
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "core/output.h"
#include "serve/endpoint_metrics.h"
#include "serve/endpoint_result_file.h"

namespace ib::app {
namespace {

struct MergeFlags {
  std::vector<std::string> files;
  std::string output;
};

int run_merge(const MergeFlags& f) {
  std::vector<serve::EndpointResultFile> parts;
  for (const std::string& path : f.files) parts.push_back(serve::read_endpoint_result(path));
  const serve::EndpointResultFile merged = serve::merge_endpoint_results(parts, f.files);
  const serve::EndpointSummary s = serve::summarize_endpoint(merged.result, merged.slo, 1e9);
  size_t off = 0;
  for (const auto& r : merged.result.requests) off += r.failure.find("prompt tokens") != std::string::npos;
  std::string t = fmt::format("# {} at {}: {} shards merged\n\n{}\n\n", merged.model, merged.endpoint, parts.size(), merged.load);
  t += "| requests | completed | failed | prompt off | duration (s) | req/s | tok/s | ttft p50 (ms) | ttft p99 (ms) | tpot p50 "
       "(ms) "
       "| tpot p99 (ms) | itl p99 (ms) | e2e p50 (ms) | e2e p99 (ms) | lag p99 (ms) | client cpu (%) |\n";
  t += "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  t += fmt::format(
      "| {} | {} | {} | {} | {:.2f} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | {:.3g} | "
      "{:.2f} |\n",
      merged.result.requests.size(), s.completed, s.failed, off, s.duration, s.request_rate, s.output_rate, s.ttft.p50 * 1e3,
      s.ttft.p99 * 1e3, s.tpot.p50 * 1e3, s.tpot.p99 * 1e3, s.itl.p99 * 1e3, s.e2e.p50 * 1e3, s.e2e.p99 * 1e3, s.lag.p99 * 1e3,
      s.client_cpu * 100);
  if (s.failed > 0) t += "\n" + serve::describe_failures(s) + "\n";
  std::fputs(t.c_str(), stdout);
  if (!f.output.empty()) {
    write_file_atomic(f.output, serve::endpoint_result_json(merged));
    std::fprintf(stderr, "infer-bench merge: the whole load in %s\n", f.output.c_str());
  }
  return 0;
}

}  // namespace

void register_merge(Cli& cli) {
  static MergeFlags f;
  auto* sub = cli.app.add_subcommand(
      "merge",
      "Join the shards of one load (infer-bench load --set shard=i/N --set save_result=FILE) into the whole load's report");
  sub->add_option("files", f.files, "the shards' save_result files, every shard once")->required();
  sub->add_option("--output,-o", f.output, "write the merged load here (vLLM's --save-result format)");
  sub->callback([&cli] { cli.action = [] { return run_merge(f); }; });
}

}  // namespace ib::app
