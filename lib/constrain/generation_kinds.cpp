// The `constrain-validity` and `constrain-jump-forward` kinds (§8.5): what the mask does to the
// documents a decoder writes, their validity with and without it (the noisy emitter) and the
// model calls jump-forward saves; both decode documents of the constraint's language (generate.h).
#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "constrain/constrain_kinds_internal.h"
#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/kind_setup.h"
#include "constrain/token_index.h"
#include "core/registry.h"

namespace ib::constrain {
namespace {

using detail::host;
using detail::kind;
using detail::with;

// ---- constrain-validity ----

class ValidityVariant : public Variant {
 public:
  explicit ValidityVariant(bool constrained) : constrained_(constrained) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
    compiled_ = setup_.compile();
    dist_ = distance_to_accept(*compiled_.dfa);
    epsilon_ = p.number("epsilon");
    retries_ = static_cast<int>(p.integer("retries"));
    documents_ = static_cast<int>(p.integer("documents"));
    seed_ = seed;
    if (constrained_) masker_ = std::make_unique<LazyTokenMasker>(compiled_.dfa, setup_.vocab);
    valid_ = validity_check(compiled_);
  }
  // The harness itself: with no noise every target document is valid; constrained, every
  // output is valid at the configured noise too (the claim the chapter makes).
  Validation validate(BackendRuntime& rt) override {
    std::mt19937_64 rng(seed_ + 17);
    EmitterStats clean = simulate(0.0, rng);
    run(rt);
    const int invalid = (clean.documents - clean.valid) + (constrained_ ? last_.documents - last_.valid : 0);
    return {invalid == 0, "invalid_documents", static_cast<double>(invalid), 0,
            constrained_ ? "noise-free targets and every constrained output, by an independent validator"
                         : "noise-free targets, by an independent validator"};
  }
  void run(BackendRuntime&) override {
    std::mt19937_64 rng(seed_);  // the same documents every run: stable metrics
    last_ = simulate(epsilon_, rng);
  }
  std::vector<Metric> metrics() const override {
    const double docs = std::max(1, last_.documents);
    return {{"valid", 100.0 * last_.valid / docs, "%"},
            {"attempts_per_doc", static_cast<double>(last_.attempts) / docs, ""},
            {"tokens_per_doc", static_cast<double>(last_.tokens) / docs, ""},
            {"wasted_tokens_per_doc", static_cast<double>(last_.wasted_tokens) / docs, ""}};
  }

 private:
  EmitterStats simulate(double eps, std::mt19937_64& rng) {
    if (constrained_)
      return emit_constrained(*compiled_.dfa, dist_, *setup_.vocab, *setup_.trie, *masker_, eps, documents_, rng, valid_);
    return emit_unconstrained(*compiled_.dfa, dist_, *setup_.vocab, *setup_.trie, eps, documents_, retries_, rng, valid_);
  }
  bool constrained_;
  Setup setup_;
  CompiledConstraint compiled_;
  std::vector<int32_t> dist_;
  double epsilon_ = 0;
  int retries_ = 1, documents_ = 1;
  uint64_t seed_ = 0;
  std::unique_ptr<LazyTokenMasker> masker_;
  std::function<bool(const std::string&)> valid_;
  EmitterStats last_;
};

// ---- constrain-jump-forward ----

class JumpVariant : public Variant {
 public:
  explicit JumpVariant(bool jump) : jump_(jump) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
    dfa_ = setup_.compile().dfa;
    forced_ = forced_bytes(*dfa_);
    std::mt19937_64 rng(seed);
    const auto dist = distance_to_accept(*dfa_);
    for (int64_t d = 0; d < p.integer("documents"); ++d) docs_.push_back(random_document(*dfa_, dist, dfa_->start, rng));
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    size_t bad = 0;
    for (size_t d = 0; d < docs_.size(); ++d) bad += outputs_[d] != docs_[d] || !dfa_->matches(outputs_[d]);
    return {bad == 0, "wrong_documents", static_cast<double>(bad), 0, "output bytes equal the target and are accepted"};
  }
  // Decodes every document. Without jump-forward each token (and EOS) is a model call; with it,
  // bytes the DFA forces are emitted as tokens without a call, and a forced end needs no EOS call.
  void run(BackendRuntime&) override {
    calls_ = tokens_ = 0;
    outputs_.assign(docs_.size(), std::string());
    for (size_t d = 0; d < docs_.size(); ++d) {
      const std::string& doc = docs_[d];
      int32_t s = dfa_->start;
      size_t pos = 0;
      while (pos < doc.size()) {
        std::string forced;
        if (jump_)
          for (int32_t f = s; forced_[static_cast<size_t>(f)] >= 0 && forced.size() < 4096;) {
            forced += static_cast<char>(forced_[static_cast<size_t>(f)]);
            f = dfa_->step(f, static_cast<uint8_t>(forced.back()));
          }
        if (!forced.empty()) {
          const auto toks = tokenize_greedy(forced, *dfa_, s, *setup_.trie);
          tokens_ += static_cast<int64_t>(toks.size());
          for (int32_t t : toks) outputs_[d] += setup_.vocab->token_bytes[static_cast<size_t>(t)];
          s = dfa_->walk(s, forced);
          pos += forced.size();
          continue;
        }
        // A model call: the model writes the next token of the document.
        const auto toks = tokenize_greedy(doc.substr(pos, std::min<size_t>(doc.size() - pos, setup_.vocab->max_token_bytes)),
                                          *dfa_, s, *setup_.trie);
        const int32_t t = toks.empty() ? -1 : toks[0];
        if (t < 0) break;
        ++calls_;
        ++tokens_;
        const std::string& b = setup_.vocab->token_bytes[static_cast<size_t>(t)];
        outputs_[d] += b;
        s = dfa_->walk(s, b);
        pos += b.size();
      }
      // EOS: a call unless the document cannot go on (then jump-forward emits it).
      bool can_continue = false;
      for (int b = 0; b < 256 && !can_continue; ++b) can_continue = dfa_->step(s, static_cast<uint8_t>(b)) >= 0;
      ++tokens_;
      if (!jump_ || can_continue) ++calls_;
    }
  }
  std::vector<Metric> metrics() const override {
    const double n = std::max<size_t>(1, docs_.size());
    return {{"model_calls_per_doc", static_cast<double>(calls_) / n, ""},
            {"tokens_per_doc", static_cast<double>(tokens_) / n, ""},
            {"calls_saved", 100.0 * (1.0 - static_cast<double>(calls_) / std::max<int64_t>(1, tokens_)), "%"}};
  }

 private:
  bool jump_;
  Setup setup_;
  std::shared_ptr<const Dfa> dfa_;
  std::vector<int16_t> forced_;
  std::vector<std::string> docs_, outputs_;
  int64_t calls_ = 0, tokens_ = 0;
};

const KindRegistration validity_kind(with_smallest(
    kind("constrain-validity",
         "The documented synthetic noisy emitter: it follows valid target documents and errs with probability epsilon per "
         "token; constrained, errors stay inside the mask; unconstrained, the document is parsed and validated at the end "
         "and retried up to `retries` times. Validity by an independent validator.",
         with(constraint_keys(),
              {key_spec("epsilon", ParamType::Float, "probability that the emitter errs on a token", Value(0.01), 0.0, 1.0),
               key_spec("retries", ParamType::Int, "attempts per document without the mask", Value(int64_t{3}), 1.0),
               key_spec("documents", ParamType::Int, "documents per sample", Value(int64_t{50}), 1.0)})),
    "constraint: person\ndocuments: 2\n"));

const KindRegistration jump_kind(with_smallest(
    kind("constrain-jump-forward",
         "Model calls per document when the bytes the DFA forces are emitted without a call (SGLang's jump-forward).",
         with(constraint_keys(), {key_spec("documents", ParamType::Int, "documents per sample", Value(int64_t{20}), 1.0)})),
    "constraint: person\ndocuments: 2\n"));

const VariantListRegistration validity_variants(
    "constrain-validity",
    {{host("constrained", "the emitter under the token mask"), make_variant<ValidityVariant>(true)},
     {host("unconstrained_retry", "no mask; parse, validate, retry"), make_variant<ValidityVariant>(false)}});
const VariantListRegistration jump_variants("constrain-jump-forward",
                                            {{host("no_jump", "one model call per token"), make_variant<JumpVariant>(false)},
                                             {host("jump_forward", "forced bytes emitted as tokens without a call"),
                                              make_variant<JumpVariant>(true)}});

}  // namespace
}  // namespace ib::constrain
