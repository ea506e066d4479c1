#include "serve/endpoint_load.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/json_input.h"
#include "serve/completion_stream.h"

#if INFER_BENCH_HAVE_HTTP
#include <httplib.h>
#endif

namespace ib::serve {
namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// "http://host:port/v1/" -> the scheme, host and port, and a path prefix ("" or "/api").
struct Url {
  std::string origin, prefix;
};

Url parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    throw InputError(fmt::format("endpoint '{}': https is not supported by this client (use http on a trusted network)", url));
  if (url.rfind(scheme, 0) != 0) throw InputError(fmt::format("endpoint '{}': expected http://HOST:PORT", url));
  const size_t slash = url.find('/', scheme.size());
  Url u;
  u.origin = url.substr(0, slash);
  if (u.origin.size() == scheme.size()) throw InputError(fmt::format("endpoint '{}': no host", url));
  std::string path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  u.prefix = path;
  return u;
}

std::string one_line(std::string s, size_t most = 160) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (s.size() > most) s = s.substr(0, most) + "...";
  return s;
}

// An error body's message (OpenAI's {"error": {"message": ...}}, or the text itself).
std::string error_message(const std::string& body) {
  try {
    const nlohmann::json j = parse_json_bounded(body, "an error body", 32);
    if (j.is_object() && j.contains("error")) {
      const auto& e = j["error"];
      if (e.is_object() && e.contains("message") && e["message"].is_string()) return one_line(e["message"].get<std::string>());
      if (e.is_string()) return one_line(e.get<std::string>());
    }
    if (j.is_object() && j.contains("message") && j["message"].is_string()) return one_line(j["message"].get<std::string>());
  } catch (const std::exception&) {
  }
  return one_line(body);
}

#if INFER_BENCH_HAVE_HTTP

std::string client_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "could not connect (refused or unreachable)";
    case httplib::Error::ConnectionTimeout:
      return "the connection timed out";
    case httplib::Error::Read:
      return "the connection closed or timed out while reading the answer";
    case httplib::Error::Write:
      return "the connection closed while sending the request";
    default:
      return "HTTP client error: " + httplib::to_string(e);
  }
}

// `response_format`: the options' response_format, parsed once per load (null: none).
std::string request_body(const EndpointOptions& o, const nlohmann::json& response_format, const workload::Request& r,
                         const std::string* text) {
  nlohmann::json j;
  j["model"] = o.model;
  if (o.chat) {
    j["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", text ? *text : std::string()}}});
  } else if (text) {
    j["prompt"] = *text;
  } else {
    j["prompt"] = r.prompt;
  }
  j["max_tokens"] = r.max_tokens;
  j["temperature"] = 0;
  j["stream"] = true;
  j["stream_options"] = {{"include_usage", true}};
  if (o.ignore_eos) j["ignore_eos"] = true;
  if (!response_format.is_null()) j["response_format"] = response_format;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_one(httplib::Client& cli, const Url& url, const EndpointOptions& o, const nlohmann::json& response_format,
              const workload::Request& r, const std::string* text, Clock::time_point start, bool (*interrupted)(),
              EndpointRecord& rec) {
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  CompletionStream stream(o.chat ? CompletionStream::Api::Chat : CompletionStream::Api::Completions);
  httplib::Request req;
  req.method = "POST";
  req.path = url.prefix + (o.chat ? "/v1/chat/completions" : "/v1/completions");
  req.headers = {{"Accept", "text/event-stream"}};
  if (!o.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + o.api_key);
  req.body = request_body(o, response_format, r, text);
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string error_body, cancel;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = now();
    if (interrupted && interrupted()) {
      cancel = "abandoned: the load was interrupted";
      return false;
    }
    if (t - rec.sent > o.request_timeout) {
      cancel = fmt::format("timed out after {:g} s (request_timeout)", o.request_timeout);
      return false;
    }
    if (status != 200) {
      if (error_body.size() < 65536) error_body.append(data, std::min<size_t>(n, 65536 - error_body.size()));
      return true;
    }
    return stream.feed(data, n, t);
  };
  rec.sent = now();
  const httplib::Result res = cli.send(req);
  rec.end = now();
  if (!res) {
    if (!stream.failure().empty())
      rec.failure = stream.failure();
    else
      rec.failure = !cancel.empty() ? cancel
                    : res.error() == httplib::Error::Read && stream.events() > 0
                        ? fmt::format("the connection closed mid-stream after {} events", stream.events())
                        : client_error(res.error());
    // A cut stream's partial output stays in the record: its times were seen.
  } else if (status != 200) {
    rec.failure = fmt::format("HTTP {}: {}", status, error_message(error_body.empty() ? res->body : error_body));
  } else {
    stream.finish(rec.end);
    if (!stream.failure().empty()) rec.failure = stream.failure();
  }
  rec.output_times = stream.output_times();
  rec.text = stream.text();
  rec.finish_reason = stream.finish_reason();
  rec.usage_prompt = stream.prompt_tokens().value_or(-1);
  rec.usage_completion = stream.completion_tokens().value_or(-1);
  rec.usage_cached = stream.cached_tokens().value_or(-1);
  if (!rec.failure.empty()) return;
  if (rec.usage_prompt >= 0 && o.token_prompts && !o.chat && rec.usage_prompt != rec.prompt_tokens)
    rec.failure = fmt::format("the server counted {} prompt tokens, {} were sent", rec.usage_prompt, rec.prompt_tokens);
  else if (rec.usage_completion >= 0 && o.ignore_eos && rec.usage_completion != rec.max_tokens)
    rec.failure = fmt::format("answered {} tokens of the {} asked (ignore_eos)", rec.usage_completion, rec.max_tokens);
  else if (rec.output_times.empty())
    rec.failure = "the stream carried no output";
}

// GET `path` under the endpoint, with its API key, within `timeout` seconds.
httplib::Result get(const std::string& url_text, const std::string& path, const std::string& api_key, double timeout) {
  const Url url = parse_url(url_text);
  httplib::Client cli(url.origin);
  cli.set_connection_timeout(static_cast<time_t>(std::max(1.0, timeout)));
  cli.set_read_timeout(static_cast<time_t>(std::max(1.0, timeout)));
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return cli.Get((url.prefix + path).c_str(), h);
}

#endif  // INFER_BENCH_HAVE_HTTP

}  // namespace

bool endpoint_client_available() {
#if INFER_BENCH_HAVE_HTTP
  return true;
#else
  return false;
#endif
}

EndpointLoadResult run_endpoint_load(const EndpointOptions& o, const std::vector<workload::Request>& trace,
                                     const std::vector<std::string>& texts, bool (*interrupted)()) {
#if INFER_BENCH_HAVE_HTTP
  const Url url = parse_url(o.url);
  const nlohmann::json response_format =
      o.response_format.empty() ? nlohmann::json() : ib::parse_json<nlohmann::json>(o.response_format);
  if (!texts.empty() && texts.size() != trace.size()) throw std::logic_error("run_endpoint_load: one text per request");
  EndpointLoadResult out;
  out.requests.resize(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    EndpointRecord& rec = out.requests[i];
    rec.id = trace[i].id;
    rec.type = trace[i].type;
    rec.prompt_tokens = static_cast<int>(trace[i].prompt.size());
    rec.max_tokens = trace[i].max_tokens;
    rec.scheduled = trace[i].arrival;
  }
  const int threads = static_cast<int>(std::min<size_t>(
      o.max_concurrency > 0 ? static_cast<size_t>(o.max_concurrency) : trace.size(), EndpointOptions::kMaxClientThreads));
  out.threads = std::max(1, threads);
  std::mutex m;
  std::condition_variable cv;
  std::deque<size_t> queue;
  bool closing = false;
  // A common start (shards on other processes or machines): wait for the wall clock to reach it.
  for (;;) {
    const double left = o.start_at - std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    if (left <= 0 || (interrupted && interrupted())) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.05)));
  }
  const double now_epoch = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double cpu0 = cpu_seconds();
  // A client that reaches a common start late keeps the common schedule: its requests are due at
  // the same times as every other shard's, and are sent late (their lag says by how much).
  const double late = o.start_at > 0 ? std::max(0.0, now_epoch - o.start_at) : 0.0;
  out.start_epoch = now_epoch - late;
  const Clock::time_point start = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(late));
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::vector<std::thread> workers;
  for (int w = 0; w < out.threads; ++w)
    workers.emplace_back([&] {
      auto connect = [&] {
        auto cli = std::make_unique<httplib::Client>(url.origin);
        cli->set_keep_alive(true);
        // httplib writes a request's headers and body apart: on a reused connection Nagle's
        // algorithm holds the body until the server ACKs the headers (its delayed ACK: ~40 ms
        // added to every TTFT after a connection's first request).
        cli->set_tcp_nodelay(true);
        cli->set_connection_timeout(10);
        cli->set_read_timeout(static_cast<time_t>(std::max(1.0, o.request_timeout)));
        cli->set_write_timeout(30);
        return cli;
      };
      std::unique_ptr<httplib::Client> cli = connect();
      double free_since = 0;
      for (;;) {
        size_t i;
        {
          std::unique_lock<std::mutex> lock(m);
          cv.wait(lock, [&] { return closing || !queue.empty(); });
          if (queue.empty()) return;
          i = queue.front();
          queue.pop_front();
        }
        EndpointRecord& rec = out.requests[i];
        const double t = now();
        rec.lag = t - std::max(rec.scheduled, free_since);
        try {
          send_one(*cli, url, o, response_format, trace[i], texts.empty() ? nullptr : &texts[i], start, interrupted, rec);
        } catch (const std::exception& e) {
          rec.failure = std::string("client fault: ") + e.what();
          rec.end = now();
        }
        // After a failed request the connection's state is unknown (a refusal may leave the
        // request's body unread on it, a stream cut mid-event leaves bytes): the next request
        // goes on a new one, so one failure is not charged to the requests after it.
        if (!rec.failure.empty()) cli = connect();
        free_since = now();
      }
    });
  for (size_t i = 0; i < trace.size(); ++i) {
    // Sleep to the arrival in short slices, so an interrupt is seen.
    bool stop = false;
    for (;;) {
      if (interrupted && interrupted()) {
        stop = true;
        break;
      }
      const double left = trace[i].arrival - now();
      if (left <= 0) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(left, 0.05)));
    }
    if (stop) {
      for (size_t k = i; k < trace.size(); ++k) out.requests[k].failure = "not sent: the load was interrupted";
      break;
    }
    {
      std::lock_guard<std::mutex> lock(m);
      queue.push_back(i);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(m);
    closing = true;
  }
  cv.notify_all();
  for (auto& w : workers) w.join();
  for (const EndpointRecord& r : out.requests) out.duration = std::max(out.duration, r.end);
  out.client_cpu = cpu_seconds() - cpu0;
  return out;
#else
  (void)o;
  (void)trace;
  (void)texts;
  (void)interrupted;
  throw InputError("this infer-bench was built without cpp-httplib (INFER_BENCH_HTTP=OFF): it has no HTTP client for load");
#endif
}

std::optional<ServerCounters> endpoint_counters(const std::string& url_text, const std::string& api_key, double timeout) {
#if INFER_BENCH_HAVE_HTTP
  const auto res = get(url_text, "/metrics", api_key, timeout);
  if (!res || res->status != 200 || res->body.size() > (64u << 20)) return std::nullopt;
  static const char* const kNames[] = {"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                                       "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"};
  double sum[4] = {0, 0, 0, 0};
  bool seen[4] = {false, false, false, false};
  size_t at = 0;
  const std::string& b = res->body;
  while (at < b.size()) {
    size_t end = b.find('\n', at);
    if (end == std::string::npos) end = b.size();
    const std::string line = b.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line[0] == '#') continue;
    // NAME{labels} VALUE [timestamp]
    const size_t name_end = line.find_first_of("{ ");
    const std::string name = line.substr(0, name_end);
    const auto known = std::find(std::begin(kNames), std::end(kNames), name);
    if (known == std::end(kNames)) continue;
    const size_t k = static_cast<size_t>(known - std::begin(kNames));
    size_t v = line.find('}') != std::string::npos ? line.find('}') + 1 : name_end;
    while (v < line.size() && line[v] == ' ') ++v;
    try {
      sum[k] += std::stod(line.substr(v));
      seen[k] = true;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  ServerCounters c;
  if (seen[0] && seen[1]) c.prefix = PrefixCounters{sum[0], sum[1]};
  if (seen[2] && seen[3]) c.spec = SpecCounters{sum[2], sum[3]};
  return c;
#else
  (void)url_text;
  (void)api_key;
  (void)timeout;
  return std::nullopt;
#endif
}

std::string endpoint_first_model(const std::string& url_text, const std::string& api_key, double timeout) {
#if INFER_BENCH_HAVE_HTTP
  const auto res = get(url_text, "/v1/models", api_key, timeout);
  if (!res) throw InputError(fmt::format("endpoint {}: GET /v1/models: {}", url_text, client_error(res.error())));
  if (res->status != 200)
    throw InputError(fmt::format("endpoint {}: GET /v1/models: HTTP {}: {}", url_text, res->status, error_message(res->body)));
  try {
    const nlohmann::json j = parse_json_bounded(res->body, "/v1/models", 32);
    const auto& data = j.at("data");
    if (!data.is_array() || data.empty()) throw InputError("no model listed");
    return data[0].at("id").get<std::string>();
  } catch (const std::exception& e) {
    throw InputError(fmt::format("endpoint {}: GET /v1/models: not an OpenAI model list ({})", url_text, one_line(e.what())));
  }
#else
  (void)url_text;
  (void)api_key;
  (void)timeout;
  throw InputError("this infer-bench was built without cpp-httplib (INFER_BENCH_HTTP=OFF): it has no HTTP client for load");
#endif
}

}  // namespace ib::serve
