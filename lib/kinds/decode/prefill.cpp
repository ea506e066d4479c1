// decode's prefill: one prefill of sequence 0's `prompt` tokens (its roofline: the FLOPs).
#include "core/registry.h"
#include "kinds/decode/decode_variant.h"

namespace ib::model {
namespace {

class PrefillVariant final : public DecodeVariant {
 public:
  using DecodeVariant::DecodeVariant;

  void run(BackendRuntime&) override {
    StepOutput out;
    std::vector<int32_t> next(static_cast<size_t>(batch_));
    out.next = next.data();
    out.sampling = sampling_;
    model_->truncate(seqs_[0], 0);
    out.step = step_++;
    model_->prefill(seqs_[0], prompts_[0].data(), length_of(0), 1, out);
  }
  Work work() const override {
    const double kv_token = kv_bytes_per_token();
    const double wbytes = static_cast<double>(model_->streamed_weight_bytes(length_of(0)));
    double f = 0;
    const int n = length_of(0);
    for (int i = 0; i < n; ++i) f += config_.flops_per_token(i);
    return {f - (n - 1.0) * 2.0 * config_.vocab * config_.hidden, wbytes + n * kv_token};  // LM head on the last token only
  }

 private:
  // The prompt in two chunks (the second attends to the cached first) vs in one piece.
  std::vector<std::vector<float>> validation_logits(Model& m, int seq, std::vector<int32_t>& tokens) override {
    const int n0 = length_of(0);
    tokens = prompts_[0];
    std::vector<float> l(static_cast<size_t>(config_.vocab));
    StepOutput out;
    out.logits = l.data();
    m.truncate(seq, 0);
    const int half = n0 / 2;
    if (half > 0) m.prefill(seq, prompts_[0].data(), half, 1, {});
    m.prefill(seq, prompts_[0].data() + half, n0 - half, 1, out);
    m.truncate(seq, 0);
    return {l};
  }
};

// The keys a prefill reads besides the text prompt's and the engine choice.
const std::vector<std::string> kPrefillReads = {"model", "weights", "prompt", "temperature"};

const VariantListRegistration prefill_variants(
    "decode", {
                  {{"prefill", Backend::Cuda, "one prefill of `prompt` tokens (cuBLAS GEMMs, flash2 attention)",
                    decode_reads(kPrefillReads, Backend::Cuda)},
                   IB_IF_CUDA(make_variant<PrefillVariant>(Backend::Cuda, true))},
                  {{"cpu_prefill", Backend::Cpu, "one prefill on the CPU engine", decode_reads(kPrefillReads, Backend::Cpu)},
                   make_variant<PrefillVariant>(Backend::Cpu, false)},
              });

}  // namespace
}  // namespace ib::model
