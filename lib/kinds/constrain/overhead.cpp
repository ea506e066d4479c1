// The `constrain-overhead` kind (§8.5): the cost of applying a mask at a decode step against the LM
// head alone; the kind and its CPU analog here, the CUDA variants in cuda_overhead.cpp. No DFA:
// a random mask of the given density.
#include <cmath>

#include <fmt/format.h>

#include "constrain/masked_argmax.h"
#include "constrain/token_index.h"
#include "core/memory.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"
#include "numerics/parallel.h"
#include "numerics/random.h"

namespace ib::constrain {
namespace {

class CpuLmHead : public Variant {
 public:
  explicit CpuLmHead(bool masked) : masked_(masked) {}
  std::string unsupported(const Point& p) const override {
    LmHeadShape sh;
    if (!lm_head_shape(overhead_keys().read(p).model, &sh)) return "unknown model";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const OverheadKeys k = overhead_keys().read(p);
    lm_head_shape(k.model, &shape_);
    const size_t h = static_cast<size_t>(shape_.hidden), v = static_cast<size_t>(shape_.vocab);
    w_.allocate(h * v, "LM head weights");
    x_.allocate(h, "hidden state");
    logits_.allocate(v, "logits");
    mask_.allocate((v + 31) / 32, "token mask");
    parallel_for(h * v, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) w_[i] = random_uniform(seed, i) * 0.05f;
    });
    for (size_t i = 0; i < h; ++i) x_[i] = random_uniform(seed + 1, i);
    const double density = k.mask_density;
    for (size_t w = 0; w < mask_.size(); ++w) mask_[w] = 0;
    for (size_t t = 0; t < v; ++t)
      if (static_cast<double>(random_bits(seed + 2, t) % 1000000) < density * 1e6) mask_[t >> 5] |= 1u << (t & 31);
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    // Reference: float64 logits, argmax among allowed tokens.
    const size_t h = static_cast<size_t>(shape_.hidden);
    std::vector<double> ref(static_cast<size_t>(shape_.vocab));
    for (size_t t = 0; t < ref.size(); ++t) {
      double acc = 0;
      for (size_t i = 0; i < h; ++i) acc += static_cast<double>(w_[t * h + i]) * x_[i];
      ref[t] = acc;
    }
    int32_t want = -1;
    for (int32_t t = 0; t < shape_.vocab; ++t)
      if ((!masked_ || mask_allows(mask_.data(), t)) &&
          (want < 0 || ref[static_cast<size_t>(t)] > ref[static_cast<size_t>(want)]))
        want = t;
    // A different index is fine only as a float near-tie with the true maximum.
    const double gap = token_ < 0 ? INFINITY : std::fabs(ref[static_cast<size_t>(token_)] - ref[static_cast<size_t>(want)]);
    const bool allowed = token_ >= 0 && (!masked_ || mask_allows(mask_.data(), token_));
    return {allowed && gap <= 1e-4, "logit_gap", gap, 1e-4, fmt::format("picked {}, float64 picks {}", token_, want)};
  }
  // The decode-step proxy: logits = W·x (SGEMV over the threads), then (masked) argmax.
  void run(BackendRuntime&) override {
    const size_t h = static_cast<size_t>(shape_.hidden);
    parallel_for(static_cast<size_t>(shape_.vocab), [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) {
        const float* row = w_.data() + t * h;
        float acc = 0;
        for (size_t i = 0; i < h; ++i) acc += row[i] * x_[i];
        logits_[t] = acc;
      }
    });
    token_ = masked_argmax(logits_.data(), masked_ ? mask_.data() : nullptr, shape_.vocab);
  }
  Work work() const override {
    const double h = shape_.hidden, v = shape_.vocab;
    return {2 * h * v, 4 * (h * v + h + v)};
  }

 private:
  bool masked_;
  LmHeadShape shape_{};
  HostBuffer<float> w_, x_, logits_;
  HostBuffer<uint32_t> mask_;
  int32_t token_ = -1;
};

KindInfo overhead_kind() {
  KindInfo k = constrain_kind(
      "constrain-overhead",
      "The cost of a mask at a decode step, against the LM head alone (logits = W·x, then greedy choice): "
      "lm_head_argmax vs lm_head_masked_argmax (GPU: cuBLAS GEMV + fused mask/argmax kernel, bitmask uploaded each "
      "step; CPU: SGEMV + masked argmax). The ratio is the overhead; a full engine decode step comes with the engine.",
      overhead_keys().keys(), "model: tiny\n");
  k.roofline = true;
  return k;
}

const KindRegistration overhead_registration(overhead_kind());

// The CUDA variants are declared in cuda_overhead.cpp.
const VariantListRegistration overhead_variants(
    "constrain-overhead",
    {{{"cpu_lm_head_argmax", Backend::Cpu, "fp32 SGEMV over the CPU threads, then argmax", {}}, make_variant<CpuLmHead>(false)},
     {{"cpu_lm_head_masked_argmax", Backend::Cpu, "the same, masked", {}}, make_variant<CpuLmHead>(true)}});

}  // namespace
}  // namespace ib::constrain
