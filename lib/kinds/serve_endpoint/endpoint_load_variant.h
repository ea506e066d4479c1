// The `serve-endpoint` kind's measurement (`infer-bench load`): one seeded workload sent to any
// OpenAI-compatible server over HTTP (ours, llama.cpp's llama-server, vLLM, SGLang), measured from
// the client's side with vLLM's definitions (serve/endpoint_metrics.h), with every request
// accounted for and the client's own lag and CPU use reported beside the numbers; variant paired
// sends the same requests to a baseline server in alternating turns. The passes and their
// metrics are endpoint_load_variant.cpp's, the prompts each pass sends endpoint_prompts.cpp's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "constrain/validator.h"
#include "core/stats.h"
#include "core/variant.h"
#include "kinds/serve_endpoint/endpoint_keys.h"
#include "model/chat_template.h"
#include "serve/endpoint_load.h"
#include "serve/endpoint_metrics.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {

// One request as a pass saw it, kept to pair it with the other server's answer to the same request.
struct ObservedRequest {
  bool ok = false, within_slo = false;
  bool parsed = false, valid = false;  // a response_schema load: the answer is JSON, and a document of the schema
  double ttft = 0, tpot = 0, e2e = 0;
  std::string text;
};

// One server's side of the measurement: its options, and what each pass measured.
struct ServerSide {
  EndpointOptions options;
  std::vector<EndpointSummary> runs;
  std::vector<std::vector<ObservedRequest>> observed;  // per pass, by request
  std::vector<double> prefix_hit;                      // % of prompt tokens, per pass the server's counters were read in
  size_t prefix_unread = 0;                            // passes they could not be read in
  // Speculative decoding by the server's counters, per pass it drafted in: drafted tokens, and %
  // of them kept.
  std::vector<double> spec_drafted, spec_kept;
  std::vector<double> parsed, valid, valid_goodput;  // per pass, a response_schema load's: % of completed, req/s
  size_t prompt_off = 0, sent = 0;
  std::string first_off;
  size_t chat_checked = 0, chat_off = 0;  // chat prompts whose server count was compared with the template's, and differed
  std::string first_chat_off;
};

// The metrics a pass's percentiles pair on: TTFT, TPOT and E2E, at the median and p99.
struct PairedMetric {
  const char* name;
  double ObservedRequest::*field;
  double q;
};
inline constexpr PairedMetric kPaired[] = {
    {"ttft p50", &ObservedRequest::ttft, 0.5}, {"ttft p99", &ObservedRequest::ttft, 0.99},
    {"tpot p50", &ObservedRequest::tpot, 0.5}, {"tpot p99", &ObservedRequest::tpot, 0.99},
    {"e2e p50", &ObservedRequest::e2e, 0.5},   {"e2e p99", &ObservedRequest::e2e, 0.99},
};

class EndpointLoad : public Variant {
 public:
  explicit EndpointLoad(bool paired) : paired_(paired) {}

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override;
  Validation validate(BackendRuntime&) override { throw std::logic_error("serve-endpoint measures itself"); }
  void run(BackendRuntime&) override { throw std::logic_error("serve-endpoint measures itself"); }

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override;

  std::vector<Metric> metrics() const override;

  std::string note() const override;

 private:
  // One pass of the load on one server; its duration.
  double run_pass(ServerSide& side, const std::vector<workload::Request>& trace, const std::vector<std::string>& texts,
                  const std::vector<int>& chat_counts, const std::string& save_to);

  // The endpoint against the baseline, request by request over every pass: each percentile's
  // ratio (baseline / endpoint: above 1 the endpoint is faster) with a paired bootstrap interval;
  // the share of requests whose greedy text is the baseline's (a lossless technique changes none);
  // goodput that counts a request only when it met the SLOs and its text is the baseline's.
  void pair_up();

  // Each metric's median over the passes: one pass of a load is one draw of its arrival timing
  // and of the machines' noise.
  std::vector<Metric> medians(const ServerSide& side) const;

  // Which draw of prompt tokens the next pass sends: one that no earlier pass of this process sent
  // to these servers (a sweep's rows reach one server one after another, and a server with a
  // prefix cache, llama.cpp's slots included, would find an earlier row's prompts). Different
  // servers of one sweep get the same draws, so they are sent the same requests.
  int next_draw() const;

  // Pass `pass`'s chat messages, and what the checkpoint's template makes of each (0: no
  // template). Seeded prompts are fitted so that the templated prompt is exactly the tokens asked:
  // token ids decoded to text do not tokenize back to as many (vLLM #10847: 10,000 asked, ~5,800
  // sent), so tokens are cut or added until they do. A dataset's texts are sent as they are.
  // Returns how many prompts the fitting left at another length, and the largest difference.
  std::pair<size_t, int> chat_prompts(const std::vector<workload::Request>& trace, int pass, std::vector<std::string>& texts,
                                      std::vector<int>& counts);

  // The seeded load with a draw's prompt tokens: the same arrivals and lengths, and within a pass
  // the same shared system prompt (and trace blocks), but nothing another draw sent. A dataset's
  // prompts keep their text: a fresh system prompt, or without one a fresh first token, keeps
  // another draw's cached prefix from matching.
  std::vector<workload::Request> fresh_tokens(int pass) const;

  // A trace's prompt of `n` tokens from its blocks: block h's tokens are drawn from a seed of h
  // (and the draw), so requests naming the same blocks share those tokens.
  std::vector<int32_t> block_tokens(const std::vector<int64_t>& hash_ids, size_t n, int pass, int64_t request) const;

  // Arrival times (and lengths and prompt blocks where the trace has them) from keys_.trace.
  std::string apply_trace();

  // Prompts (and output lengths) from keys_.dataset's conversations, in a seeded order.
  std::string apply_dataset();

  std::vector<Metric> metrics_of(const EndpointSummary& s) const;

  bool paired_;
  EndpointKeys keys_;
  uint64_t seed_ = 0;
  std::string api_key_, workload_, load_, saved_;
  int shard_ = 0, shards_ = 1;
  int vocab_ = 0;
  std::vector<workload::Request> base_;
  std::vector<std::vector<int64_t>> blocks_;  // per request, the trace's prompt blocks (empty: none)
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::shared_ptr<const model::ChatTemplate> chat_template_;  // api chat: the checkpoint's, to count prompts by
  int64_t warmups_ = 0;                                       // unmeasured passes run before the measured ones
  size_t chat_unfit_ = 0;  // chat prompts the fitting left at another length than asked, over the passes
  int worst_unfit_ = 0;
  constrain::SchemaValidator::json schema_;
  std::unique_ptr<constrain::SchemaValidator> validator_;  // keeps a reference to schema_
  std::string response_format_;
  std::vector<ServerSide> sides_;
  std::vector<Speedup> speedups_;
  std::string verdicts_;
  double same_text_ = 0, good_and_same_ = 0;
};

}  // namespace ib::serve
