// The torch SDPA peers of `attention`: one python process per row runs the compiled-in
// scripts/torch_sdpa_peer.py, which checks torch's output against its own float64 reference and
// times torch with CUDA events (perf_counter on the CPU) under the row's stopping rule. The row
// takes its gate, samples and peak memory from the script's JSON line (Variant::measure_self):
// timing the process from here would time python's start-up, not the kernel. No torch, no GPU
// or a backend that refuses the shape make an `unsupported` row that says which.
#include "attention/torch_peer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attention/problem.h"
#include "attention/variant_common.h"
#include "core/backend.h"
#include "core/errors.h"
#include "core/interrupt.h"
#include "core/registry.h"
#include "core/spec.h"

extern "C" const char ib_torch_sdpa_peer_py[];  // torch_peer_embed.S
extern char** environ;

namespace ib::attention {

const char* torch_sdpa_peer_script() { return ib_torch_sdpa_peer_py; }

namespace {

constexpr size_t kMaxStdout = size_t{64} << 20;  // samples of a long row fit many times over
constexpr size_t kMaxStderr = size_t{64} << 10;  // its tail: the traceback's last lines

// Closes a descriptor once; -1 = closed.
struct Fd {
  int fd = -1;
  ~Fd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Reads what is there into `into` (the head of stdout, the tail of stderr); false at EOF.
bool drain(Fd& f, std::string& into, bool keep_tail) {
  char buf[65536];
  const ssize_t n = ::read(f.fd, buf, sizeof buf);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  if (n == 0) return false;
  into.append(buf, static_cast<size_t>(n));
  if (keep_tail && into.size() > kMaxStderr) into.erase(0, into.size() - kMaxStderr);
  if (!keep_tail && into.size() > kMaxStdout) into.resize(kMaxStdout);
  return true;
}

}  // namespace

PeerProcess run_peer_process(const std::vector<std::string>& argv, double timeout_s) {
  PeerProcess r;
  int out_fds[2], err_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  Fd out{out_fds[0]}, out_w{out_fds[1]};
  if (pipe2(err_fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  Fd err{err_fds[0]}, err_w{err_fds[1]};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.fd, 1);  // dup2 clears close-on-exec on 1 and 2
  posix_spawn_file_actions_adddup2(&actions, err_w.fd, 2);
  // Its own process group: Ctrl-C here is handled here (the child is killed, not interrupted
  // mid-traceback), and a timeout kills whatever the child started too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  out_w.close();
  err_w.close();
  if (rc != 0) {
    r.spawn_error = std::strerror(rc);
    return r;
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  bool stopped_by_ctrl_c = false;
  while (out.fd >= 0 || err.fd >= 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    if (interrupted()) {
      stopped_by_ctrl_c = true;
      break;
    }
    pollfd fds[2] = {{out.fd, POLLIN, 0}, {err.fd, POLLIN, 0}};  // poll skips a negative fd
    const int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 200)));
    if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    if (n <= 0) continue;
    if (fds[0].revents && !drain(out, r.out, false)) out.close();
    if (fds[1].revents && !drain(err, r.err, true)) err.close();
  }
  if (r.timed_out || stopped_by_ctrl_c) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (stopped_by_ctrl_c) throw std::runtime_error("interrupted (Ctrl-C): the peer process was stopped");
  return r;
}

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of(" \r\n\t");
  if (end == std::string::npos) return {};
  const size_t nl = text.rfind('\n', end);
  const size_t begin = nl == std::string::npos ? 0 : nl + 1;
  return text.substr(begin, end + 1 - begin);
}

// The last stdout line that starts with '{' (the packages may print other lines before it).
std::string result_line(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    const size_t nl = out.rfind('\n', end - 1);
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    const size_t first = out.find_first_not_of(" \r\t", begin);
    if (first < end && out[first] == '{') return out.substr(begin, end - begin);
    if (begin == 0) break;
    end = begin - 1;
  }
  return {};
}

namespace {

// What the peer needs besides the point: where it runs and how long it may take.
struct PeerRun {
  std::string python;
  double deadline_s = 0;
  double tolerance = 0;
  int64_t memory_limit = 0;
};

struct PeerReading {
  SelfMeasurement m;
  int64_t io_bytes = -1;  // Q, K, V, O as the peer held them
};

PeerReading read_result(const PeerProcess& p, const PeerRun& run) {
  PeerReading out;
  SelfMeasurement& m = out.m;
  if (!p.spawn_error.empty()) {
    if (p.spawn_error == std::strerror(ENOENT))
      m.unsupported = fmt::format("no `{}` here (the `python` key): the torch peer needs python3 with torch", run.python);
    else
      throw std::runtime_error(fmt::format("cannot start `{}` for the torch peer: {}", run.python, p.spawn_error));
    return out;
  }
  if (p.timed_out)
    throw std::runtime_error(fmt::format("torch peer killed after {:.3g} s (the row's timeout + peer_timeout){}", run.deadline_s,
                                         p.err.empty() ? "" : "; its last words: " + last_line(p.err)));
  const std::string line = result_line(p.out);
  if (line.empty()) {
    const std::string why = last_line(p.err);
    throw std::runtime_error(fmt::format("torch peer (`{}`) exited with code {} and printed no result{}", run.python, p.exit_code,
                                         why.empty() ? "" : ": " + why));
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    const std::string status = j.at("status").get<std::string>();
    const std::string reason = j.value("reason", std::string());
    if (status == "unsupported") {
      m.unsupported = reason.empty() ? "the torch peer says unsupported, without a reason" : reason;
      return out;
    }
    if (status == "oom") throw OutOfMemory("torch peer: " + reason, 0, 0, run.memory_limit);
    if (status == "failed") throw std::runtime_error("torch peer failed: " + reason);
    if (status != "ok") throw std::runtime_error("torch peer: unknown status '" + status + "'");

    const nlohmann::json& c = j.at("check");
    const int64_t nan_rows = c.at("nan_rows").get<int64_t>(), rows = c.at("rows").get<int64_t>();
    const std::string detail = fmt::format("torch {} on {}, its own inputs: {} of {} rows vs float64 in torch, max abs error {:.2e}",
                                           j.value("torch", std::string("?")), j.value("device", std::string("?")),
                                           c.at("rows_checked").get<int64_t>(), rows, c.at("max_abs_error").get<double>());
    if (nan_rows > 0) {
      m.validation = {false, "nan_rows", static_cast<double>(nan_rows), 0,
                      fmt::format("{} of {} rows hold NaN/inf; {}", nan_rows, rows, detail)};
    } else {
      const double rel = c.at("value").get<double>();
      m.validation = {rel <= run.tolerance, c.value("metric", std::string("rel_l2")), rel, run.tolerance, detail};
    }
    m.note = j.value("note", std::string());
    if (!m.validation.ok) return out;
    for (const auto& ms : j.at("samples_ms")) m.samples.push_back(ms.get<double>() / 1e3);
    m.stop_reason = j.value("stop_reason", std::string()) + " (timed in the peer's process)";
    m.peak_memory = j.value("peak_memory_bytes", int64_t{-1});
    out.io_bytes = j.value("io_bytes", int64_t{-1});
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("torch peer printed an unreadable result ({}): {}", e.what(), line.substr(0, 200)));
  }
  return out;
}

// One backend of torch SDPA, on the CUDA device or (backend "default") on the CPU.
class TorchSdpaPeer : public Variant {
 public:
  TorchSdpaPeer(Backend device, std::string backend) : device_(device), backend_(std::move(backend)) {}

  std::string unsupported(const Point& p) const override {
    const AttentionShape s = attention_shape(p);
    if (std::string why = shape_problem(s); !why.empty()) return why;
    if (s.causal && s.seq_q > s.seq_k) return "causal with seq_q > seq: the first rows see no key, and torch leaves them undefined";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    s_ = attention_shape(p);
    seed_ = seed;
    python_ = p.find("python") ? p.text("python") : "python3";
    peer_timeout_ = p.find("peer_timeout") ? p.number("peer_timeout") : 120.0;
    score_table_ = p.find("score_table") && p.flag("score_table");
  }
  Validation validate(BackendRuntime&) override { throw std::logic_error("the torch peer is checked in its own process (measure_self)"); }
  void run(BackendRuntime&) override { throw std::logic_error("the torch peer is timed in its own process (measure_self)"); }

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override {
    const bool cuda = device_ == Backend::Cuda;
    PeerRun run;
    run.python = python_;
    run.deadline_s = c.timeout + peer_timeout_;
    // The gate of the row's kind: bf16/fp16 outputs on the GPU; fp32 arithmetic on the CPU.
    run.tolerance = output_tolerance(cuda ? s_.dtype : DType::F32);
    run.memory_limit = c.memory_limit;
    std::vector<std::string> argv = {python_, "-c", torch_sdpa_peer_script(),
                                     "--device", cuda ? "cuda" : "cpu",
                                     "--backend", backend_,
                                     "--batch", std::to_string(s_.batch),
                                     "--heads", std::to_string(s_.heads),
                                     "--kv-heads", std::to_string(s_.kv_heads),
                                     "--head-dim", std::to_string(s_.head_dim),
                                     "--seq-k", std::to_string(s_.seq_k),
                                     "--seq-q", std::to_string(s_.seq_q),
                                     "--window", std::to_string(s_.causal ? s_.window : 0),
                                     "--dtype", s_.dtype == DType::F16 ? "fp16" : "bf16",
                                     "--seed", std::to_string(seed_),
                                     "--tolerance", fmt::format("{}", run.tolerance),
                                     "--warmup", std::to_string(c.warmup),
                                     "--min-samples", std::to_string(c.min_samples),
                                     "--min-time", fmt::format("{}", c.min_time),
                                     "--max-noise", fmt::format("{}", c.max_noise),
                                     "--timeout", fmt::format("{}", c.timeout)};
    if (s_.causal) argv.push_back("--causal");
    if (c.cold_l2) argv.push_back("--cold-l2");
    if (cuda && c.memory_limit > 0) argv.insert(argv.end(), {"--memory-limit", std::to_string(c.memory_limit)});
    if (!cuda) argv.insert(argv.end(), {"--compute", "fp32", "--threads", std::to_string(cpu_threads())});

    PeerReading r = read_result(run_peer_process(argv, run.deadline_s), run);
    extra_bytes_ = r.m.peak_memory >= 0 && r.io_bytes >= 0 ? r.m.peak_memory - r.io_bytes : -1;
    return r.m;
  }
  Work work() const override { return {s_.flops(), s_.io_bytes()}; }
  std::vector<Metric> metrics() const override {
    std::vector<Metric> m;
    if (extra_bytes_ >= 0) m.push_back({"extra mem", static_cast<double>(extra_bytes_) / (1 << 20), "MiB"});
    if (score_table_) append_score_table(s_, m);
    return m;
  }

 private:
  Backend device_;
  std::string backend_;
  AttentionShape s_;
  uint64_t seed_ = 0;
  std::string python_;
  double peer_timeout_ = 120;
  bool score_table_ = false;
  int64_t extra_bytes_ = -1;
};

template <Backend device>
VariantFactory peer(const char* backend) {
  return [backend] { return std::unique_ptr<Variant>(new TorchSdpaPeer(device, backend)); };
}

const VariantRegistration reg_default("attention", "torch_sdpa", peer<Backend::Cuda>("default"));
const VariantRegistration reg_flash("attention", "torch_sdpa_flash", peer<Backend::Cuda>("flash"));
const VariantRegistration reg_cudnn("attention", "torch_sdpa_cudnn", peer<Backend::Cuda>("cudnn"));
const VariantRegistration reg_efficient("attention", "torch_sdpa_efficient", peer<Backend::Cuda>("efficient"));
const VariantRegistration reg_math("attention", "torch_sdpa_math", peer<Backend::Cuda>("math"));
const VariantRegistration reg_cpu("attention", "cpu_torch_sdpa", peer<Backend::Cpu>("default"));

}  // namespace
}  // namespace ib::attention
