// The `decode` kind's llama.cpp peer rows: llama.cpp's CPU engine on the same checkpoint
// (converted to GGUF by scripts/build-llamacpp --convert), in its own process, beside the CPU
// engine's rows of the same run.
//
// Timing: llama-batched-bench, llama.cpp's own tool for these two numbers. A decode step is its
// text-generation time over `peer_tokens` steps of `batch` sequences after a `prompt`-token prefill
// each (so the context runs from prompt to prompt + peer_tokens, where ours stays at prompt), per
// step; a prefill is its prompt-processing time of one sequence. Repeated batch sizes in one
// process give the samples. Its steps compute the logits of every row but sample nothing (random
// next tokens); ours take the argmax, a few µs.
//
// Check: before timing, llama-simple's greedy continuation of a fixed text must be the CPU
// engine's own (llama.cpp's tokenizer and ours agree on it). Its arithmetic (f16, or 8-bit
// activations against quantized weights) may part from our float32 only at a near-tie, so the
// first half of the tokens must agree, or the two may part sooner where llama.cpp's token is
// within kNearTie of our top logit; the row says how many agreed and where they parted.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/data_dir.h"
#include "core/json_input.h"
#include "core/peer_process.h"
#include "core/registry.h"
#include "core/spec.h"
#include "kinds/decode/decode_keys.h"
#include "model/checkpoint.h"
#include "model/model_choice.h"
#include "model/text_prompt.h"
#include "numerics/parallel.h"

namespace ib::model {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckText = "Once upon a time";
constexpr int kCheckTokens = 16;
// Logits apart at which two greedy decoders of the same weights may pick differently: llama.cpp's
// Q8 activations move SmolLM2-135M Q4_1's logits by ~0.1 (transformers in float32 agrees with us
// where llama.cpp picks ' New' over ' Nova', 0.16 below it); a wrong model parts by whole logits.
constexpr float kNearTie = 0.5f;

std::string read_small_file(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

// What the peer times: a decode step or a prefill (the same process, different numbers read).
enum class DecodeMeasure { Step, Prefill };

class LlamaCppPeer : public Variant {
 public:
  explicit LlamaCppPeer(DecodeMeasure what) : what_(what) {}

  std::string unsupported(const Point& p) const override {
    if (decode_keys().read(p).model != "checkpoint")
      return "the llama.cpp peer runs a checkpoint (model: checkpoint, weights: DIR) converted to GGUF";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const DecodeKeys keys = decode_keys().read(p);
    weights_dir_ = keys.weights;
    ModelChoice m = choose_model(keys.model, keys.weights, seed);
    config_ = m.config;
    weights_ = std::move(m.weights);
    batch_ = static_cast<int>(keys.batch);  // a prefill's point has no batch: 1
    prompt_ = static_cast<int>(keys.prompt);
    tokens_ = what_ == DecodeMeasure::Step ? static_cast<int>(keys.peer_tokens) : 1;
    bin_ = keys.llama_cpp;
    gguf_ = keys.gguf;
    // A GGUF checkpoint is the peer's file as it is (the same blocks our engine streams).
    if (gguf_ == "auto")
      gguf_ = is_gguf_checkpoint(weights_dir_)
                  ? data_path(weights_dir_)
                  : fmt::format(".peers/gguf/{}-f16.gguf", fs::path(weights_dir_).filename().string());
  }
  Validation validate(BackendRuntime&) override {
    throw std::logic_error("the llama.cpp peer is checked in its own process (measure_self)");
  }
  void run(BackendRuntime&) override { throw std::logic_error("the llama.cpp peer is timed in its own process (measure_self)"); }

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override {
    SelfMeasurement m;
    const fs::path bench = fs::path(bin_) / "llama-batched-bench", simple = fs::path(bin_) / "llama-simple";
    if (!fs::exists(bench) || !fs::exists(simple)) {
      m.unsupported = fmt::format(
          "no llama-batched-bench and llama-simple in {} (the `llama_cpp` key): scripts/build-llamacpp builds them", bin_);
      return m;
    }
    if (!fs::exists(gguf_)) {
      m.unsupported =
          fmt::format("no GGUF {} (the `gguf` key): scripts/build-llamacpp --convert {} writes it", gguf_, weights_dir_);
      return m;
    }
    const double deadline = c.timeout + 120;
    m.validation = check_greedy(simple.string(), deadline);
    if (!m.validation.ok) return m;
    const int reps = static_cast<int>(std::clamp<int64_t>(c.min_samples, 3, 30));
    const int tg = what_ == DecodeMeasure::Step ? tokens_ : 1;
    std::string npl;
    for (int i = 0; i < reps; ++i) npl += (i ? "," : "") + std::to_string(batch_);
    const std::string threads = std::to_string(cpu_threads());
    const std::vector<std::string> argv = {bench.string(),
                                           "-m",
                                           gguf_,
                                           "-c",
                                           std::to_string(batch_ * (prompt_ + tg) + 16),
                                           "-b",
                                           "2048",
                                           "-ub",
                                           "512",
                                           "-npp",
                                           std::to_string(prompt_),
                                           "-ntg",
                                           std::to_string(tg),
                                           "-npl",
                                           npl,
                                           "-t",
                                           threads,
                                           "-tb",
                                           threads,
                                           "--output-format",
                                           "jsonl"};
    const PeerProcess r = run_peer_process(argv, deadline);
    if (!r.spawn_error.empty() || r.timed_out || r.exit_code != 0) {
      m.validation = {false, "peer", 1, 0,
                      fmt::format("llama-batched-bench {}: {}", r.timed_out ? "timed out" : "failed",
                                  r.spawn_error.empty() ? last_line(r.err) : r.spawn_error)};
      return m;
    }
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      const auto j = ib::parse_json_or_discarded<nlohmann::json>(line);
      if (j.is_discarded() || !j.contains("t_tg")) continue;
      m.samples.push_back(what_ == DecodeMeasure::Step ? j.at("t_tg").get<double>() / tg : j.at("t_pp").get<double>());
    }
    if (m.samples.empty()) {
      m.validation = {false, "peer", 1, 0, "llama-batched-bench printed no result line: " + last_line(r.err)};
      return m;
    }
    m.stop_reason = fmt::format("{} repetitions in one llama-batched-bench process", m.samples.size());
    const fs::path root = fs::path(bin_).parent_path();  // scripts/build-llamacpp's record of what it built
    m.note = fmt::format("llama.cpp {} from llama-cpp-python {}, {}, {} threads{}", read_small_file(root / "COMMIT"),
                         read_small_file(root / "VERSION"), fs::path(gguf_).filename().string(), threads,
                         what_ == DecodeMeasure::Step
                             ? fmt::format(", {} steps from context {} (ours: at {}); no sampling", tg, prompt_, prompt_)
                             : "");
    return m;
  }
  Work work() const override {
    if (what_ == DecodeMeasure::Step) {
      const double kv_token = static_cast<double>(config_.kv_elems_per_token()) * 2.0;  // f16 cache
      const double ctx = prompt_ + tokens_ / 2.0;
      return {batch_ * config_.flops_per_token(static_cast<int>(ctx)), gguf_weight_bytes() + batch_ * ctx * kv_token};
    }
    double f = 0;
    for (int i = 0; i < prompt_; ++i) f += config_.flops_per_token(i);
    return {f - (prompt_ - 1.0) * 2.0 * config_.vocab * config_.hidden, gguf_weight_bytes()};
  }

 private:
  // The GGUF's size: its tensors, which a step reads, and a small header.
  double gguf_weight_bytes() const {
    std::error_code ec;
    const auto n = fs::file_size(gguf_, ec);
    return ec ? 0.0 : static_cast<double>(n);
  }

  // llama-simple's greedy continuation of kCheckText against the CPU engine's.
  Validation check_greedy(const std::string& simple, double deadline) {
    const auto tok = prompt_tokenizer("auto", weights_dir_);
    std::vector<int32_t> ids = tok->encode(kCheckText);
    auto engine = make_cpu_model(config_, *weights_);
    const int seq = engine->new_sequence(static_cast<int>(ids.size()) + kCheckTokens);
    int32_t next = 0;
    const size_t V = static_cast<size_t>(config_.vocab);
    std::vector<float> logits(kCheckTokens * V);  // [step][vocab]: where a near-tie is judged
    StepOutput out;
    out.next = &next;
    out.logits = logits.data();
    engine->prefill(seq, ids.data(), static_cast<int>(ids.size()), 1, out);
    std::vector<int32_t> ours;
    for (int i = 0; i < kCheckTokens && next != tok->eos_id(); ++i) {
      ours.push_back(next);
      out.logits = logits.data() + static_cast<size_t>(i + 1) * V;
      if (i + 1 < kCheckTokens) engine->decode(&seq, &ours.back(), 1, out);
    }
    const PeerProcess r = run_peer_process({simple, "-m", gguf_, "-n", std::to_string(kCheckTokens), kCheckText}, deadline);
    if (!r.spawn_error.empty() || r.timed_out || r.exit_code != 0)
      return {false, "peer", 1, 0,
              fmt::format("llama-simple {}: {}", r.timed_out ? "timed out" : "failed",
                          r.spawn_error.empty() ? last_line(r.err) : r.spawn_error)};
    // It prints the prompt's pieces (a BOS piece first where it adds one), then the continuation.
    const size_t at = r.out.find(kCheckText);
    if (at == std::string::npos)
      return {false, "peer", 1, 0, fmt::format("llama-simple did not echo the prompt: {}", short_text(r.out))};
    std::string theirs = r.out.substr(at + std::string(kCheckText).size());
    if (!theirs.empty() && theirs.back() == '\n') theirs.pop_back();
    int agree = 0;
    for (size_t n = 1; n <= ours.size(); ++n) {
      const std::string mine = tok->decode(std::vector<int32_t>(ours.begin(), ours.begin() + static_cast<std::ptrdiff_t>(n)));
      if (theirs.compare(0, mine.size(), mine) != 0) break;
      agree = static_cast<int>(n);
    }
    const int need = static_cast<int>(ours.size() + 1) / 2;
    std::string parted;  // where the two part at a near-tie: llama.cpp's next token as ours reads it
    if (agree < need) {
      const std::string same = tok->decode(std::vector<int32_t>(ours.begin(), ours.begin() + agree));
      const std::vector<int32_t> rest = tok->encode(theirs.substr(std::min(same.size(), theirs.size())), false);
      if (!rest.empty() && rest[0] >= 0 && static_cast<size_t>(rest[0]) < V) {
        const float* row = logits.data() + static_cast<size_t>(agree) * V;
        const float gap = row[ours[static_cast<size_t>(agree)]] - row[rest[0]];
        if (gap <= kNearTie)
          parted = fmt::format("; parted at a near-tie, token {}: ours '{}', llama.cpp's '{}' {:.2f} below it in our logits",
                               agree + 1, tok->decode({ours[static_cast<size_t>(agree)]}), tok->decode({rest[0]}), gap);
      }
    }
    return {
        agree >= need || !parted.empty(), "greedy tokens", static_cast<double>(agree), static_cast<double>(need),
        fmt::format("llama.cpp's greedy continuation of '{}' is ours for {} of {} tokens ({} required, or a near-tie "
                    "within {} logits){}: {}",
                    kCheckText, agree, ours.size(), need, kNearTie, parted, short_text(std::string(kCheckText) + theirs, 60))};
  }

  DecodeMeasure what_;
  ModelConfig config_;
  std::unique_ptr<WeightSource> weights_;
  std::string weights_dir_, bin_, gguf_;
  int batch_ = 1, prompt_ = 0, tokens_ = 16;
};

const std::vector<std::string> kPeerStepKeys = {"model", "weights", "batch", "prompt", "llama_cpp", "gguf", "peer_tokens"};
const std::vector<std::string> kPeerPrefillKeys = {"model", "weights", "prompt", "llama_cpp", "gguf"};

const VariantRegistration reg_llamacpp_step(
    "decode",
    peer({"llamacpp_decode_step", Backend::Cpu,
          "llama.cpp's batched decode step (llama-batched-bench) on the checkpoint's GGUF: the CPU peer", kPeerStepKeys}),
    make_variant<LlamaCppPeer>(DecodeMeasure::Step));
const VariantRegistration reg_llamacpp_prefill(
    "decode",
    peer({"llamacpp_prefill", Backend::Cpu,
          "llama.cpp's prefill of `prompt` tokens (llama-batched-bench) on the checkpoint's GGUF", kPeerPrefillKeys}),
    make_variant<LlamaCppPeer>(DecodeMeasure::Prefill));

}  // namespace

}  // namespace ib::model
