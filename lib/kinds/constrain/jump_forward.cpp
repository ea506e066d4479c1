// The `constrain-jump-forward` kind (§8.5): the model calls SGLang's jump-forward saves, decoding
// documents of the constraint's language with and without emitting the bytes the DFA forces.
#include <algorithm>
#include <functional>
#include <memory>
#include <random>

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/token_index.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"

namespace ib::constrain {
namespace {

class JumpVariant : public Variant {
 public:
  explicit JumpVariant(bool jump) : jump_(jump) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const JumpForwardKeys k = jump_forward_keys().read(p);
    setup_.load(k.constraint);
    dfa_ = setup_.compile().dfa;
    forced_ = forced_bytes(*dfa_);
    std::mt19937_64 rng(seed);
    const auto dist = distance_to_accept(*dfa_);
    for (int64_t d = 0; d < k.documents; ++d) docs_.push_back(random_document(*dfa_, dist, dfa_->start, rng));
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
  ConstraintSetup setup_;
  std::shared_ptr<const Dfa> dfa_;
  std::vector<int16_t> forced_;
  std::vector<std::string> docs_, outputs_;
  int64_t calls_ = 0, tokens_ = 0;
};

const KindRegistration jump_kind(
    constrain_kind("constrain-jump-forward",
                   "Model calls per document when the bytes the DFA forces are emitted without a call (SGLang's jump-forward).",
                   jump_forward_keys().keys(), "constraint: person\ndocuments: 2\n"));

const VariantListRegistration jump_variants("constrain-jump-forward",
                                            {{host("no_jump", "one model call per token"), make_variant<JumpVariant>(false)},
                                             {host("jump_forward", "forced bytes emitted as tokens without a call"),
                                              make_variant<JumpVariant>(true)}});

}  // namespace
}  // namespace ib::constrain
