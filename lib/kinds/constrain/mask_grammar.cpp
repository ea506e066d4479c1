// The grammar path (grammar.h) in `constrain-mask`: variant `grammar`, the masks per rule state and
// per parse position, cold at the start of every sample (as `lazy` is).
#include <chrono>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "constrain/constraint.h"
#include "constrain/grammar_mask.h"
#include "core/memory.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"
#include "kinds/constrain/grammar_documents.h"

namespace ib::constrain {
namespace {

class GrammarMaskStep : public Variant {
 public:
  std::string unsupported(const Point& p) const override { return grammar_path_unsupported(mask_keys().read(p).constraint); }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const MaskKeys k = mask_keys().read(p);
    setup_.load(k.constraint);
    const CompiledConstraint c = setup_.compile(SchemaPath::Grammar);
    grammar_ = c.grammar;
    masker_ = std::make_unique<GrammarTokenMasker>(grammar_, setup_.vocab);
    docs_ = grammar_documents(*grammar_, setup_, k.documents, seed);
    words_ = masker_->words();
    staging_.allocate(words_, "step bitmask");
  }
  // Every token of a document is allowed by its step's mask, and EOS at its end.
  Validation validate(BackendRuntime&) override {
    size_t bad = 0, steps = 0;
    for (const auto& doc : docs_) {
      GrammarStacks at = grammar_start(*grammar_);
      bad += doc.empty();
      for (int32_t tok : doc) {
        bad += !mask_allows(masker_->mask(at), tok);
        at = grammar_advance(*grammar_, *setup_.vocab, at, tok);
        ++steps;
        if (at.empty()) break;
      }
      bad += at.empty() || !mask_allows(masker_->mask(at), setup_.vocab->eos);
    }
    step_us_.clear();
    return {bad == 0, "disallowed_steps", static_cast<double>(bad), 0, fmt::format("{} steps of valid documents", steps)};
  }
  // One step: the position's mask into the staging bitmask, then the parse advanced by the token.
  // Cold every run: the frames' and positions' masks are built again.
  void run(BackendRuntime&) override {
    masker_->clear();
    for (const auto& doc : docs_) {
      GrammarStacks at = grammar_start(*grammar_);
      for (size_t i = 0; i <= doc.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(staging_.data(), masker_->mask(at), words_ * sizeof(uint32_t));
        if (i < doc.size()) at = grammar_advance(*grammar_, *setup_.vocab, at, doc[i]);
        step_us_.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    frames_ = masker_->frames_computed();
  }
  std::vector<Metric> metrics() const override {
    size_t steps = 0;
    for (const auto& d : docs_) steps += d.size() + 1;
    std::vector<Metric> m = mask_step_metrics(step_us_, steps, words_);
    m.push_back({"masks_built", static_cast<double>(frames_), ""});
    return m;
  }

 private:
  ConstraintSetup setup_;
  std::shared_ptr<const Grammar> grammar_;
  std::unique_ptr<GrammarTokenMasker> masker_;
  std::vector<std::vector<int32_t>> docs_;
  size_t words_ = 0, frames_ = 0;
  HostBuffer<uint32_t> staging_;
  std::vector<double> step_us_;
};

const VariantRegistration reg_constrain_mask_grammar(
    "constrain-mask",
    host("grammar", "the grammar path's masks (per rule state and per parse position), cold at the start of every sample",
         mask_reads()),
    make_variant<GrammarMaskStep>());

}  // namespace
}  // namespace ib::constrain
