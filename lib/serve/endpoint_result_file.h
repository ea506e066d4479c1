// A load's per-request records as a file: the JSON vLLM's `benchmark_serving --save-result` writes
// (its readers and plotting scripts take it as is: duration, completed, token totals, throughputs,
// input_lens, output_lens, ttfts, itls, generated_texts, errors, and mean/median/std/p99 of TTFT,
// TPOT, ITL and E2E in ms), with our own records beside them under "infer_bench": each request's
// schedule, send, lag, chunk times, usage and failure, the load it belongs to and its shard. Shards
// of one load (`shard: i/N`, each sending its share of the seeded schedule from a common start)
// are joined by `infer-bench merge` into the report of the whole load.
#pragma once

#include <string>
#include <vector>

#include "serve/endpoint_load.h"
#include "serve/load_metrics.h"

namespace ib::serve {

struct EndpointResultFile {
  std::string endpoint, model, load;  // `load`: the whole (unsharded) workload, described
  int64_t workload_seed = 0;
  int shard = 0, shards = 1;
  double start_at = 0;  // the load's start, seconds since the Unix epoch (every shard's common start)
  double request_rate = 0, burstiness = 1;
  int max_concurrency = 0;
  Slo slo;
  EndpointLoadResult result;
};

// The file's text (vLLM's keys and ours).
std::string endpoint_result_json(const EndpointResultFile& f);
// Reads one back; InputError naming the file and key when it is not one of ours.
EndpointResultFile read_endpoint_result(const std::string& path);
// Joins the shards of one load: every shard 0..N-1 once, of the same load, endpoint and seed
// (InputError naming the file that differs or the shard missing); times are moved to the earliest
// shard's start. The result is the whole load's, as one client would have recorded it.
EndpointResultFile merge_endpoint_results(const std::vector<EndpointResultFile>& shards, const std::vector<std::string>& names);

// Request i of a load belongs to shard i mod N.
bool in_shard(int64_t request, int shard, int shards);
// "i/N" -> {i, N}; InputError naming the key for anything else.
std::pair<int, int> parse_shard(const std::string& text);

}  // namespace ib::serve
