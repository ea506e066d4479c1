// The torch SDPA peers of `attention`: one python process per row runs the compiled-in
// scripts/torch_sdpa_peer.py, which checks torch's output against its own float64 reference and
// times torch with CUDA events (perf_counter on the CPU) under the row's stopping rule. The row
// takes its gate, samples and peak memory from the script's JSON line (Variant::measure_self):
// timing the process from here would time python's start-up, not the kernel. No torch, no GPU
// or a backend that refuses the shape make an `unsupported` row that says which.
#include "kinds/attention/torch_peer.h"
#include "core/json_input.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/errors.h"
#include "core/peer_process.h"
#include "core/registry.h"
#include "core/spec.h"
#include "kinds/attention/problem.h"
#include "kinds/attention/variant_common.h"

extern "C" const char ib_torch_sdpa_peer_py[];  // torch_peer_embed.S

namespace ib::attention {

const char* torch_sdpa_peer_script() { return ib_torch_sdpa_peer_py; }

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
    const nlohmann::json j = ib::parse_json<nlohmann::json>(line);
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
    const std::string detail =
        fmt::format("torch {} on {}, its own inputs: {} of {} rows vs float64 in torch, max abs error {:.2e}",
                    j.value("torch", std::string("?")), j.value("device", std::string("?")), c.at("rows_checked").get<int64_t>(),
                    rows, c.at("max_abs_error").get<double>());
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
    if (s.causal && s.seq_q > s.seq_k)
      return "causal with seq_q > seq: the first rows see no key, and torch leaves them undefined";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const AttentionKeys params = attention_keys().read(p);
    s_ = attention_shape(params);
    seed_ = seed;
    python_ = params.python;
    peer_timeout_ = params.peer_timeout;
    score_table_ = params.score_table;
  }
  Validation validate(BackendRuntime&) override {
    throw std::logic_error("the torch peer is checked in its own process (measure_self)");
  }
  void run(BackendRuntime&) override { throw std::logic_error("the torch peer is timed in its own process (measure_self)"); }

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override {
    const bool cuda = device_ == Backend::Cuda;
    PeerRun run;
    run.python = python_;
    run.deadline_s = c.timeout + peer_timeout_;
    // The gate of the row's kind: bf16/fp16 outputs on the GPU; fp32 arithmetic on the CPU.
    run.tolerance = output_tolerance(cuda ? s_.dtype : DType::F32);
    run.memory_limit = c.memory_limit;
    std::vector<std::string> argv = {python_,
                                     "-c",
                                     torch_sdpa_peer_script(),
                                     "--device",
                                     cuda ? "cuda" : "cpu",
                                     "--backend",
                                     backend_,
                                     "--batch",
                                     std::to_string(s_.batch),
                                     "--heads",
                                     std::to_string(s_.heads),
                                     "--kv-heads",
                                     std::to_string(s_.kv_heads),
                                     "--head-dim",
                                     std::to_string(s_.head_dim),
                                     "--seq-k",
                                     std::to_string(s_.seq_k),
                                     "--seq-q",
                                     std::to_string(s_.seq_q),
                                     "--window",
                                     std::to_string(s_.causal ? s_.window : 0),
                                     "--dtype",
                                     s_.dtype == DType::F16 ? "fp16" : "bf16",
                                     "--seed",
                                     std::to_string(seed_),
                                     "--tolerance",
                                     fmt::format("{}", run.tolerance),
                                     "--warmup",
                                     std::to_string(c.warmup),
                                     "--min-samples",
                                     std::to_string(c.min_samples),
                                     "--min-time",
                                     fmt::format("{}", c.min_time),
                                     "--max-noise",
                                     fmt::format("{}", c.max_noise),
                                     "--timeout",
                                     fmt::format("{}", c.timeout)};
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

// The shape keys, and where python is.
std::vector<std::string> torch_peer_keys() {
  std::vector<std::string> keys = attention_shape_keys();
  keys.insert(keys.end(), {"python", "peer_timeout"});
  return keys;
}

const std::string torch_peer_doc =
    "PyTorch's scaled_dot_product_attention on the same shape, in its own python process (key `python`; "
    "scripts/torch_sdpa_peer.py is compiled in): checked against torch's own float64 reference on its own inputs, then "
    "timed with CUDA events under the row's stopping rule; GQA through enable_gqa (K/V repeated before timing where the "
    "backend refuses it, said in the note), bottom-right causal through is_causal or the lower-right CausalBias, a "
    "window as a boolean mask; unsupported (saying why) without torch, without a GPU, or when the backend refuses the shape";

// The peer runs in python, so it is built into every binary: without a GPU (or torch) its CUDA
// rows are unsupported, saying why.
const VariantRegistration reg_attention_torch_sdpa(
    "attention",
    peer({"torch_sdpa", Backend::Cuda, "torch's own choice of SDPA backend (the note says which it picked). " + torch_peer_doc,
          torch_peer_keys()}),
    make_variant<TorchSdpaPeer>(Backend::Cuda, "default"));
const VariantRegistration reg_attention_torch_sdpa_flash("attention",
                                                         peer({"torch_sdpa_flash", Backend::Cuda,
                                                               "torch SDPA forced to its FlashAttention-2 backend (sdpa_kernel)",
                                                               torch_peer_keys()}),
                                                         make_variant<TorchSdpaPeer>(Backend::Cuda, "flash"));
const VariantRegistration reg_attention_torch_sdpa_cudnn("attention",
                                                         peer({"torch_sdpa_cudnn", Backend::Cuda,
                                                               "torch SDPA forced to its cuDNN backend", torch_peer_keys()}),
                                                         make_variant<TorchSdpaPeer>(Backend::Cuda, "cudnn"));
const VariantRegistration reg_attention_torch_sdpa_efficient("attention",
                                                             peer({"torch_sdpa_efficient", Backend::Cuda,
                                                                   "torch SDPA forced to its memory-efficient (xFormers) backend",
                                                                   torch_peer_keys()}),
                                                             make_variant<TorchSdpaPeer>(Backend::Cuda, "efficient"));
const VariantRegistration reg_attention_torch_sdpa_math(
    "attention",
    peer({"torch_sdpa_math", Backend::Cuda, "torch SDPA forced to its math backend (materialises the scores, as standard does)",
          torch_peer_keys()}),
    make_variant<TorchSdpaPeer>(Backend::Cuda, "math"));
const VariantRegistration reg_attention_cpu_torch_sdpa(
    "attention",
    peer({"cpu_torch_sdpa", Backend::Cpu,
          "torch SDPA on the CPU, torch's own backend choice, fp32 on the rounded inputs (as cpu_flash) with our thread count, "
          "timed with perf_counter; otherwise as torch_sdpa",
          torch_peer_keys()}),
    make_variant<TorchSdpaPeer>(Backend::Cpu, "default"));

}  // namespace
}  // namespace ib::attention
