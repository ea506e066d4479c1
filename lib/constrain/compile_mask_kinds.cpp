// The `constrain-compile` and `constrain-mask` kinds (§8.5): the cost of building token masks for a
// constraint (precomputed or lazy, and the XGrammar / llguidance peers) and of using them at each
// decode step; together as they share the variants' pairing and their peers.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "constrain/constrain_kinds_internal.h"
#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/kind_setup.h"
#include "constrain/python_peer.h"
#include "constrain/token_index.h"
#include "core/memory.h"
#include "numerics/random.h"
#include "core/registry.h"
#include "core/stats.h"

namespace ib::constrain {
namespace {

using detail::host;
using detail::key_names;
using detail::kind;
using detail::mask_kind_keys;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

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

// ---- constrain-compile ----

class CompileVariant : public Variant {
 public:
  explicit CompileVariant(bool precompute) : precompute_(precompute) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
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
  Setup setup_;
  std::string notes_;
  uint64_t seed_ = 0;
  std::unique_ptr<TokenMaskIndex> index_;
  std::unique_ptr<LazyTokenMasker> lazy_;
  int64_t runs_ = 0;
  double regex_ms_ = 0, dfa_ms_ = 0, index_ms_ = 0, index_mb_ = 0;
  int32_t states_ = 0;
  size_t classes_ = 0;
};

// ---- constrain-mask ----

class MaskVariant : public Variant {
 public:
  explicit MaskVariant(bool precompute) : precompute_(precompute) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
    CompiledConstraint c = setup_.compile();
    dfa_ = c.dfa;
    if (precompute_)
      index_ = std::make_unique<TokenMaskIndex>(dfa_, setup_.vocab);
    else
      lazy_ = std::make_unique<LazyTokenMasker>(dfa_, setup_.vocab);
    // The documents every run decodes: random valid documents, tokenised greedily.
    std::mt19937_64 rng(seed);
    const auto dist = distance_to_accept(*dfa_);
    for (int64_t d = 0; d < p.integer("documents"); ++d)
      docs_.push_back(tokenize_greedy(random_document(*dfa_, dist, dfa_->start, rng), *dfa_, dfa_->start, *setup_.trie));
    words_ = (static_cast<size_t>(setup_.vocab->size()) + 31) / 32;
    staging_.allocate(words_, "step bitmask");
  }
  // Every target token is allowed by its step's mask, and EOS at each document's end.
  Validation validate(BackendRuntime&) override {
    size_t bad = 0, steps = 0;
    for (const auto& doc : docs_) {
      int32_t s = dfa_->start;
      for (int32_t tok : doc) {
        bad += !mask_allows(mask(s), tok);
        s = advance(*dfa_, *setup_.vocab, s, tok);
        ++steps;
        if (s < 0) break;
      }
      bad += s < 0 || !mask_allows(mask(s), setup_.vocab->eos);
    }
    step_us_.clear();
    return {bad == 0, "disallowed_steps", static_cast<double>(bad), 0, fmt::format("{} steps of valid documents", steps)};
  }
  // One step: the state's mask into the staging bitmask (what goes to the GPU), then the DFA
  // advances by the chosen token. The lazy variant starts cold every run.
  void run(BackendRuntime&) override {
    if (lazy_) lazy_->clear();
    for (const auto& doc : docs_) {
      int32_t s = dfa_->start;
      for (size_t i = 0; i <= doc.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(staging_.data(), mask(s), words_ * sizeof(uint32_t));
        if (i < doc.size()) s = advance(*dfa_, *setup_.vocab, s, doc[i]);
        step_us_.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  std::vector<Metric> metrics() const override {
    size_t steps = 0;
    for (const auto& d : docs_) steps += d.size() + 1;
    std::vector<Metric> m = detail::mask_step_metrics(step_us_, steps, words_);
    if (lazy_) m.push_back({"masks_built", static_cast<double>(lazy_->cached()), ""});
    return m;
  }

 private:
  const uint32_t* mask(int32_t s) { return index_ ? index_->mask(s) : lazy_->mask(s); }
  bool precompute_;
  Setup setup_;
  std::shared_ptr<const Dfa> dfa_;
  std::unique_ptr<TokenMaskIndex> index_;
  std::unique_ptr<LazyTokenMasker> lazy_;
  std::vector<std::vector<int32_t>> docs_;
  size_t words_ = 0;
  HostBuffer<uint32_t> staging_;
  std::vector<double> step_us_;
};

const KindRegistration compile_kind(with_smallest(
    with_python_peers(
        kind("constrain-compile",
             "Compile a constraint: schema -> regex -> minimal DFA -> token masks (precomputed: every mask class; lazy: the "
             "classes only, masks on first use). One sample = one full compile.",
             constraint_keys())),
    "constraint: person\n"));

const KindRegistration mask_kind(with_smallest(
    with_python_peers(
        kind("constrain-mask",
             "Per-step mask cost while decoding `documents` random valid documents: the state's mask copied into the step's "
             "bitmask, then the DFA advanced by the token. One sample = all documents; per-step p50/p99 as metrics.",
             mask_kind_keys())),
    "constraint: person\ndocuments: 1\n"));

// Ours read the kind's keys but the python peers' (python_peer.cpp declares the peers).
const VariantRegistration reg_constrain_compile_precomputed("constrain-compile",
                                                            host("precomputed",
                                                                 "outlines-style: every mask built ahead of generation",
                                                                 key_names(constraint_keys())),
                                                            make_variant<CompileVariant>(true));
const VariantRegistration reg_constrain_compile_lazy(
    "constrain-compile",
    host("lazy", "XGrammar-style adaptive: DFA and mask classes now, each mask on first use", key_names(constraint_keys())),
    make_variant<CompileVariant>(false));
const VariantRegistration reg_constrain_mask_precomputed("constrain-mask",
                                                         host("precomputed", "mask lookup in the precomputed index",
                                                              key_names(mask_kind_keys())),
                                                         make_variant<MaskVariant>(true));
const VariantRegistration reg_constrain_mask_lazy(
    "constrain-mask",
    host("lazy", "lazy masks, cold at the start of every sample (the vocabulary's string-content pieces are kept, like its trie)",
         key_names(mask_kind_keys())),
    make_variant<MaskVariant>(false));

}  // namespace
}  // namespace ib::constrain
