// decode's step: one batched decode step at context `prompt` (the prompts cached once), on the GPU
// replayed as a CUDA Graph or launched kernel by kernel (the launch overhead graphs save).
#include "core/registry.h"
#include "core/stats.h"
#include "kinds/decode/decode_variant.h"

namespace ib::model {
namespace {

class DecodeStepVariant final : public DecodeVariant {
 public:
  using DecodeVariant::DecodeVariant;

  // The next tokens come back to the host, so the wall time is the step's (TPS = batch / it).
  void run(BackendRuntime&) override {
    StepOutput out;
    std::vector<int32_t> next(static_cast<size_t>(batch_)), in(static_cast<size_t>(batch_), 1);
    out.next = next.data();
    out.sampling = sampling_;
    out.step = step_++;
    const auto t0 = std::chrono::steady_clock::now();
    model_->decode(seqs_.data(), in.data(), batch_, out);
    tps_.push_back(batch_ / seconds_since(t0));
    for (int b = 0; b < batch_; ++b) model_->truncate(seqs_[static_cast<size_t>(b)], length_of(b));
  }
  // Every weight read once, each sequence's cache read once (+ one token written).
  Work work() const override {
    const double kv_token = kv_bytes_per_token();
    const double wbytes = static_cast<double>(model_->streamed_weight_bytes(batch_));
    return {batch_ * config_.flops_per_token(prompt_), wbytes + batch_ * (prompt_ + 1.0) * kv_token};
  }

 private:
  bool caches_prompts() const override { return true; }
  // The prompt is cached already: one step with logits (the batch's other rows do not change row
  // 0's: each row's product is row-independent).
  std::vector<std::vector<float>> validation_logits(Model& m, int seq, std::vector<int32_t>& tokens) override {
    tokens = prompts_[0];
    const bool own = &m == model_.get();
    const int rows = own ? batch_ : 1;
    std::vector<float> l(static_cast<size_t>(config_.vocab) * static_cast<size_t>(rows));
    std::vector<int32_t> in(static_cast<size_t>(rows), 1), next(static_cast<size_t>(rows));
    StepOutput out;
    out.logits = l.data();
    out.next = next.data();
    m.decode(own ? seqs_.data() : &seq, in.data(), rows, out);
    if (own)
      for (int b = 0; b < batch_; ++b) m.truncate(seqs_[static_cast<size_t>(b)], length_of(b));
    tokens.push_back(1);
    return {std::vector<float>(l.begin(), l.begin() + config_.vocab)};
  }
  void add_metrics(std::vector<Metric>& m) const override {
    if (!tps_.empty()) m.push_back({"TPS", summarize(tps_).median, "tok/s"});
  }
};

// The keys a step reads besides the text prompt's and the engine choice.
const std::vector<std::string> kStepReads = {"model", "weights", "batch", "prompt", "temperature"};

const VariantListRegistration decode_step_variants(
    "decode", {
                  {{"decode_step", Backend::Cuda, "one batched decode step at context `prompt`, replayed as a CUDA Graph",
                    decode_reads(kStepReads, Backend::Cuda)},
                   IB_IF_CUDA(make_variant<DecodeStepVariant>(Backend::Cuda, true))},
                  {{"decode_step_eager", Backend::Cuda,
                    "the same step launched kernel by kernel (no graph): the launch overhead graphs save",
                    decode_reads(kStepReads, Backend::Cuda)},
                   IB_IF_CUDA(make_variant<DecodeStepVariant>(Backend::Cuda, false))},
                  // No graph on the CPU: its step plays decode_step_eager.
                  {{"cpu_decode_step", Backend::Cpu, "one decode step on the CPU engine", decode_reads(kStepReads, Backend::Cpu),
                    false, "decode_step_eager"},
                   make_variant<DecodeStepVariant>(Backend::Cpu, false)},
              });

}  // namespace
}  // namespace ib::model
