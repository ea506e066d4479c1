// Kind `kv-quant-model` (§8.3, quantized KV with the engine): what storing the KV cache in bf16,
// FP8, INT8, int4 or int2 (KIVI) costs a real decode. The CPU engine rounds every K/V it writes through the format
// (Model::set_kv_format: the values a cache in that format returns) and decodes the reference's
// tokens teacher-forced; the reference is the float32 cache. Quality only: the time per format
// is kv-quant's (the decode-attention kernels), not this emulation's.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/registry.h"
#include "kinds/kvcache/comparison_metrics.h"
#include "kinds/kvcache/engine_decode_keys.h"
#include "kvcache/engine_compare.h"
#include "model/engine_studies.h"

namespace ib::kvcache {
namespace {

// The kind's keys: the engine's decode alone (every variant reads them all).
const ParamSet<EngineDecodeOptions>& quant_model_keys() {
  static const ParamSet<EngineDecodeOptions> set = engine_decode_params(256, 64);
  return set;
}

// Per (layer, kv head): the largest channel's |max| over the median channel's, for K and for V;
// the mean over heads and the worst head.
struct ChannelOutliers {
  double key_mean = 0, key_worst = 0, value_mean = 0, value_worst = 0;
};
ChannelOutliers channel_outliers(const std::vector<float>& amax, const model::ModelConfig& c) {
  ChannelOutliers o;
  const size_t D = static_cast<size_t>(c.head_dim), H = static_cast<size_t>(c.kv_heads);
  std::vector<float> ch(D);
  for (size_t l = 0; l < static_cast<size_t>(c.layers); ++l)
    for (size_t kv = 0; kv < 2; ++kv)
      for (size_t h = 0; h < H; ++h) {
        const float* a = amax.data() + ((l * 2 + kv) * H + h) * D;
        ch.assign(a, a + D);
        std::nth_element(ch.begin(), ch.begin() + static_cast<std::ptrdiff_t>(D / 2), ch.end());
        const double median = ch[D / 2], top = *std::max_element(a, a + D);
        const double ratio = median > 0 ? top / median : 0;
        (kv == 0 ? o.key_mean : o.value_mean) += ratio / static_cast<double>(c.layers * H);
        double& worst = kv == 0 ? o.key_worst : o.value_worst;
        worst = std::max(worst, ratio);
      }
  return o;
}

class EngineKvQuant : public Variant {
 public:
  explicit EngineKvQuant(KvFormat f) : format_(f) {}

  std::string unsupported(const Point& p) const override { return engine_decode_unsupported(quant_model_keys().read(p)); }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    ref_ = reference_decode(quant_model_keys().read(p), seed);
    // One prefill of the prompt with the float32 cache: its channel ranges (the outliers KIVI's
    // per-channel keys answer) and, for fp8, the static scales as offline calibration makes them:
    // amax/448 per layer, K/V and kv head. Generated tokens whose K/V exceed the prompt's range
    // saturate.
    const int seq = ref_.model->new_sequence(ref_.prompt);
    ref_.model->prefill(seq, ref_.tokens.data(), ref_.prompt, 1, model::StepOutput{});
    outliers_ = channel_outliers(model::kv_format_study(*ref_.model).kv_channel_amax(seq), ref_.config);
    if (format_ == KvFormat::FP8) {
      fp8_scales_ = model::kv_format_study(*ref_.model).kv_amax(seq);
      for (float& s : fp8_scales_) s = fp8_scale(s);
    }
    ref_.model->release(seq);
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    // The gate: the decode is finite and the rounding took effect (its attention differs from
    // the float32 cache's). The rounding rules themselves are unit-tested (kv_format.h).
    const DecodeComparison c = compare_decode(ref_, logits_, attn_);
    const bool finite = std::isfinite(c.kl_mean) && std::isfinite(c.attn_err);
    const bool changed = c.attn_err > 0;
    return {finite && changed, "attn err", c.attn_err, 0,
            fmt::format("the decode with a {} cache is finite and differs from the float32 cache's (rounding took effect); "
                        "{} measured steps",
                        to_string(format_), ref_.new_tokens)};
  }
  void run(BackendRuntime&) override {
    teacher_forced_decode(
        ref_, logits_, attn_,
        [&](int seq, int t) {
          if (t == 0) model::kv_format_study(*ref_.model).set_kv_format(seq, format_, fp8_scales_);
        },
        nullptr);
  }
  std::vector<Metric> metrics() const override {
    const model::ModelConfig& c = ref_.config;
    double bytes = static_cast<double>(c.kv_elems_per_token()) * kv_element_bytes(format_) +
                   2.0 * c.layers * c.kv_heads * kv_scale_bytes_per_token_head(format_, c.head_dim);
    if (is_kivi(format_))  // the engine's value groups are min(G, head_dim) channels
      bytes = static_cast<double>(c.kv_elems_per_token()) * kv_element_bytes(format_) +
              c.layers * c.kv_heads *
                  (kv_scale_bytes_per_token_head(format_, c.head_dim) +
                   kv_scale_bytes_per_token_head(format_, c.head_dim, std::min(kKiviGroup, c.head_dim)));
    std::vector<Metric> m = {{"KV/token", bytes / 1024.0, "KiB"}};
    append_comparison_metrics(compare_decode(ref_, logits_, attn_), m);
    m.push_back({"K outlier", outliers_.key_mean, "× median ch"});
    m.push_back({"V outlier", outliers_.value_mean, "× median ch"});
    return m;
  }
  std::string note() const override {
    return fmt::format(
        "over the prompt's float32 K/V, per layer and kv head: the largest channel's |max| is {:.1f}× the median "
        "channel's for keys (worst head {:.1f}×), {:.1f}× for values (worst {:.1f}×)",
        outliers_.key_mean, outliers_.key_worst, outliers_.value_mean, outliers_.value_worst);
  }

 private:
  KvFormat format_;
  ReferenceDecode ref_;
  std::vector<float> fp8_scales_;
  ChannelOutliers outliers_;
  std::vector<float> logits_, attn_;
};

KindInfo quant_model_kind() {
  KindInfo k;
  k.name = "kv-quant-model";
  k.smallest = "prompt: 32\nnew_tokens: 8\n";
  k.group = "kvcache";
  k.doc =
      "Quantized KV on the transformer engine (CPU, float32 arithmetic): prompt + new_tokens tokens decoded one at a "
      "time with every K/V rounded through the format as it is written (bf16; fp8 e4m3 with static scales per layer, K/V "
      "and kv head calibrated on the prompt (amax/448 over a prefill of it) – larger values later saturate; int8 with per-token "
      "scales; "
      "int4 and int2 KIVI: bf16 until a group of 32 tokens completes, then keys per channel over the group and values "
      "per token in groups of min(32, head_dim) channels, 4 or 2 bits), fed the "
      "float32 cache's greedy tokens (teacher forcing). Over the measured steps: KL(float32 ‖ format) of the next-token "
      "distribution, top-1 agreement, relative L2 of every layer's attention output. A sample is one such decode on "
      "the CPU: quality only – kv-quant times the formats' decode-attention kernels. With `text: FILE` the decode is "
      "the text's tokens and the measured ones are scored (perplexity, and its ratio to the float32 cache's). `K outlier` / "
      "`V outlier`: per layer and kv head, the largest channel's |max| over the median channel's in the prompt's float32 "
      "cache (KIVI's case for per-channel keys).";
  k.keys = quant_model_keys().keys();
  k.check = check_engine_decode;
  return k;
}

const KindRegistration quant_model_registration(quant_model_kind());
const VariantListRegistration quant_model_variants(
    "kv-quant-model",
    {{{"cpu_bf16", Backend::Cpu, "bf16 cache (what the CUDA engine stores)", {}, true},
      make_variant<EngineKvQuant>(KvFormat::BF16)},
     {{"cpu_fp8", Backend::Cpu, "FP8 e4m3 cache, static per-(layer, K/V, kv head) scales calibrated on the prompt", {}, true},
      make_variant<EngineKvQuant>(KvFormat::FP8)},
     {{"cpu_int8", Backend::Cpu, "INT8 cache, per-token per-head scales", {}, true}, make_variant<EngineKvQuant>(KvFormat::INT8)},
     {{"cpu_int4",
       Backend::Cpu,
       "int4 KIVI cache: keys per channel per 32-token group, values per token, the last group bf16",
       {},
       true},
      make_variant<EngineKvQuant>(KvFormat::INT4)},
     {{"cpu_int2", Backend::Cpu, "int2 KIVI cache: as cpu_int4 with 2-bit codes", {}, true},
      make_variant<EngineKvQuant>(KvFormat::INT2)}});

}  // namespace
}  // namespace ib::kvcache
