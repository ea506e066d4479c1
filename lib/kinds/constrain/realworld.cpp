// The `constrain-realworld` kind: the JSON Schema compiler on the real-world corpus
// (schema_corpus.h), one row per source: how many schemas compile, compile-time percentiles,
// valid instances refused and invalid ones accepted (a row with one is a FAILED row: the mask
// would be unsound), and the per-step mask time of the precomputed index on a seeded sample of
// the compiled schemas, walking their valid instances. The whole pass is one sample (measure_self:
// compiling a few hundred schemas is the measurement, not something to repeat ten times).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>

#include <fmt/format.h>

#include "constrain/automaton.h"
#include "constrain/generate.h"
#include "constrain/grammar_generate.h"
#include "constrain/grammar_mask.h"
#include "constrain/schema_corpus.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"
#include "core/registry.h"
#include "core/stats.h"
#include "core/stopwatch.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"

namespace ib::constrain {
namespace {

class Realworld : public Variant {
 public:
  explicit Realworld(SchemaPath path) : path_(path) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const RealworldKeys k = realworld_keys().read(p);
    source_ = k.source;
    options_.strict_properties = k.strict_properties;
    options_.validator_fallback = k.fallback == "validator";
    options_.unique_items_by_validator = k.unique_items == "validator";
    options_.max_compile_seconds = k.max_compile_seconds;
    mask_schemas_ = static_cast<size_t>(k.mask_schemas);
    vocab_name_ = k.vocab;
    seed_ = seed;
    for (auto& e : load_corpus(corpus_path()))
      if (source_ == "all" || e.source == source_) entries_.push_back(std::move(e));
    if (entries_.empty()) throw std::runtime_error("the corpus has no schema of source '" + source_ + "'");
  }
  Validation validate(BackendRuntime&) override { return {}; }  // measure_self gates its own pass
  void run(BackendRuntime&) override {}

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl&) override {
    SelfMeasurement m;
    std::vector<size_t> compiled;
    std::map<std::string, int> refusals, ignored, cut_off;
    std::vector<std::string> unsound;
    double total_ms = 0;
    for (size_t i = 0; i < entries_.size(); ++i) {
      CorpusResult r = evaluate_corpus_entry(entries_[i], options_, path_);
      rules_ += r.rules;
      inlined_rules_ += r.inlined_rules;
      if (r.grammar) grammars_[i] = r.grammar;
      for (const auto& [what, n] : r.notes.cut_off) cut_off[what] += n > 0;
      total_ms += r.compile_ms;
      valid_ += r.compiled ? r.valid : 0;
      valid_refused_ += r.valid_refused;
      invalid_ += r.compiled ? r.invalid : 0;
      invalid_accepted_ += r.invalid_accepted;
      by_validator_ += r.validator_decides;
      for (const auto& d : r.accepted_invalid) unsound.push_back(entries_[i].id + ": " + d.substr(0, 120));
      for (const auto& [k, n] : r.notes.ignored) ++ignored[k];
      if (r.compiled) {
        compiled.push_back(i);
        compile_ms_.push_back(r.compile_ms);
        all_rules_ms_.push_back(r.compile_ms + r.rules_ms);
      } else {
        ++refusals[r.keyword.empty() ? "automaton limits" : r.keyword];
      }
    }
    std::sort(compile_ms_.begin(), compile_ms_.end());
    std::sort(all_rules_ms_.begin(), all_rules_ms_.end());
    compiled_ = compiled.size();
    measure_masks(compiled);
    m.validation = {
        invalid_accepted_ == 0, "invalid_accepted", static_cast<double>(invalid_accepted_), 0,
        invalid_accepted_ == 0
            ? fmt::format("{} invalid instances of the compiled schemas, each as written and in schema order", invalid_)
            : fmt::format("accepted: {}", unsound.front())};
    m.samples = {total_ms / 1e3};
    m.stop_reason = "one pass over the corpus";
    // The note: why schemas were refused (first error's keyword) and the keys most often ignored.
    auto top = [](const std::map<std::string, int>& counts, size_t n) {
      std::vector<std::pair<int, std::string>> v;
      for (const auto& [k, c] : counts) v.emplace_back(-c, k);
      std::sort(v.begin(), v.end());
      std::string out;
      for (size_t i = 0; i < std::min(n, v.size()); ++i) out += fmt::format("{}{} {}", i ? ", " : "", v[i].second, -v[i].first);
      return out;
    };
    note_ = fmt::format("refused by keyword: {}; keys ignored (schemas): {}", refusals.empty() ? "none" : top(refusals, 6),
                        ignored.empty() ? "none" : top(ignored, 5));
    if (!cut_off.empty()) note_ += "; valid documents cut off (schemas): " + top(cut_off, 3);
    if (path_ != SchemaPath::Dfa)
      note_ += fmt::format(
          "; {} schemas on the grammar path: {} rules, {} compiled inline (a product in them); their masks: "
          "the first pass over a schema's instances builds what it meets, the second is timed",
          grammars_.size(), rules_, inlined_rules_);
    m.note = note_;
    return m;
  }

  std::vector<Metric> metrics() const override {
    const double n = static_cast<double>(entries_.size());
    auto pct = [&](double q) { return compile_ms_.empty() ? 0.0 : percentile_sorted(compile_ms_, q); };
    std::vector<double> steps = step_us_;
    std::sort(steps.begin(), steps.end());
    return {{"schemas", n, ""},
            {"compiled", 100.0 * static_cast<double>(compiled_) / n, "%"},
            {"compile_p50", pct(0.5), "ms"},
            {"compile_p90", pct(0.9), "ms"},
            {"all_rules_p50", all_rules_ms_.empty() ? 0.0 : percentile_sorted(all_rules_ms_, 0.5), "ms"},
            {"all_rules_p90", all_rules_ms_.empty() ? 0.0 : percentile_sorted(all_rules_ms_, 0.9), "ms"},
            {"valid", static_cast<double>(valid_), ""},
            {"valid_refused", static_cast<double>(valid_refused_), ""},
            {"invalid", static_cast<double>(invalid_), ""},
            {"invalid_accepted", static_cast<double>(invalid_accepted_), ""},
            {"validator_decides", static_cast<double>(by_validator_), ""},
            {"mask_schemas", static_cast<double>(masked_schemas_), ""},
            {"mask_mean", steps.empty() ? 0.0 : summarize(steps).mean, "us"},
            {"mask_p99", steps.empty() ? 0.0 : percentile_sorted(steps, 0.99), "us"},
            {"mask_worst_mean", worst_schema_mean_us_, "us"},
            {"mask_build_ms", masked_schemas_ ? build_ms_ / static_cast<double>(masked_schemas_) : 0.0, "ms"},
            {"grammar_schemas", static_cast<double>(grammars_.size()), ""}};
  }

 private:
  // The masks of a seeded sample of the compiled schemas, each on the path it compiled on.
  void measure_masks(const std::vector<size_t>& compiled) {
    if (mask_schemas_ == 0 || compiled.empty()) return;
    auto vocab = load_vocabulary(vocab_name_);
    auto trie = vocab_trie(vocab);
    std::vector<size_t> pick = compiled;
    std::mt19937_64 rng(seed_);
    std::shuffle(pick.begin(), pick.end(), rng);
    for (size_t i : pick) {
      if (masked_schemas_ >= mask_schemas_) break;
      if (grammars_.count(i))
        measure_grammar_masks(i, vocab, *trie, rng);
      else
        measure_dfa_masks(i, vocab, *trie, rng);
    }
  }

  // The precomputed index (its build is mask_build_ms); each step copies the state's mask into the
  // bitmask and advances by the token, walking the canonical spelling of each valid instance the
  // DFA accepts, tokenised greedily (as constrain-mask does with random documents).
  void measure_dfa_masks(size_t i, const std::shared_ptr<const Vocabulary>& vocab, const VocabTrie& trie, std::mt19937_64& rng) {
    std::vector<uint32_t> bitmask((static_cast<size_t>(vocab->size()) + 31) / 32);
    const CorpusEntry& e = entries_[i];
    auto dfa = std::make_shared<const Dfa>(compile_dfa(schema_to_regex(e.schema, options_)));
    const auto b0 = std::chrono::steady_clock::now();
    const TokenMaskIndex index(dfa, vocab);
    build_ms_ += ms_since(b0);
    std::vector<std::string> docs;
    for (const auto& x : e.valid) {
      std::string d = canonical_spelling(x, e.schema);
      if (dfa->matches(d)) docs.push_back(std::move(d));
    }
    if (docs.empty()) {  // no instance to walk: random documents of the language
      const auto dist = distance_to_accept(*dfa);
      for (int k = 0; k < 4; ++k) docs.push_back(random_document(*dfa, dist, dfa->start, rng));
    }
    double sum = 0;
    size_t n = 0;
    for (const auto& d : docs) {
      int32_t s = dfa->start;
      const auto tokens = tokenize_greedy(d, *dfa, s, trie);
      for (size_t t = 0; t <= tokens.size() && s >= 0; ++t) {
        const auto t0 = std::chrono::steady_clock::now();
        std::memcpy(bitmask.data(), index.mask(s), bitmask.size() * sizeof(uint32_t));
        if (t < tokens.size()) s = advance(*dfa, *vocab, s, tokens[t]);
        const double us = ms_since(t0) * 1e3;
        step_us_.push_back(us);
        sum += us;
        ++n;
      }
    }
    if (n) worst_schema_mean_us_ = std::max(worst_schema_mean_us_, sum / static_cast<double>(n));
    ++masked_schemas_;
  }

  // The grammar path's masks (GrammarTokenMasker, built lazily): the schema's valid instances the
  // grammar accepts, tokenised greedily, walked twice; the first pass builds the frames and
  // positions it meets (its extra time over the second is mask_build_ms), the second is timed as
  // the steps (what a server meets once the schema's usual positions are cached).
  void measure_grammar_masks(size_t i, const std::shared_ptr<const Vocabulary>& vocab, const VocabTrie& trie,
                             std::mt19937_64& rng) {
    std::vector<uint32_t> bitmask((static_cast<size_t>(vocab->size()) + 31) / 32);
    const CorpusEntry& e = entries_[i];
    const auto g = grammars_.at(i);
    std::vector<std::vector<int32_t>> docs;
    for (const auto& x : e.valid) {
      const std::string d = canonical_spelling(x, e.schema);
      if (grammar_matches(*g, d)) docs.push_back(grammar_tokenize_greedy(*g, *vocab, trie, d));
    }
    if (docs.empty()) {  // no instance to walk: random documents of the language, as the DFA path
      const GrammarDistances dist = grammar_distances(*g);
      for (int k = 0; k < 4; ++k) {
        const std::string d = random_grammar_document(*g, dist, rng);
        if (!d.empty()) docs.push_back(grammar_tokenize_greedy(*g, *vocab, trie, d));
      }
      if (docs.empty()) return;
    }
    GrammarTokenMasker masker(g, vocab);
    double pass_ms[2] = {0, 0}, sum = 0;
    size_t n = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& tokens : docs) {
        GrammarStacks at = grammar_start(*g);
        for (size_t t = 0; t <= tokens.size() && !at.empty(); ++t) {
          const auto t0 = std::chrono::steady_clock::now();
          std::memcpy(bitmask.data(), masker.mask(at), bitmask.size() * sizeof(uint32_t));
          if (t < tokens.size()) at = grammar_advance(*g, *vocab, at, tokens[t]);
          const double us = ms_since(t0) * 1e3;
          pass_ms[pass] += us / 1e3;
          if (pass == 1) {
            step_us_.push_back(us);
            sum += us;
            ++n;
          }
        }
      }
    build_ms_ += std::max(0.0, pass_ms[0] - pass_ms[1]);
    if (n) worst_schema_mean_us_ = std::max(worst_schema_mean_us_, sum / static_cast<double>(n));
    ++masked_schemas_;
  }

  SchemaPath path_;
  std::map<size_t, std::shared_ptr<const Grammar>> grammars_;
  int rules_ = 0, inlined_rules_ = 0;
  double build_ms_ = 0;
  std::string source_, vocab_name_, note_;
  SchemaOptions options_;
  size_t mask_schemas_ = 0, compiled_ = 0, masked_schemas_ = 0;
  uint64_t seed_ = 0;
  std::vector<CorpusEntry> entries_;
  std::vector<double> compile_ms_, step_us_;
  std::vector<double> all_rules_ms_;  // the compile, then every rule the grammar's start reaches (as an eager compile)
  double worst_schema_mean_us_ = 0;
  int valid_ = 0, valid_refused_ = 0, invalid_ = 0, invalid_accepted_ = 0, by_validator_ = 0;
};

const KindRegistration realworld_kind(constrain_kind(
    "constrain-realworld",
    "The JSON Schema compiler on the real-world corpus (data/schema-corpus: SchemaStore, Kubernetes, BFCL tool "
    "schemas; instances labelled by the jsonschema package): schemas compiled, compile p50/p90, valid instances "
    "refused (spelt compactly in schema key order) and invalid ones accepted (as written or in schema order; any is a "
    "FAILED row), and the precomputed mask's per-step time on a sample. The note lists why schemas were refused. One "
    "sample = one pass over the source's schemas.",
    realworld_keys().keys(), "source: bfcl\nmask_schemas: 1\nmax_compile_seconds: 1\n"));

const VariantRegistration reg_constrain_realworld_dfa(
    "constrain-realworld",
    {"dfa", Backend::Cpu, "our compiler: schema -> regex -> minimal DFA (precomputed masks for the timing)", {}, true},
    make_variant<Realworld>(SchemaPath::Dfa));
const VariantRegistration reg_constrain_realworld_grammar(
    "constrain-realworld",
    {"grammar",
     Backend::Cpu,
     "our compiler's grammar path: subschemas that nest and free values as rules of minimal DFAs, run as a pushdown "
     "automaton (lazily cached masks per top frame and position)",
     {},
     true},
    make_variant<Realworld>(SchemaPath::Grammar));
const VariantRegistration reg_constrain_realworld_auto(
    "constrain-realworld",
    {"auto",
     Backend::Cpu,
     "the whole-schema DFA where it compiles and cuts no valid document off (free values past any_depth, recursion past "
     "max_recursion), else the grammar path; the note counts the schemas on each",
     {},
     true},
    make_variant<Realworld>(SchemaPath::Auto));

}  // namespace
}  // namespace ib::constrain
