// Kind `serve-endpoint` (`infer-bench load`): its declaration and its two variants, the client
// (`endpoint`) and the A/B comparison (`paired`); the measurement is endpoint_load_variant.h's.
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/registry.h"
#include "kinds/serve_endpoint/endpoint_keys.h"
#include "kinds/serve_endpoint/endpoint_load_variant.h"

namespace ib::serve {
namespace {

KindInfo endpoint_kind() {
  KindInfo k;
  k.name = "serve-endpoint";
  // Nothing listens on port 9 (discard): the rows are unsupported, saying so (a server is not ours
  // to start; tests/cli/load_test.py runs the client against `infer-bench serve`).
  k.smallest =
      "weights: data/models/ib-draft-1m\nendpoint: http://127.0.0.1:9\nbaseline_endpoint: http://127.0.0.1:9\nrequests: 2\n"
      "prompt_len: 8\noutput_len: 4\n";
  k.group = "load";
  k.doc =
      "A running OpenAI-compatible server under a seeded load sent over HTTP (infer-bench serve, llama.cpp's llama-server, "
      "vLLM, SGLang): requests at Poisson or bursty arrivals, streamed, at most max_concurrency in flight, prompts as token "
      "ids of exactly the lengths asked (checked against the server's usage). Measured from the client's side as vLLM's "
      "benchmark_serving defines it: TTFT, TPOT, ITL, E2E percentiles, request and token throughput, goodput under SLOs; "
      "every request accounted for (a refusal, timeout, cut stream, malformed event or wrong token count fails that "
      "request with its reason); the client's send lag and CPU use reported, so a row whose client could not keep up "
      "says so.";
  k.keys = endpoint_keys().keys();
  k.check = [](const auto& values) -> std::optional<KeyProblem> {
    const SpecValues<EndpointKeys> v(endpoint_keys(), values);
    const auto endpoints = v.field(&EndpointKeys::endpoint), weights = v.field(&EndpointKeys::weights);
    for (const std::string& e : endpoints.values)
      if (e.empty()) return KeyProblem{{endpoints.key}, fmt::format("{} is empty: http://HOST:PORT", endpoints.key)};
    for (const std::string& w : weights.values)
      if (w.empty())
        return KeyProblem{{weights.key},
                          fmt::format("{} is required: the checkpoint the server serves (its vocabulary)", weights.key)};
    for (const auto& urls : {endpoints, v.field(&EndpointKeys::baseline_endpoint)})
      for (const std::string& url : urls.values)
        if (!url.empty() && url.rfind("http://", 0) != 0)
          return KeyProblem{{urls.key}, fmt::format("'{}' is not http://HOST:PORT (https is not supported)", url)};
    return std::nullopt;
  };
  return k;
}

const KindRegistration endpoint_registration(endpoint_kind());

const VariantRegistration reg_endpoint(
    "serve-endpoint",
    peer({"endpoint",
          Backend::Cpu,
          "the client: the load sent over HTTP to the server at `endpoint`, streamed, measured "
          "at the client (the server runs wherever it runs; the client is host work on any backend)",
          {},
          true}),
    make_variant<EndpointLoad>(false));
const VariantRegistration reg_paired("serve-endpoint",
                                     peer({"paired",
                                           Backend::Cpu,
                                           "A/B: the identical seeded requests sent to `endpoint` and to `baseline_endpoint` in "
                                           "alternating turns; each percentile's ratio with a paired bootstrap interval and a "
                                           "verdict, the share of identical greedy texts, and goodput counting only requests "
                                           "within the SLOs whose text is the baseline's",
                                           {},
                                           true}),
                                     make_variant<EndpointLoad>(true));

}  // namespace
}  // namespace ib::serve
