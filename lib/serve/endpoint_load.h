// A workload (workload/serving_load.h) sent to an OpenAI-compatible server over HTTP, as vLLM's serving
// benchmark sends it: each request at its seeded arrival time, streamed, at most max_concurrency
// in flight, and everything the client saw kept per request. The client audits itself: each
// request's send lag (its start past its arrival, net of waiting for a concurrency slot) and the
// client's CPU use are measured, so a row whose client could not keep up says so. A request the
// server refuses, times out, cuts, answers malformed or with another token count than asked fails
// with its reason and the load goes on; every request is accounted for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "workload/request.h"

namespace ib::serve {

struct EndpointOptions {
  std::string url;               // http://host:port (a trailing /v1 or / is dropped)
  std::string model;             // the `model` every request names
  bool chat = false;             // /v1/chat/completions with one user message (else /v1/completions)
  bool token_prompts = true;     // completions: prompts as token ids (else the texts below)
  std::string api_key;           // sent as a bearer token when set
  int max_concurrency = 0;       // requests in flight at most; 0: as many as arrive (up to kMaxClientThreads)
  double request_timeout = 300;  // seconds from a request's send to its last byte
  bool ignore_eos = true;        // every request generates max_tokens (vLLM's benchmark default)
  double start_at = 0;           // the load's start, seconds since the Unix epoch (shards share it); 0: now
  std::string response_format;   // JSON of an OpenAI response_format every request carries ("": none)
  static constexpr int kMaxClientThreads = 512;
};

// What the client saw of one request.
struct EndpointRecord {
  int64_t id = 0;
  char type = 's';
  int prompt_tokens = 0;  // sent (the workload's)
  int max_tokens = 0;
  double scheduled = 0;                          // its arrival in the load's schedule, seconds after the start
  double sent = 0;                               // the client began its HTTP request
  double lag = 0;                                // sent past max(scheduled, the moment a concurrency slot was free)
  double end = 0;                                // its last byte (or its failure)
  std::vector<double> output_times;              // chunks that carried output text
  int usage_prompt = -1, usage_completion = -1;  // the server's usage event (-1: none)
  int usage_cached = -1;                         // its prompt_tokens_details.cached_tokens (-1: none)
  std::string text, finish_reason;
  std::string failure;  // why it failed; "" when it completed as asked
};

struct EndpointLoadResult {
  std::vector<EndpointRecord> requests;  // by request id
  double duration = 0;                   // the load's start to the last request's end
  double start_epoch = 0;                // when the load started, seconds since the Unix epoch
  double client_cpu = 0;                 // the client process's CPU seconds over the load
  int threads = 0;                       // client threads that sent requests
};

// Sends `trace` (prompts as token ids; `texts[i]`, when given, is request i's prompt as text) and
// returns when every request has ended. `interrupted` is polled; when it returns true no further
// request is sent and those in flight are abandoned at their next byte.
EndpointLoadResult run_endpoint_load(const EndpointOptions& o, const std::vector<workload::Request>& trace,
                                     const std::vector<std::string>& texts = {}, bool (*interrupted)() = nullptr);

// GET /v1/models: the first model's id (a server serving one model), or throws InputError naming
// the URL and what went wrong (the server is down, or answered something else).
std::string endpoint_first_model(const std::string& url, const std::string& api_key, double timeout);

// The server's own counters from GET /metrics (Prometheus text, each summed over its labels), read
// before and after a pass so its rates are the server's account of the pass:
// - prefix cache (vLLM's and ours): vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total
//   (prompt tokens); absent where the server exports neither (llama.cpp, SGLang);
// - speculative decoding (vLLM's and ours): vllm:spec_decode_num_draft_tokens_total,
//   vllm:spec_decode_num_accepted_tokens_total; absent where the server does not speculate.
// nullopt when /metrics cannot be read.
struct PrefixCounters {
  double queries = 0, hits = 0;
};
struct SpecCounters {
  double drafted = 0, accepted = 0;
};
struct ServerCounters {
  std::optional<PrefixCounters> prefix;
  std::optional<SpecCounters> spec;
};
std::optional<ServerCounters> endpoint_counters(const std::string& url, const std::string& api_key, double timeout);

// True when this binary was built with an HTTP client (cpp-httplib).
bool endpoint_client_available();

}  // namespace ib::serve
