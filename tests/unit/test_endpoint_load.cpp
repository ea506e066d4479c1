// The load client's two halves: the streamed-completion reader (every way a stream can break must
// end it with its reason) and the load driver against a fake server on the loopback that answers
// each request in one of the ways real servers fail, so each is counted with its reason while the
// others complete.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/json_input.h"

#include "core/output.h"
#include "serve/completion_stream.h"
#include "serve/endpoint_load.h"
#include "serve/endpoint_metrics.h"
#include "serve/endpoint_result_file.h"
#include "workload/serving_load.h"

#if INFER_BENCH_HAVE_HTTP
#include <httplib.h>
#endif

namespace ib::serve {
namespace {

std::string chunk(const std::string& text, const std::string& finish = "") {
  std::string f = finish.empty() ? "null" : "\"" + finish + "\"";
  return "data: {\"choices\":[{\"index\":0,\"text\":\"" + text + "\",\"finish_reason\":" + f + "}]}\n\n";
}
const std::string kUsage =
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3,"
    "\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n";
const std::string kDone = "data: [DONE]\n\n";

TEST(CompletionStream, ReadsOutputTimesAndUsageWhateverTheSocketsPieces) {
  const std::string body = ": keep-alive\n\n" + chunk("Hel") + chunk("") + chunk("lo") + chunk("!", "length") + kUsage + kDone;
  for (size_t piece : {body.size(), size_t{1}, size_t{7}}) {
    CompletionStream s(CompletionStream::Api::Completions);
    double t = 0;
    for (size_t i = 0; i < body.size(); i += piece)
      ASSERT_TRUE(s.feed(body.data() + i, std::min(piece, body.size() - i), t += 1));
    s.finish(t);
    EXPECT_TRUE(s.done()) << s.failure();
    EXPECT_EQ(s.text(), "Hello!");
    EXPECT_EQ(s.output_times().size(), 4u);  // the empty chunk carried a token too (vLLM's client counts it)
    EXPECT_EQ(s.prompt_tokens(), 4);
    EXPECT_EQ(s.completion_tokens(), 3);
    EXPECT_EQ(s.cached_tokens(), 2);
    EXPECT_EQ(s.finish_reason(), "length");
    EXPECT_EQ(s.events(), 5u);
  }
}

TEST(CompletionStream, ChatDeltasAndCrlfLines) {
  std::string body =
      "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n\r\n"
      "data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\r\n\r\n"
      "data: [DONE]\r\n\r\n";
  CompletionStream s(CompletionStream::Api::Chat);
  ASSERT_TRUE(s.feed(body.data(), body.size(), 1));
  s.finish(2);
  EXPECT_TRUE(s.done()) << s.failure();
  EXPECT_EQ(s.text(), "Hi");
  EXPECT_EQ(s.output_times().size(), 1u);  // neither the role-only chunk nor the empty closing one carried a token
  EXPECT_EQ(s.finish_reason(), "stop");
}

TEST(CompletionStream, ALastDoneWithoutItsLineEndsStillEnds) {
  const std::string body = chunk("a") + "data: [DONE]";
  CompletionStream s(CompletionStream::Api::Completions);
  ASSERT_TRUE(s.feed(body.data(), body.size(), 1));
  s.finish(2);
  EXPECT_TRUE(s.done()) << s.failure();
}

TEST(CompletionStream, EveryBrokenStreamFailsWithItsReason) {
  struct Case {
    std::string body, reason;
  };
  const std::vector<Case> cases = {
      {chunk("a"), "without data: [DONE]"},
      {chunk("a") + "data: {\"choices\":[{\"text\":", "cut inside an event"},
      {chunk("a") + "data: {not json}\n\n" + kDone, "malformed event"},
      {"data: [1,2]\n\n" + kDone, "not a JSON object"},
      {"data: {\"error\":{\"message\":\"engine failed\"}}\n\n", "error event: engine failed"},
      {"data: {\"choices\":[{\"text\":7}]}\n\n" + kDone, "text is not a string"},
      {"hello world\n\n" + kDone, "not a server-sent event line"},
      {kDone + chunk("late"), "after data: [DONE]"},
      {"data: " + std::string(CompletionStream::kMaxLine + 10, 'x'), "past"},
  };
  for (const Case& c : cases) {
    CompletionStream s(CompletionStream::Api::Completions);
    s.feed(c.body.data(), c.body.size(), 1);
    s.finish(2);
    EXPECT_FALSE(s.done()) << c.body.substr(0, 60);
    EXPECT_NE(s.failure().find(c.reason), std::string::npos) << s.failure() << " for " << c.body.substr(0, 60);
  }
}

#if INFER_BENCH_HAVE_HTTP

// A fake server whose answer depends on the prompt's first token id.
enum Behaviour { Good = 0, TooMany, Cut, Malformed, ShortAnswer, PromptCount, Slow };

class FakeServer {
 public:
  FakeServer() {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})", "application/json");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      const std::lock_guard<std::mutex> lock(metrics_mutex_);
      if (metrics_.empty()) {
        res.status = 404;
        return;
      }
      res.set_content(metrics_, "text/plain; version=0.0.4");
    });
    // A body past 200 bytes is refused before it is read, the connection kept alive: the unread
    // body would be parsed as the next request on that connection.
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value<uint64_t>("Content-Length") <= 200) return httplib::Server::HandlerResponse::Unhandled;
      ++requests_;
      res.status = 413;
      res.set_content(R"({"error":{"message":"too large"}})", "application/json");
      return httplib::Server::HandlerResponse::Handled;
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      ++requests_;
      const auto j = ib::parse_json<nlohmann::json>(req.body);
      const int behaviour = j["prompt"][0].get<int>();
      const int prompt = static_cast<int>(j["prompt"].size()), max_tokens = j["max_tokens"].get<int>();
      if (j.value("model", "") != "fake-model" || !j.value("stream", false) || !j.value("ignore_eos", false)) {
        res.status = 400;
        res.set_content(R"({"error":{"message":"unexpected request"}})", "application/json");
        return;
      }
      if (behaviour == TooMany) {
        res.status = 429;
        res.set_content(R"({"error":{"message":"too many requests"}})", "application/json");
        return;
      }
      res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { sink.write(s.data(), s.size()); };
        const int answered = behaviour == ShortAnswer ? max_tokens - 1 : max_tokens;
        for (int i = 0; i < answered; ++i) {
          if (behaviour == Cut && i == 1) return false;  // the connection closes mid-stream
          if (behaviour == Malformed && i == 1) write("data: {\"choices\": [oops\n\n");
          if (behaviour == Slow) std::this_thread::sleep_for(std::chrono::milliseconds(400));
          write(chunk("t"));
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        const int counted = behaviour == PromptCount ? prompt + 1 : prompt;
        write("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(counted) +
              ",\"completion_tokens\":" + std::to_string(answered) + "}}\n\n");
        write(kDone);
        sink.done();
        return true;
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  int requests() const { return requests_; }
  // What GET /metrics answers ("" = 404).
  void set_metrics(std::string text) {
    const std::lock_guard<std::mutex> lock(metrics_mutex_);
    metrics_ = std::move(text);
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::mutex metrics_mutex_;
  std::string metrics_;
};

// The server's counters from its /metrics, as vLLM exports them: each summed over its label sets
// (one line per engine), HELP and TYPE lines skipped; a family the server does not export is
// absent; an unreadable value or no /metrics at all reads as nothing.
TEST(EndpointCounters, PrefixAndSpeculationCountersAreSummedOverTheirLabels) {
  FakeServer server;
  server.set_metrics(
      "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in tokens.\n"
      "# TYPE vllm:prefix_cache_queries_total counter\n"
      "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 1000.0\n"
      "vllm:prefix_cache_queries_total{engine=\"1\",model_name=\"m\"} 500.0\n"
      "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 750.0\n"
      "vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 0.0\n"
      "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 40.0\n"
      "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 30.0\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",position=\"0\"} 20.0\n"
      "vllm:num_requests_running{engine=\"0\"} 3.0\n");
  auto c = endpoint_counters(server.url(), "", 10);
  ASSERT_TRUE(c && c->prefix && c->spec);
  EXPECT_EQ(c->prefix->queries, 1500.0);
  EXPECT_EQ(c->prefix->hits, 750.0);
  EXPECT_EQ(c->spec->drafted, 40.0);
  EXPECT_EQ(c->spec->accepted, 30.0);  // not the per-position family that starts with its name
  server.set_metrics("vllm:prefix_cache_queries_total 10\nvllm:prefix_cache_hits_total 4\n");
  c = endpoint_counters(server.url(), "", 10);
  ASSERT_TRUE(c && c->prefix);
  EXPECT_FALSE(c->spec);
  EXPECT_EQ(c->prefix->hits, 4.0);
  server.set_metrics("llamacpp:prompt_tokens_total 12\n");  // llama.cpp's: neither family
  c = endpoint_counters(server.url(), "", 10);
  ASSERT_TRUE(c);
  EXPECT_FALSE(c->prefix || c->spec);
  server.set_metrics("vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} many\n");
  EXPECT_FALSE(endpoint_counters(server.url(), "", 10));
  server.set_metrics("");  // no /metrics
  EXPECT_FALSE(endpoint_counters(server.url(), "", 10));
}

std::vector<workload::Request> trace_of(const std::vector<int>& behaviours, double gap) {
  std::vector<workload::Request> t;
  for (size_t i = 0; i < behaviours.size(); ++i) {
    workload::Request r;
    r.id = static_cast<int64_t>(i);
    r.arrival = gap * static_cast<double>(i);
    r.prompt = {behaviours[i], 11, 12, 13};
    r.max_tokens = 4;
    t.push_back(r);
  }
  return t;
}

TEST(EndpointLoad, EveryRequestIsAccountedForWithItsReason) {
  FakeServer server;
  EndpointOptions o;
  o.url = server.url();
  o.model = endpoint_first_model(o.url, "", 5);
  EXPECT_EQ(o.model, "fake-model");
  o.request_timeout = 1.0;
  const std::vector<int> b = {Good, TooMany, Good, Cut, Malformed, ShortAnswer, PromptCount, Slow, Good};
  const EndpointLoadResult r = run_endpoint_load(o, trace_of(b, 0.01));
  ASSERT_EQ(r.requests.size(), b.size());
  EXPECT_EQ(server.requests(), static_cast<int>(b.size()));
  const std::vector<std::string> reasons = {"",
                                            "HTTP 429: too many requests",
                                            "",
                                            "the connection closed mid-stream after 1 events",
                                            "malformed event",
                                            "answered 3 tokens of the 4 asked",
                                            "the server counted 5 prompt tokens, 4 were sent",
                                            "timed out after 1 s",
                                            ""};
  for (size_t i = 0; i < b.size(); ++i) {
    const EndpointRecord& q = r.requests[i];
    if (reasons[i].empty()) {
      EXPECT_EQ(q.failure, "") << i;
      EXPECT_EQ(q.output_times.size(), 4u);
      EXPECT_EQ(q.usage_completion, 4);
      EXPECT_GE(q.sent, q.scheduled);
      EXPECT_GT(q.output_times.front(), q.sent);
      EXPECT_GE(q.end, q.output_times.back());
    } else {
      EXPECT_NE(q.failure.find(reasons[i]), std::string::npos) << i << ": " << q.failure;
    }
  }
  const EndpointSummary s = summarize_endpoint(r, Slo{}, 0.05);
  EXPECT_EQ(s.completed, 3u);
  EXPECT_EQ(s.failed, 6u);
  EXPECT_EQ(s.output_tokens, 12u);
  EXPECT_EQ(s.ttft.n, 3u);
  EXPECT_EQ(s.itl.n, 9u);  // three gaps per completed request
  EXPECT_EQ(s.failures.size(), 6u);
  EXPECT_GT(s.duration, 1.0);  // the slow request ran into its timeout
  EXPECT_NE(describe_failures(s).find("6 failed"), std::string::npos);
}

TEST(EndpointLoad, AFailedRequestLeavesItsConnectionAndTheNextOneIsSentOnANewOne) {
  FakeServer server;
  EndpointOptions o;
  o.url = server.url();
  o.model = "fake-model";
  o.max_concurrency = 1;  // one connection, reused for each request
  std::vector<workload::Request> trace = trace_of({Good, Good, Good, Good}, 0.0);
  trace[1].prompt.resize(100, 7);  // a body the server refuses unread
  const EndpointLoadResult r = run_endpoint_load(o, trace);
  ASSERT_EQ(r.requests.size(), 4u);
  EXPECT_EQ(r.requests[0].failure, "");
  EXPECT_EQ(r.requests[1].failure, "HTTP 413: too large");
  EXPECT_EQ(r.requests[2].failure, "") << "the refused body was read as this request";
  EXPECT_EQ(r.requests[3].failure, "");
  EXPECT_EQ(server.requests(), 4);
}

TEST(EndpointLoad, ConcurrencyBoundHoldsAndLagIsNetOfWaitingForASlot) {
  FakeServer server;
  EndpointOptions o;
  o.url = server.url();
  o.model = "fake-model";
  o.max_concurrency = 2;
  // Six requests due at once, each taking ~10 ms: three waves of two.
  const EndpointLoadResult r = run_endpoint_load(o, trace_of(std::vector<int>(6, Good), 0));
  EXPECT_EQ(r.threads, 2);
  std::vector<double> sent;
  for (const EndpointRecord& q : r.requests) {
    EXPECT_EQ(q.failure, "");
    EXPECT_LT(q.lag, 0.05);  // waiting for a slot is not the client's lag
    sent.push_back(q.sent);
  }
  std::sort(sent.begin(), sent.end());
  EXPECT_GT(sent[2], r.requests[0].output_times.front());  // the third waited for a slot
}

TEST(EndpointLoad, ARefusedConnectionFailsEveryRequestAndTheLoadEnds) {
  int port = 0;
  {  // a port bound and closed again: nothing listens there now
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
  }
  EndpointOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.model = "m";
  const EndpointLoadResult r = run_endpoint_load(o, trace_of({Good, Good, Good}, 0.001));
  for (const EndpointRecord& q : r.requests) EXPECT_NE(q.failure.find("could not connect"), std::string::npos) << q.failure;
  EXPECT_THROW(endpoint_first_model(o.url, "", 2), InputError);
  EXPECT_THROW(run_endpoint_load({"https://x:1"}, trace_of({Good}, 0)), InputError);
}

// Two clients, each sending its shard of one seeded schedule from a common start, merged: the
// whole load's requests, each once, at the whole load's arrival times, and the file written and
// read back as vLLM's --save-result keys with our records.
TEST(EndpointLoad, ShardsFromACommonStartMergeIntoTheWholeLoad) {
  FakeServer server;
  workload::WorkloadOptions w;
  w.requests = 12;
  w.qps = 40;
  w.prompt_len = 4;
  w.output_len = 3;
  std::vector<workload::Request> whole = workload::make_workload(w, 1000, 5);
  for (workload::Request& r : whole) r.prompt[0] = Good;
  EndpointOptions o;
  o.url = server.url();
  o.model = "fake-model";
  o.start_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() + 0.3;
  std::vector<EndpointResultFile> files(2);
  std::vector<std::thread> clients;
  for (int shard = 0; shard < 2; ++shard)
    clients.emplace_back([&, shard] {
      std::vector<workload::Request> mine;
      for (const workload::Request& r : whole)
        if (in_shard(r.id, shard, 2)) mine.push_back(r);
      EndpointResultFile& f = files[static_cast<size_t>(shard)];
      f.endpoint = o.url;
      f.model = o.model;
      f.load = workload::describe_load(whole);
      f.workload_seed = 5;
      f.shard = shard;
      f.shards = 2;
      f.result = run_endpoint_load(o, mine);
      f.start_at = f.result.start_epoch;
    });
  for (auto& c : clients) c.join();
  EXPECT_LT(std::abs(files[0].start_at - files[1].start_at), 0.05);  // the common start held
  // Through the file format and back.
  const std::string dir = ::testing::TempDir();
  std::vector<EndpointResultFile> read;
  std::vector<std::string> names;
  for (int shard = 0; shard < 2; ++shard) {
    names.push_back(dir + "/shard" + std::to_string(shard) + ".json");
    write_file_atomic(names.back(), endpoint_result_json(files[static_cast<size_t>(shard)]));
    read.push_back(read_endpoint_result(names.back()));
    const auto j = ib::parse_json<nlohmann::json>(endpoint_result_json(files[static_cast<size_t>(shard)]));
    for (const char* key : {"duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput",
                            "output_throughput", "input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
                            "median_ttft_ms", "p99_tpot_ms", "mean_itl_ms", "std_e2el_ms"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["num_prompts"], 6);
  }
  const EndpointResultFile merged = merge_endpoint_results(read, names);
  ASSERT_EQ(merged.result.requests.size(), whole.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    const EndpointRecord& q = merged.result.requests[i];
    EXPECT_EQ(q.id, whole[i].id);
    EXPECT_NEAR(q.scheduled, whole[i].arrival, 0.05);  // the whole load's arrival process
    EXPECT_EQ(q.failure, "");
    EXPECT_EQ(q.usage_completion, 3);
  }
  EXPECT_EQ(summarize_endpoint(merged.result, Slo{}, 1).completed, whole.size());
  // A shard missing, a shard twice, or another load's shard: refused by name.
  EXPECT_THROW(merge_endpoint_results({read[0]}, {names[0]}), InputError);
  EXPECT_THROW(merge_endpoint_results({read[0], read[0]}, {names[0], names[0]}), InputError);
  read[1].workload_seed = 6;
  EXPECT_THROW(merge_endpoint_results(read, names), InputError);
  EXPECT_EQ(parse_shard("1/4"), std::make_pair(1, 4));
  for (const char* bad : {"4/4", "-1/2", "1", "a/b", "1/2x", "0/0"}) EXPECT_THROW(parse_shard(bad), InputError) << bad;
}

#endif  // INFER_BENCH_HAVE_HTTP

}  // namespace
}  // namespace ib::serve
