#include "serve/server_metrics.h"

#include <fmt/format.h>

#include "serve/histogram.h"

namespace ib::serve {

std::string prometheus_metrics(const EngineCounters& c, const HttpCounters& h, const std::string& model_name) {
  std::string s;
  auto add = [&](const char* name, const char* type, const char* help, double v) {
    s += fmt::format("# HELP infer_bench_{} {}\n# TYPE infer_bench_{} {}\ninfer_bench_{}{{model_name=\"{}\"}} {}\n", name, help,
                     name, type, name, model_name, v);
  };
  add("requests_submitted_total", "counter", "requests the engine accepted", static_cast<double>(c.submitted));
  add("requests_finished_total", "counter", "requests that ended at EOS or max_tokens", static_cast<double>(c.finished));
  add("requests_cancelled_total", "counter", "requests whose client went away", static_cast<double>(c.cancelled));
  add("requests_failed_total", "counter", "requests the engine failed", static_cast<double>(c.failed));
  add("requests_refused_total", "counter", "requests answered with an error status", static_cast<double>(h.refused));
  add("http_requests_total", "counter", "completion requests received", static_cast<double>(h.requests));
  add("http_connections_total", "counter", "connections accepted", static_cast<double>(h.connections_accepted));
  add("http_connections_cut_total", "counter", "connections closed for not sending a whole request by --receive-deadline",
      static_cast<double>(h.connections_cut));
  add("prompt_tokens_total", "counter", "prompt tokens accepted", static_cast<double>(c.prompt_tokens));
  add("generation_tokens_total", "counter", "tokens generated", static_cast<double>(c.output_tokens));
  add("engine_steps_total", "counter", "forward passes of the scheduler", static_cast<double>(c.steps));
  add("num_requests_running", "gauge", "requests in the running batch", c.running);
  add("num_requests_waiting", "gauge", "requests queued", c.waiting);
  add("kv_reserved_tokens", "gauge", "KV-cache positions reserved by running requests", static_cast<double>(c.kv_reserved));
  if (c.kv_blocks_total > 0) {
    add("kv_blocks_used", "gauge", "paged KV blocks in use (running requests and cached prefixes)", c.kv_blocks_used);
    add("kv_blocks_total", "gauge", "paged KV blocks in the pool", c.kv_blocks_total);
    add("prefix_cache_entries", "gauge", "finished requests' sequences kept for prefix caching", c.cached_prefixes);
    add("prefix_cache_queries_total", "counter", "prompt tokens of admitted requests",
        static_cast<double>(c.prefix_query_tokens));
    add("prefix_cache_hits_total", "counter", "of those, found in the prefix cache", static_cast<double>(c.prefix_hit_tokens));
    add("num_preemptions_total", "counter", "running requests preempted for blocks (recomputed or swapped)",
        static_cast<double>(c.preemptions));
    add("swapped_out_total", "counter", "preemptions by swap: K/V copied to host memory", static_cast<double>(c.swapped_out));
    add("swapped_in_total", "counter", "swapped requests readmitted: K/V copied back", static_cast<double>(c.swapped_in));
    add("swapped_tokens_total", "counter", "positions swapped out (not recomputed)", static_cast<double>(c.swapped_tokens));
    add("num_requests_swapped", "gauge", "waiting requests whose K/V is in host memory", c.swapped_requests);
    add("swap_bytes", "gauge", "host memory holding swapped K/V", static_cast<double>(c.swap_bytes));
  }
  add("spec_decode_draft_tokens_total", "counter", "tokens drafted by prompt lookup and verified (speculative decoding)",
      static_cast<double>(c.spec_drafted));
  add("spec_decode_accepted_tokens_total", "counter", "of those, kept", static_cast<double>(c.spec_accepted));
  // The same under vLLM's names, with its latency histograms, for dashboards made for vLLM.
  std::string label;
  for (char ch : model_name) label += ch == '"' || ch == '\\' ? std::string("\\") + ch : ch == '\n' ? "\\n" : std::string(1, ch);
  const std::string labels = fmt::format("model_name=\"{}\"", label);
  auto vllm = [&](const char* name, const char* type, const char* help, double v) {
    s += fmt::format("# HELP vllm:{} {}\n# TYPE vllm:{} {}\nvllm:{}{{{}}} {}\n", name, help, name, type, name, labels, v);
  };
  vllm("num_requests_running", "gauge", "requests in the running batch", c.running);
  vllm("num_requests_waiting", "gauge", "requests queued", c.waiting);
  vllm("prompt_tokens_total", "counter", "prompt tokens accepted", static_cast<double>(c.prompt_tokens));
  vllm("generation_tokens_total", "counter", "tokens generated", static_cast<double>(c.output_tokens));
  vllm("num_preemptions_total", "counter", "requests preempted", static_cast<double>(c.preemptions));
  vllm("spec_decode_num_draft_tokens_total", "counter", "draft tokens verified", static_cast<double>(c.spec_drafted));
  vllm("spec_decode_num_accepted_tokens_total", "counter", "of those, accepted", static_cast<double>(c.spec_accepted));
  if (c.kv_blocks_total > 0) {
    vllm("kv_cache_usage_perc", "gauge", "fraction of the paged KV blocks in use (1 = all)",
         static_cast<double>(c.kv_blocks_used) / c.kv_blocks_total);
    vllm("prefix_cache_queries_total", "counter", "prompt tokens looked up in the prefix cache",
         static_cast<double>(c.prefix_query_tokens));
    vllm("prefix_cache_hits_total", "counter", "of those, found", static_cast<double>(c.prefix_hit_tokens));
    vllm("num_requests_swapped", "gauge", "requests swapped to host memory (vLLM V0's)", c.swapped_requests);
  }
  s += prometheus_histogram("vllm:time_to_first_token_seconds", "time from a request's arrival to its first token", labels,
                            c.ttft);
  s += prometheus_histogram("vllm:inter_token_latency_seconds", "time between a request's tokens", labels, c.itl);
  s += prometheus_histogram("vllm:time_per_output_token_seconds", "a request's time per token after its first", labels, c.tpot);
  s += prometheus_histogram("vllm:e2e_request_latency_seconds", "time from a request's arrival to its last token", labels, c.e2e);
  s += prometheus_histogram("vllm:request_queue_time_seconds", "time a request waited before its first forward pass", labels,
                            c.queue);
  return s;
}

}  // namespace ib::serve
