#include "kinds/serve_endpoint/endpoint_keys.h"

namespace ib::serve {

const ParamSet<EndpointKeys>& endpoint_keys() {
  using P = EndpointKeys;
  static const ParamSet<EndpointKeys> set = [] {
    ParamSet<EndpointKeys> out;
    out.add(&P::endpoint, key_spec("endpoint", ParamType::String,
                                   "the server: http://HOST:PORT of an OpenAI-compatible API (infer-bench serve, "
                                   "llama.cpp's llama-server, vLLM, SGLang; both serve at port 8000 by default); a "
                                   "trailing /v1 is dropped",
                                   Value(std::string("http://127.0.0.1:8000"))));
    out.add(&P::baseline_endpoint,
            key_spec("baseline_endpoint", ParamType::String,
                     "variant paired: the server `endpoint` is compared with (the same model with the technique off), sent "
                     "the identical requests in alternating turns",
                     Value(std::string())));
    out.add(&P::served_model,
            key_spec("served_model", ParamType::String,
                     "the `model` every request names; empty: the first of each server's /v1/models", Value(std::string())));
    out.add(&P::weights, key_spec("weights", ParamType::String,
                                  "the checkpoint the server serves (a Hugging Face directory or a GGUF file): its "
                                  "vocabulary for token-id prompts, its tokenizer for chat texts",
                                  Value(std::string())));
    out.add(&P::api, enum_key("api",
                              "completions: /v1/completions with prompts as token ids (their lengths exact, checked "
                              "against the server's usage); chat: /v1/chat/completions with one user message of "
                              "decoded text, fitted so that the checkpoint's chat template makes the prompt exactly the "
                              "tokens asked (checked against the server's usage)",
                              "completions", {"completions", "chat"}));
    out.add(&P::api_key_env, key_spec("api_key_env", ParamType::String,
                                      "the environment variable holding the server's API key (sent as a bearer token); "
                                      "empty: none",
                                      Value(std::string())));
    add_workload_keys(out);
    out.add(&P::dataset,
            key_spec("dataset", ParamType::String,
                     "ShareGPT-style conversations (JSON Lines, or a JSON array): each request's prompt is a "
                     "conversation's first user turn, tokenized by `weights`, and its output the answer's token count "
                     "(vLLM's sharegpt dataset: seeded order, prompts or answers under 4 tokens, prompts over 1,024 and "
                     "conversations over 2,048 left out); the prompt length keys do not apply; empty: seeded tokens",
                     Value(std::string())));
    out.add(&P::dataset_output_len,
            key_spec("dataset_output_len", ParamType::Int,
                     "output tokens of a dataset request (vLLM's --sharegpt-output-len); 0: the answer's own length",
                     Value(int64_t{0}), 0.0));
    out.add(&P::trace, key_spec("trace", ParamType::String,
                                "an arrival trace (JSON Lines, Mooncake's format: `timestamp`, and optionally "
                                "`input_length`, `output_length`, `hash_ids`): the first `requests` requests arrive at "
                                "its times (qps and arrival do not apply) with its lengths where it has them, and "
                                "requests sharing leading hash_ids share those prompt blocks; empty: seeded arrivals",
                                Value(std::string())));
    out.add(&P::trace_time_unit,
            enum_key("trace_time_unit", "the unit of the trace's timestamps (Mooncake's are ms)", "ms", {"ms", "s"}));
    out.add(&P::trace_block, key_spec("trace_block", ParamType::Int, "prompt tokens per trace hash id (Mooncake's 512)",
                                      Value(int64_t{512}), 1.0, 1 << 20));
    out.add(&P::duration,
            key_spec("duration", ParamType::Seconds,
                     "the load's schedule ends here: requests due at or after it are not sent (those sent run to their "
                     "end); 0: every request is sent",
                     Value(0.0), 0.0));
    out.add(&P::max_concurrency, key_spec("max_concurrency", ParamType::Int,
                                          "requests in flight at most (vLLM's --max-concurrency); a request due while "
                                          "all are busy waits for one; 0: no bound but the client's 512 threads",
                                          Value(int64_t{0}), 0.0, 512.0));
    out.add(&P::request_timeout,
            key_spec("request_timeout", ParamType::Seconds,
                     "a request that has not ended this long after it was sent fails as timed out", Value(300.0), 0.001));
    out.add(&P::max_send_lag,
            key_spec("max_send_lag", ParamType::Seconds,
                     "the client's audit: a request sent later than this after it was due (a free slot counted) is lagged, "
                     "and the row says how many (the client, not the server, would be the bottleneck)",
                     Value(0.01), 0.0));
    add_goodput_and_seed_keys(out);
    out.add(&P::shard, key_spec("shard", ParamType::String,
                                "i/N: this client sends only requests whose index is i mod N, at their times in the whole "
                                "load's seeded schedule (N clients on N machines: a Slurm job array's task i of N); "
                                "`infer-bench merge` joins their save_result files",
                                Value(std::string("0/1"))));
    out.add(&P::start_at, key_spec("start_at", ParamType::Float,
                                   "the load's start as seconds since the Unix epoch (every shard given the same), so "
                                   "shards send one schedule; 0: when the row starts",
                                   Value(0.0), 0.0));
    out.add(&P::response_schema,
            key_spec("response_schema", ParamType::String,
                     "a JSON Schema file: every request asks for a document of it (response_format json_schema, no "
                     "ignore_eos: a document ends when it is complete), and each answer is checked by our validator, not "
                     "only parsed (`valid`, and `valid goodput` counting only valid documents within the SLOs); empty: none",
                     Value(std::string())));
    out.add(&P::save_result, key_spec("save_result", ParamType::String,
                                      "variant endpoint: write the first pass's requests here as vLLM's "
                                      "benchmark_serving --save-result JSON, our per-request records beside (empty: none)",
                                      Value(std::string())));
    return out;
  }();
  return set;
}

}  // namespace ib::serve
