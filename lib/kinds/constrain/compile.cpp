// The `constrain-compile` kind (§8.5): the cost of building a constraint's token masks, with all
// of them precomputed (outlines) or only the mask classes and each mask on first use (XGrammar);
// the grammar path's variant is grammar.cpp's, the XGrammar / llguidance peers python_peer.cpp's.
#include <chrono>
#include <functional>
#include <memory>

#include "constrain/constraint.h"
#include "constrain/token_index.h"
#include "core/registry.h"
#include "core/stopwatch.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"
#include "numerics/random.h"

namespace ib::constrain {
namespace {

// Masks checked against a brute-force walk of every token on sampled states.
size_t mask_mismatches(const Dfa& dfa, const Vocabulary& v, const std::function<const uint32_t*(int32_t)>& mask, uint64_t seed) {
  size_t bad = 0;
  for (int i = 0; i < 12; ++i) {
    const int32_t s =
        i == 0 ? dfa.start
               : static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(dfa.num_states));
    const uint32_t* m = mask(s);
    for (int32_t t = 0; t < v.size(); ++t) {
      bool want = t == v.eos ? dfa.accepting[static_cast<size_t>(s)] != 0
                             : !v.special[static_cast<size_t>(t)] && dfa.walk(s, v.token_bytes[static_cast<size_t>(t)]) >= 0;
      bad += mask_allows(m, t) != want;
    }
  }
  return bad;
}

class MaskCompile : public Variant {
 public:
  explicit MaskCompile(bool precompute) : precompute_(precompute) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(compile_keys().read(p).constraint);
    seed_ = seed;
  }
  Validation validate(BackendRuntime& rt) override {
    run(rt);
    const size_t bad = precompute_ ? mask_mismatches(
                                         index_->dfa(), *setup_.vocab, [&](int32_t s) { return index_->mask(s); }, seed_)
                                   : mask_mismatches(
                                         lazy_->dfa(), *setup_.vocab, [&](int32_t s) { return lazy_->mask(s); }, seed_);
    runs_ = 0;
    regex_ms_ = dfa_ms_ = index_ms_ = 0;
    return {bad == 0, "mask_mismatches", static_cast<double>(bad), 0, "12 states × every token vs a brute-force walk"};
  }
  void run(BackendRuntime&) override {
    CompiledConstraint c = setup_.compile();
    auto t1 = std::chrono::steady_clock::now();
    if (precompute_)
      index_ = std::make_unique<TokenMaskIndex>(c.dfa, setup_.vocab);
    else
      lazy_ = std::make_unique<LazyTokenMasker>(c.dfa, setup_.vocab);
    index_ms_ += ms_since(t1);
    regex_ms_ += c.regex_seconds * 1e3;
    dfa_ms_ += c.dfa_seconds * 1e3;
    ++runs_;
    states_ = c.dfa->num_states;
    notes_ = describe(c.notes);
    classes_ = precompute_ ? index_->num_classes() : lazy_->num_classes();
    index_mb_ = precompute_ ? static_cast<double>(index_->bytes()) / 1e6 : 0;
  }
  std::vector<Metric> metrics() const override {
    const double n = runs_ > 0 ? static_cast<double>(runs_) : 1;
    std::vector<Metric> m = {{"regex", regex_ms_ / n, "ms"},
                             {"dfa", dfa_ms_ / n, "ms"},
                             {precompute_ ? "masks" : "classes", index_ms_ / n, "ms"},
                             {"dfa_states", static_cast<double>(states_), ""},
                             {"mask_classes", static_cast<double>(classes_), ""}};
    if (precompute_) m.push_back({"index", index_mb_, "MB"});
    return m;
  }
  std::string note() const override { return notes_; }

 private:
  bool precompute_;
  ConstraintSetup setup_;
  std::string notes_;
  uint64_t seed_ = 0;
  std::unique_ptr<TokenMaskIndex> index_;
  std::unique_ptr<LazyTokenMasker> lazy_;
  int64_t runs_ = 0;
  double regex_ms_ = 0, dfa_ms_ = 0, index_ms_ = 0, index_mb_ = 0;
  int32_t states_ = 0;
  size_t classes_ = 0;
};

const KindRegistration compile_kind(constrain_kind(
    "constrain-compile",
    "Compile a constraint: schema -> regex -> minimal DFA -> token masks (precomputed: every mask class; lazy: the "
    "classes only, masks on first use). One sample = one full compile.",
    compile_keys().keys(), "constraint: person\n"));

// Ours read the kind's keys but the python peers'.
const VariantRegistration reg_constrain_compile_precomputed(
    "constrain-compile", host("precomputed", "outlines-style: every mask built ahead of generation", compile_reads()),
    make_variant<MaskCompile>(true));
const VariantRegistration reg_constrain_compile_lazy(
    "constrain-compile",
    host("lazy", "XGrammar-style adaptive: DFA and mask classes now, each mask on first use", compile_reads()),
    make_variant<MaskCompile>(false));

}  // namespace
}  // namespace ib::constrain
