#include "kinds/lora/lora_variant.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/stats.h"
#include "model/engine_studies.h"
#include "model/model_choice.h"
#include "numerics/random.h"

namespace ib::lora {
namespace {

// Sequences' validation: those of the first few distinct adapters (each needs a plain engine of
// its own merged weights), which bounds the check's cost whatever the pool's size.
constexpr int kCheckedAdapters = 4;

// Adapter of batch row b: round-robin over the pool (uniform), or drawn with P(i) ∝ 1/(i+1)^s.
std::vector<int> assign_adapters(const LoraKeys& k, uint64_t seed) {
  std::vector<int> out(static_cast<size_t>(k.batch));
  const int n = static_cast<int>(k.adapters);
  std::vector<double> cdf(static_cast<size_t>(n));
  double total = 0;
  for (int i = 0; i < n; ++i) cdf[static_cast<size_t>(i)] = total += 1.0 / std::pow(i + 1.0, k.zipf_s);
  for (int64_t b = 0; b < k.batch; ++b) {
    if (k.popularity == Popularity::Uniform) {
      out[static_cast<size_t>(b)] = static_cast<int>(b % n);
      continue;
    }
    const double u = (random_uniform(seed ^ 0x7a1fu, static_cast<uint64_t>(b)) + 1.0) / 2.0 * total;
    out[static_cast<size_t>(b)] = std::min(n - 1, static_cast<int>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()));
  }
  return out;
}

}  // namespace

void LoraVariant::prepare(const Point& p, BackendRuntime&, uint64_t seed) {
  keys_ = lora_keys().read(p);
  model::ModelChoice m = model::choose_model(keys_.model, keys_.weights, seed);
  config_ = m.config;
  weights_ = std::move(m.weights);
  model_ = model::make_cpu_model(config_, *weights_);
  adapters_.clear();
  const auto modules = model::parse_modules(keys_.modules, "modules");
  for (int64_t i = 0; i < keys_.adapters; ++i) {
    if (keys_.adapter == "random")
      adapters_.push_back(model::random_adapter(config_, static_cast<int>(keys_.rank), static_cast<float>(keys_.alpha), modules,
                                                seed + 1000 + static_cast<uint64_t>(i)));
    else if (i == 0)
      adapters_.push_back(model::load_peft_adapter(config_, keys_.adapter));
    else
      adapters_.push_back(adapters_[0]);  // the same PEFT adapter resident N times: the same work
    if (serves_adapters()) model::lora_adapters(*model_).add_adapter(adapters_.back());
  }
  adapter_of_ = assign_adapters(keys_, seed);
  groups_.assign(adapters_.size(), {});
  for (size_t b = 0; b < adapter_of_.size(); ++b) groups_[static_cast<size_t>(adapter_of_[b])].push_back(b);
  distinct_ = static_cast<int>(std::count_if(groups_.begin(), groups_.end(), [](const auto& g) { return !g.empty(); }));
  const int capacity = static_cast<int>(keys_.prompt) + 1;
  seqs_.clear();
  prompts_.clear();
  for (int64_t b = 0; b < keys_.batch; ++b) {
    prompts_.push_back(model::random_prompt(config_.vocab, static_cast<int>(keys_.prompt), seed + 17 + static_cast<uint64_t>(b)));
    seqs_.push_back(model_->new_sequence(capacity));
    if (serves_adapters()) model::lora_adapters(*model_).set_adapter(seqs_.back(), adapter_of_[static_cast<size_t>(b)]);
    // A decode step runs at a fixed context: the prompts are prefilled once, here, each with
    // its own adapter (unmerged: the engine's batched path).
    if (keys_.measure == Measure::Decode)
      model_->prefill(seqs_.back(), prompts_.back().data(), static_cast<int>(keys_.prompt), 1, {});
  }
}

void LoraVariant::pass(const std::vector<size_t>& rows, float* logits) {
  const size_t V = static_cast<size_t>(config_.vocab), n = rows.size();
  std::vector<int> seqs;
  for (size_t r : rows) seqs.push_back(seqs_[r]);
  if (keys_.measure == Measure::Decode) {
    std::vector<int32_t> in(n, 1), next(n);
    std::vector<float> out_logits(logits ? n * V : 0);
    model::StepOutput out;
    out.next = next.data();  // a server's step ends with the next tokens on the host
    if (logits) out.logits = out_logits.data();
    model_->decode(seqs.data(), in.data(), static_cast<int>(n), out);
    for (size_t j = 0; j < n; ++j) {
      model_->truncate(seqs[j], static_cast<int>(keys_.prompt));
      if (logits) std::copy_n(out_logits.data() + j * V, V, logits + rows[j] * V);
    }
    return;
  }
  // Prefill: every prompt from an empty cache in one pass. The LM head is left out (every way
  // would pay it alike); validation asks for all rows' logits and keeps each prompt's last.
  const size_t P = static_cast<size_t>(keys_.prompt);
  std::vector<int> counts(n, static_cast<int>(P));
  std::vector<int32_t> tokens;
  for (size_t r : rows) {
    model_->truncate(seqs_[r], 0);
    tokens.insert(tokens.end(), prompts_[r].begin(), prompts_[r].end());
  }
  std::vector<float> all(logits ? n * P * V : 0);
  model::StepOutput out;
  if (logits) out.logits = all.data();
  model_->prefill_batch(seqs.data(), counts.data(), static_cast<int>(n), tokens.data(), out);
  if (logits)
    for (size_t j = 0; j < n; ++j) std::copy_n(all.data() + ((j + 1) * P - 1) * V, V, logits + rows[j] * V);
}

std::vector<size_t> LoraVariant::all_rows() const {
  std::vector<size_t> all(seqs_.size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = b;
  return all;
}

Validation LoraVariant::validate(BackendRuntime&) {
  const size_t V = static_cast<size_t>(config_.vocab);
  std::vector<float> got(seqs_.size() * V);
  step(got.data());
  // The rows of the first kCheckedAdapters distinct adapters (the base's first rows), each against
  // a plain engine built on its merged weights, recomputing the whole sequence without a cache.
  std::vector<int> checked_adapters;
  std::vector<size_t> rows;
  for (size_t b = 0; b < seqs_.size(); ++b) {
    const int a = adapter_served(b);
    const bool known = std::find(checked_adapters.begin(), checked_adapters.end(), a) != checked_adapters.end();
    if (!known && static_cast<int>(checked_adapters.size()) < kCheckedAdapters) checked_adapters.push_back(a);
    if (std::find(checked_adapters.begin(), checked_adapters.end(), a) != checked_adapters.end() &&
        (a >= 0 || rows.size() < static_cast<size_t>(kCheckedAdapters)))
      rows.push_back(b);
  }
  std::vector<float> want_all, got_all, base_all;
  auto base_engine = model::make_cpu_model(config_, *weights_);
  int agree = 0;
  for (int a : checked_adapters) {
    std::unique_ptr<model::WeightSource> merged;
    if (a >= 0) merged = model::merged_weights(*weights_, config_, adapters_[static_cast<size_t>(a)]);
    auto plain = a >= 0 ? model::make_cpu_model(config_, *merged) : nullptr;
    for (size_t b : rows) {
      if (adapter_served(b) != a) continue;
      std::vector<int32_t> tokens = prompts_[b];
      if (keys_.measure == Measure::Decode) tokens.push_back(1);
      auto last = [&](model::Model& m) {
        std::vector<float> l(V);
        model::StepOutput o;
        o.logits = l.data();
        const int s = m.new_sequence(static_cast<int>(tokens.size()));
        m.prefill(s, tokens.data(), static_cast<int>(tokens.size()), 1, o);
        m.release(s);
        return l;
      };
      const std::vector<float> want = last(plain ? *plain : *base_engine);
      const std::vector<float> base = plain ? last(*base_engine) : want;
      const float* g = got.data() + b * V;
      got_all.insert(got_all.end(), g, g + V);
      want_all.insert(want_all.end(), want.begin(), want.end());
      base_all.insert(base_all.end(), base.begin(), base.end());
      agree += std::max_element(g, g + V) - g == std::max_element(want.begin(), want.end()) - want.begin();
    }
  }
  for (float x : got_all)
    if (!std::isfinite(x)) return {false, "nan_logits", 1, 0, "the step produced NaN/inf logits"};
  const double err = relative_l2(got_all, want_all), tol = 1e-4;
  std::string detail = fmt::format(
      "{} of {} sequences ({} adapter{}) vs a plain engine on {} in float32, recomputed without a cache; argmax agrees at {}/{}",
      rows.size(), seqs_.size(), checked_adapters.size(), checked_adapters.size() == 1 ? "" : "s",
      !serves_adapters() ? "the base weights" : "each one's W + s·B·A", agree, rows.size());
  if (serves_adapters())
    detail += fmt::format("; the adapters move the logits {:.1f}% from the base model's", 100 * relative_l2(want_all, base_all));
  after_validation();
  return {err <= tol, "rel_l2", err, tol, detail};
}

void LoraVariant::run(BackendRuntime&) { step(nullptr); }

std::vector<Metric> LoraVariant::metrics() const {
  std::vector<Metric> m;
  if (serves_adapters()) {
    m.push_back({"distinct", static_cast<double>(distinct_), "adapters"});
    m.push_back({"resident", static_cast<double>(model::lora_adapters(*model_).adapter_bytes()) / (1 << 20),
                 "MiB"});  // the pool's A and B
    // What keeping one merged copy of the model per adapter would hold instead (computed: the
    // pool's size times the engine's weight bytes).
    m.push_back(
        {"merged copies", static_cast<double>(keys_.adapters) * static_cast<double>(model_->weight_bytes()) / (1 << 20), "MiB"});
  }
  return m;
}

std::string LoraVariant::note() const {
  if (!serves_adapters()) return fmt::format("{}: no adapter", config_.name);
  const auto& a = adapters_.front();
  const std::string what = keys_.adapter == "random" ? fmt::format("{} random adapters", adapters_.size())
                                                     : fmt::format("{} resident {}×", keys_.adapter, adapters_.size());
  return fmt::format("{}: {}, rank {} on {}, scaling {:g}; {} in the batch of {}", config_.name, what, a.rank,
                     model::modules_label(a.modules()), a.scaling, distinct_, seqs_.size());
}

}  // namespace ib::lora
