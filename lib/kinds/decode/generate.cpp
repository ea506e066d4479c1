// decode's end-to-end generation: every prompt prefilled (first tokens on the host = TTFT), then
// new_tokens − 1 batched decode steps; TTFT, TPOT and TPS as vLLM defines them.
#include <algorithm>

#include "core/registry.h"
#include "core/stats.h"
#include "kinds/decode/decode_variant.h"

namespace ib::model {
namespace {

class GenerateVariant final : public DecodeVariant {
 public:
  using DecodeVariant::DecodeVariant;

  std::string unsupported(const Point& p) const override {
    return decode_keys().read(p).new_tokens < 2 ? "generation needs new_tokens >= 2 (TPOT)" : "";
  }

  // Token ids come back to the host every step, as a server's do.
  void run(BackendRuntime&) override {
    StepOutput out;
    std::vector<int32_t> next(static_cast<size_t>(batch_));
    out.next = next.data();
    out.sampling = sampling_;
    const auto t0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batch_; ++b) {
      model_->truncate(seqs_[static_cast<size_t>(b)], 0);
      out.step = step_++;
      model_->prefill(seqs_[static_cast<size_t>(b)], prompts_[static_cast<size_t>(b)].data(), length_of(b), 1,
                      {nullptr, &next[static_cast<size_t>(b)], sampling_, out.step});
    }
    const double ttft = seconds_since(t0);
    std::vector<int32_t> cur = next;
    if (text_) generated_.assign(1, next[0]);  // sequence 0's text, kept for the row (one push per step)
    for (int i = 1; i < new_tokens_; ++i) {
      out.step = step_++;
      model_->decode(seqs_.data(), cur.data(), batch_, out);
      cur = next;
      if (text_) generated_.push_back(next[0]);
    }
    const double total = seconds_since(t0);
    ttft_.push_back(ttft);
    tpot_.push_back((total - ttft) / (new_tokens_ - 1));
    tps_.push_back(static_cast<double>(batch_) * new_tokens_ / total);
  }

 private:
  int new_tokens(const DecodeKeys& keys) const override { return static_cast<int>(keys.new_tokens); }
  int capacity_past_prompt() const override { return new_tokens_; }
  // A short greedy generation on sequence 0, keeping each step's logits.
  std::vector<std::vector<float>> validation_logits(Model& m, int seq, std::vector<int32_t>& tokens) override {
    const std::vector<int32_t>& prompt = prompts_[0];
    const int n0 = length_of(0);
    std::vector<std::vector<float>> logits;
    tokens = prompt;
    m.truncate(seq, 0);
    const int steps = std::min(new_tokens_ > 0 ? new_tokens_ : 4, 8);
    std::vector<float> l(static_cast<size_t>(config_.vocab));
    int32_t next = 0;
    StepOutput out;
    out.logits = l.data();
    out.next = &next;
    const int cap = m.capacity(seq);
    m.prefill(seq, prompt.data(), n0, 1, out);
    logits.push_back(l);
    for (int i = 1; i < steps && n0 + i < cap; ++i) {
      tokens.push_back(next);
      m.decode(&seq, &tokens.back(), 1, out);
      logits.push_back(l);
    }
    m.truncate(seq, 0);
    return logits;
  }
  void add_metrics(std::vector<Metric>& m) const override {
    if (ttft_.empty()) return;
    m.push_back({"TTFT", summarize(ttft_).median * 1e3, "ms"});
    m.push_back({"TPOT", summarize(tpot_).median * 1e3, "ms"});
    m.push_back({"TPS", summarize(tps_).median, "tok/s"});
  }
};

// The keys a generation reads besides the text prompt's and the engine choice.
const std::vector<std::string> kGenerateReads = {"model", "weights", "batch", "prompt", "new_tokens", "temperature"};

const VariantListRegistration generate_variants(
    "decode", {
                  {{"generate", Backend::Cuda,
                    "prefill every prompt, then new_tokens − 1 batched decode steps with CUDA Graphs; TTFT/TPOT/TPS",
                    decode_reads(kGenerateReads, Backend::Cuda)},
                   IB_IF_CUDA(make_variant<GenerateVariant>(Backend::Cuda, true))},
                  {{"cpu_generate", Backend::Cpu, "generation on the CPU engine (float32 on bf16-rounded weights)",
                    decode_reads(kGenerateReads, Backend::Cpu)},
                   make_variant<GenerateVariant>(Backend::Cpu, false)},
              });

}  // namespace
}  // namespace ib::model
