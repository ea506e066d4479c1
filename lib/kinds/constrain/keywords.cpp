// The `constrain-keywords` kind (§8.5): the compiler's completeness table, one row per JSON Schema
// keyword case of constrain/keyword_cases.h (supported: checked against the validator; refused: the error).
#include <memory>
#include <stdexcept>
#include <string>

#include "constrain/constraint.h"
#include "constrain/keyword_cases.h"
#include "core/registry.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"

namespace ib::constrain {
namespace {

// One row per keyword of keyword_cases.h. A supported keyword: validate() checks its case (the
// DFA accepts exactly the valid documents, rejects the by-design ones, random walks satisfy the
// independent oracle); run() is one compile of its schema. A refused keyword: the row is
// `unsupported` with the compiler's error as its note, provided the error names the keyword and
// the pointer; otherwise (or when it compiles) the row FAILS with what went wrong.
class KeywordCheck : public Variant {
 public:
  std::string unsupported(const Point& p) const override {
    const RefusalCase* refusal = find_refusal_case(keyword_keys().read(p).keyword);
    if (!refusal) return {};
    const RefusalOutcome o = check_refusal(*refusal);
    return o.ok ? "error: " + o.message : std::string();  // not as expected: validate() fails the row
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const KeywordKeys k = keyword_keys().read(p);
    case_ = find_keyword_case(k.keyword);
    refusal_ = find_refusal_case(k.keyword);
    if (!case_ && !refusal_) throw std::runtime_error("no keyword case '" + k.keyword + "'");
    walks_ = static_cast<int>(k.walks);
    seed_ = seed;
  }
  Validation validate(BackendRuntime&) override {
    if (refusal_) {
      const RefusalOutcome o = check_refusal(*refusal_);
      return {o.ok, "refusal", o.ok ? 0.0 : 1.0, 0, o.message};
    }
    report_ = check_keyword_case(*case_, walks_, seed_);
    return {report_.ok(), "disagreements", static_cast<double>(report_.disagreements()), 0, report_.summary()};
  }
  void run(BackendRuntime&) override {
    if (!case_) return;
    const bool schema = case_->constraint.rfind("regex:", 0) != 0 && case_->constraint.rfind("choice:", 0) != 0;
    CompiledConstraint c = compile_constraint(schema ? case_->name : case_->constraint, case_->constraint, case_->options);
    dfa_ = c.dfa;
    note_ = describe(c.notes);
  }
  std::string note() const override { return note_; }
  std::vector<Metric> metrics() const override {
    const KeywordReport& r = report_;
    return {{"dfa_states", static_cast<double>(r.dfa_states), ""},
            {"valid_docs", static_cast<double>(r.valid_docs), ""},
            {"valid_accepted", static_cast<double>(r.valid_accepted), ""},
            {"invalid_docs", static_cast<double>(r.invalid_docs), ""},
            {"invalid_rejected", static_cast<double>(r.invalid_rejected), ""},
            {"by_design_rejected", static_cast<double>(r.by_design_rejected), ""},
            {"walks_valid", static_cast<double>(r.walks_valid), ""}};
  }

 private:
  const KeywordCase* case_ = nullptr;
  const RefusalCase* refusal_ = nullptr;
  int walks_ = 0;
  uint64_t seed_ = 0;
  KeywordReport report_;
  std::shared_ptr<const Dfa> dfa_;
  std::string note_;
};

const KindRegistration keywords_kind(constrain_kind(
    "constrain-keywords",
    "The compiler's completeness table, one row per JSON Schema keyword (and regex: / choice:): a bundled case "
    "(lib/constrain/keyword_cases.h) with hand-written valid, invalid and by-design documents (valid by the schema, "
    "outside the language by design: key order, compact layout, ...). The row passes when the DFA accepts every valid "
    "document and rejects the others, and `walks` random walks through the DFA parse and satisfy an independent "
    "validator. Refused keywords are `unsupported` rows whose note is the compiler's error, which must name the "
    "keyword and the JSON pointer. One sample = one compile of the case.",
    keyword_keys().keys(), "walks: 5\n"));

const VariantRegistration reg_constrain_keywords_dfa("constrain-keywords",
                                                     host("dfa",
                                                          "the schema compiled to a minimal DFA, checked against the validator"),
                                                     make_variant<KeywordCheck>());

}  // namespace
}  // namespace ib::constrain
