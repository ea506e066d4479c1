// The `constrain` experiment kinds (§8.5): compile time, per-step mask time, output validity
// with and without the mask, jump-forward, the cost of applying a mask at a decode step, and
// the compiler's per-keyword completeness table.
// The mask work is host work: these variants run on the CPU whichever backend is selected.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "constrain/constraint.h"
#include "constrain/generate.h"
#include "constrain/kind_setup.h"
#include "constrain/keyword_cases.h"
#include "constrain/masked_argmax.h"
#include "constrain/python_peer.h"
#include "constrain/token_index.h"
#include "constrain/validator.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "core/memory.h"
#include "numerics/parallel.h"
#include "numerics/random.h"
#include "core/registry.h"
#include "core/stats.h"

namespace ib::constrain {

std::vector<KeySpec> constraint_keys(const std::string& default_vocab) {
  return {
      key_spec("constraint", ParamType::String,
               "a bundled schema (experiments/schemas/<name>.json), a schema file, regex:PATTERN or choice:a|b|c",
               Value(std::string("tool_call"))),
      key_spec("vocab", ParamType::String, "gpt2 (50,257, built in), llama2 (32,000), deepseek-llm (102,400) or a tokenizer.json path",
               Value(default_vocab)),
      enum_key("whitespace", "JSON layout the generator may use: compact, or flexible (up to 2 of space/newline/tab between tokens)",
               "compact", {"compact", "flexible"}),
      key_spec("max_recursion", ParamType::Int, "levels a recursive $ref is expanded to", Value(int64_t{3}), 0.0, 10.0),
      key_spec("strict_properties", ParamType::Bool,
               "without additionalProperties, no keys but the declared ones (true: what a model should write) or any other "
               "keys (false: the JSON Schema meaning)",
               Value(true)),
      enum_key("unique_items",
               "uniqueItems over items that are no finite enumeration: refuse, or validator (compiled without it; the "
               "finished document is checked, the row says so)",
               "refuse", {"refuse", "validator"}),
      enum_key("schema_draft", "the draft of a schema whose $schema names none (auto: 2020-12, as the specification says)", "auto",
               {"auto", "4", "6", "7", "2019-09", "2020-12"}),
  };
}

namespace {
// The schema options a point asks for (whitespace, recursion, properties, draft).
SchemaOptions schema_options(const std::string& whitespace, int64_t recursion, bool strict, const std::string& draft,
                             const std::string& unique = "refuse") {
  SchemaOptions o;
  o.unique_items_by_validator = unique == "validator";
  o.whitespace = whitespace == "flexible" ? SchemaOptions::Whitespace::Flexible : SchemaOptions::Whitespace::Compact;
  o.max_recursion = static_cast<int>(recursion);
  o.strict_properties = strict;
  o.default_draft = draft == "auto" ? "" : draft;
  return o;
}
}  // namespace

std::optional<KeyProblem> check_constraint_keys(const std::map<std::string, std::vector<Value>>& values) {
  auto all = [&](const char* key) {
    auto it = values.find(key);
    return it == values.end() ? std::vector<Value>{} : it->second;
  };
  for (const Value& cv : all("constraint")) {
    const std::string& c = std::get<std::string>(cv);
    std::string source;
    try {
      source = constraint_source(c);
    } catch (const InputError& e) {  // the file is there but cannot be read: a FIFO, too large
      return KeyProblem{{"constraint"}, e.what()};
    } catch (const std::exception&) {
      std::vector<std::string> bundled;
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(schema_directory(), ec))
        if (entry.path().extension() == ".json") bundled.push_back(entry.path().stem().string());
      std::sort(bundled.begin(), bundled.end());
      return KeyProblem{{"constraint"}, fmt::format("'{}' is no schema file, nor a bundled schema ({}), nor regex:PATTERN or choice:a|b|c", c,
                                                    fmt::join(bundled, ", "))};
    }
    if (c.rfind("choice:", 0) == 0) continue;
    std::vector<Value> stricts = all("strict_properties"), drafts = all("schema_draft"), uniques = all("unique_items");
    if (uniques.empty()) uniques.push_back(Value(std::string("refuse")));
    if (stricts.empty()) stricts.push_back(Value(true));
    if (drafts.empty()) drafts.push_back(Value(std::string("auto")));
    for (const Value& wv : all("whitespace"))
      for (const Value& rv : all("max_recursion"))
      for (const Value& sv : stricts)
      for (const Value& dv : drafts)
      for (const Value& uv : uniques) {
        const SchemaOptions options = schema_options(std::get<std::string>(wv), std::get<int64_t>(rv), std::get<bool>(sv),
                                                     std::get<std::string>(dv), std::get<std::string>(uv));
        try {
          if (c.rfind("regex:", 0) == 0) {
            parse_regex(c.substr(6));
          } else {
            nlohmann::ordered_json schema;
            try {
              schema = parse_json_bounded<nlohmann::ordered_json>(source, c);
            } catch (const nlohmann::json::exception& e) {
              return KeyProblem{{"constraint"}, fmt::format("'{}': the schema is not JSON: {}", c, e.what())};
            }
            schema_to_regex(schema, options);
          }
        } catch (const std::exception& e) {
          return KeyProblem{{"constraint"}, fmt::format("'{}': {}", c, e.what())};
        }
      }
  }
  for (const Value& vv : all("vocab")) {
    const std::string& v = std::get<std::string>(vv);
    try {
      load_vocabulary(v);
    } catch (const std::exception& e) {
      return KeyProblem{{"vocab"}, fmt::format("'{}' is not gpt2, llama2, deepseek-llm nor a readable tokenizer.json ({})", v, e.what())};
    }
  }
  return std::nullopt;
}

void Setup::load(const Point& p, bool with_trie) {
  constraint = p.text("constraint");
  source = constraint_source(constraint);
  options = schema_options(p.text("whitespace"), p.integer("max_recursion"), p.find("strict_properties") ? p.flag("strict_properties") : true,
                           p.find("schema_draft") ? p.text("schema_draft") : "auto",
                           p.find("unique_items") ? p.text("unique_items") : "refuse");
  vocab = load_vocabulary(p.text("vocab"));
  if (with_trie) trie = vocab_trie(vocab);
}

std::function<bool(const std::string&)> validity_check(const CompiledConstraint& c) {
  if (!c.schema) {
    auto dfa = c.dfa;
    return [dfa](const std::string& text) { return dfa->matches(text); };
  }
  auto schema = c.schema;
  Draft draft = Draft::Draft2020_12;
  parse_draft(c.notes.draft, &draft);  // the draft the compiler read it as
  return [schema, draft](const std::string& text) {
    nlohmann::ordered_json doc;
    try {
      doc = parse_json_bounded<nlohmann::ordered_json>(text, "a generated document");
    } catch (const std::exception&) {  // not JSON, or nested past any schema's reach: invalid
      return false;
    }
    return SchemaValidator(*schema, draft).valid(doc);
  };
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Masks checked against a brute-force walk of every token on sampled states.
size_t mask_mismatches(const Dfa& dfa, const Vocabulary& v, const std::function<const uint32_t*(int32_t)>& mask, uint64_t seed) {
  size_t bad = 0;
  for (int i = 0; i < 12; ++i) {
    const int32_t s = i == 0 ? dfa.start : static_cast<int32_t>(random_bits(seed, static_cast<uint64_t>(i)) % static_cast<uint64_t>(dfa.num_states));
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
    const size_t bad = precompute_
                           ? mask_mismatches(index_->dfa(), *setup_.vocab, [&](int32_t s) { return index_->mask(s); }, seed_)
                           : mask_mismatches(lazy_->dfa(), *setup_.vocab, [&](int32_t s) { return lazy_->mask(s); }, seed_);
    runs_ = 0;
    regex_ms_ = dfa_ms_ = index_ms_ = 0;
    return {bad == 0, "mask_mismatches", static_cast<double>(bad), 0, "12 states × every token vs a brute-force walk"};
  }
  void run(BackendRuntime&) override {
    CompiledConstraint c = setup_.compile();
    auto t1 = std::chrono::steady_clock::now();
    if (precompute_) index_ = std::make_unique<TokenMaskIndex>(c.dfa, setup_.vocab);
    else lazy_ = std::make_unique<LazyTokenMasker>(c.dfa, setup_.vocab);
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
    std::vector<Metric> m = {{"regex", regex_ms_ / n, "ms"}, {"dfa", dfa_ms_ / n, "ms"},
                             {precompute_ ? "masks" : "classes", index_ms_ / n, "ms"},
                             {"dfa_states", static_cast<double>(states_), ""}, {"mask_classes", static_cast<double>(classes_), ""}};
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

struct Precomputed : CompileVariant {
  Precomputed() : CompileVariant(true) {}
};
struct Lazy : CompileVariant {
  Lazy() : CompileVariant(false) {}
};

// ---- constrain-mask ----

class MaskVariant : public Variant {
 public:
  explicit MaskVariant(bool precompute) : precompute_(precompute) {}
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    setup_.load(p);
    CompiledConstraint c = setup_.compile();
    dfa_ = c.dfa;
    if (precompute_) index_ = std::make_unique<TokenMaskIndex>(dfa_, setup_.vocab);
    else lazy_ = std::make_unique<LazyTokenMasker>(dfa_, setup_.vocab);
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
    Stats st = summarize(step_us_);
    std::vector<double> sorted = step_us_;
    std::sort(sorted.begin(), sorted.end());
    size_t steps = 0;
    for (const auto& d : docs_) steps += d.size() + 1;
    std::vector<Metric> m = {{"steps_per_run", static_cast<double>(steps), ""},
                             {"step_p50", st.median, "us"},
                             {"step_p99", percentile_sorted(sorted, 0.99), "us"},
                             {"step_mean", st.mean, "us"},
                             {"bitmask", static_cast<double>(words_ * sizeof(uint32_t)), "B"}};
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

struct MaskPrecomputed : MaskVariant {
  MaskPrecomputed() : MaskVariant(true) {}
};
struct MaskLazy : MaskVariant {
  MaskLazy() : MaskVariant(false) {}
};

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

struct Constrained : ValidityVariant {
  Constrained() : ValidityVariant(true) {}
};
struct UnconstrainedRetry : ValidityVariant {
  UnconstrainedRetry() : ValidityVariant(false) {}
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

struct NoJump : JumpVariant {
  NoJump() : JumpVariant(false) {}
};
struct JumpForward : JumpVariant {
  JumpForward() : JumpVariant(true) {}
};

// ---- constrain-overhead (CPU analog) ----

class CpuLmHead : public Variant {
 public:
  explicit CpuLmHead(bool masked) : masked_(masked) {}
  std::string unsupported(const Point& p) const override {
    LmHeadShape sh;
    if (!lm_head_shape(p.text("model"), &sh)) return "unknown model";
    return {};
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    lm_head_shape(p.text("model"), &shape_);
    const size_t h = static_cast<size_t>(shape_.hidden), v = static_cast<size_t>(shape_.vocab);
    w_.allocate(h * v, "LM head weights");
    x_.allocate(h, "hidden state");
    logits_.allocate(v, "logits");
    mask_.allocate((v + 31) / 32, "token mask");
    parallel_for(h * v, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) w_[i] = random_uniform(seed, i) * 0.05f;
    });
    for (size_t i = 0; i < h; ++i) x_[i] = random_uniform(seed + 1, i);
    const double density = p.number("mask_density");
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
      if ((!masked_ || mask_allows(mask_.data(), t)) && (want < 0 || ref[static_cast<size_t>(t)] > ref[static_cast<size_t>(want)])) want = t;
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

struct CpuLmHeadArgmax : CpuLmHead {
  CpuLmHeadArgmax() : CpuLmHead(false) {}
};
struct CpuLmHeadMaskedArgmax : CpuLmHead {
  CpuLmHeadMaskedArgmax() : CpuLmHead(true) {}
};

// ---- constrain-keywords ----

// One row per keyword of keyword_cases.h. A supported keyword: validate() checks its case (the
// DFA accepts exactly the valid documents, rejects the by-design ones, random walks satisfy the
// independent oracle); run() is one compile of its schema. A refused keyword: the row is
// `unsupported` with the compiler's error as its note, provided the error names the keyword and
// the pointer; otherwise (or when it compiles) the row FAILS with what went wrong.
class KeywordCheck : public Variant {
 public:
  std::string unsupported(const Point& p) const override {
    const RefusalCase* refusal = find_refusal_case(p.text("keyword"));
    if (!refusal) return {};
    const RefusalOutcome o = check_refusal(*refusal);
    return o.ok ? "error: " + o.message : std::string();  // not as expected: validate() fails the row
  }
  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const std::string& name = p.text("keyword");
    case_ = find_keyword_case(name);
    refusal_ = find_refusal_case(name);
    if (!case_ && !refusal_) throw std::runtime_error("no keyword case '" + name + "'");
    walks_ = static_cast<int>(p.integer("walks"));
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

// ---- registrations ----

KindInfo kind(const std::string& name, const std::string& doc, std::vector<KeySpec> keys, std::vector<VariantDecl> variants) {
  KindInfo k;
  k.name = name;
  k.group = "constrain";
  k.doc = doc;
  k.keys = std::move(keys);
  k.variants = std::move(variants);
  for (const auto& key : k.keys)
    if (key.name == "constraint") k.check = check_constraint_keys;
  return k;
}

VariantDecl host(std::string name, std::string doc) {
  VariantDecl d{std::move(name), Backend::Cpu, std::move(doc), {}};
  d.host = true;
  return d;
}

std::vector<KeySpec> with(std::vector<KeySpec> keys, std::vector<KeySpec> more) {
  keys.insert(keys.end(), more.begin(), more.end());
  return keys;
}

const KindRegistration compile_kind(with_python_peers(kind(
    "constrain-compile",
    "Compile a constraint: schema -> regex -> minimal DFA -> token masks (precomputed: every mask class; lazy: the "
    "classes only, masks on first use). One sample = one full compile.",
    constraint_keys(),
    {host("precomputed", "outlines-style: every mask built ahead of generation"),
     host("lazy", "XGrammar-style adaptive: DFA and mask classes now, each mask on first use"),
     python_peer_decl("xgrammar",
                      "XGrammar (python package, scripts/constrain_peer.py compiled in, its own process; key `python`) on our "
                      "token bytes: one sample = compile_json_schema (grammar + adaptive token-mask cache, our thread count, "
                      "its cache off) + GrammarMatcher. Checked first on 8 of our random valid documents (every token and EOS "
                      "allowed, read from its masks; 12 masks compared with our DFA's: mask_extra/mask_missing), 8 random walks "
                      "under its mask checked by our validator (the note); unsupported (saying why) without the package or when "
                      "it refuses the schema"),
     python_peer_decl("llguidance",
                      "llguidance (python package, as xgrammar): one sample = grammar_from_json_schema + LLMatcher (lexer and "
                      "parser; its masks are computed at each step, none here); its tokenizer callback is our greedy longest "
                      "match; it has no strict mode (undeclared keys stay allowed)")})));

const KindRegistration mask_kind(with_python_peers(kind(
    "constrain-mask",
    "Per-step mask cost while decoding `documents` random valid documents: the state's mask copied into the step's "
    "bitmask, then the DFA advanced by the token. One sample = all documents; per-step p50/p99 as metrics.",
    with(constraint_keys(), {key_spec("documents", ParamType::Int, "documents decoded per sample", Value(int64_t{8}), 1.0)}),
    {host("precomputed", "mask lookup in the precomputed index"), host("lazy", "lazy masks, cold at the start of every sample (the vocabulary's string-content pieces are kept, like its trie)"),
     python_peer_decl("xgrammar",
                      "XGrammar's GrammarMatcher (python package, its own process; key `python`) on the same documents and "
                      "token ids: per step fill_next_token_bitmask + accept_token, timed in python (py_overhead: the cost of a "
                      "timed step around two no-op calls), a fresh matcher per document (untimed); gated as ours (every "
                      "target token and EOS allowed by its masks)"),
     python_peer_decl("llguidance",
                      "llguidance's LLMatcher (as xgrammar): per step the mask into the bitmask (unsafe_compute_mask_ptr, what "
                      "llguidance.numpy's fill does) + consume_token")})));

const KindRegistration validity_kind(kind(
    "constrain-validity",
    "The documented synthetic noisy emitter: it follows valid target documents and errs with probability epsilon per "
    "token; constrained, errors stay inside the mask; unconstrained, the document is parsed and validated at the end "
    "and retried up to `retries` times. Validity by an independent validator.",
    with(constraint_keys(),
         {key_spec("epsilon", ParamType::Float, "probability that the emitter errs on a token", Value(0.01), 0.0, 1.0),
          key_spec("retries", ParamType::Int, "attempts per document without the mask", Value(int64_t{3}), 1.0),
          key_spec("documents", ParamType::Int, "documents per sample", Value(int64_t{50}), 1.0)}),
    {host("constrained", "the emitter under the token mask"), host("unconstrained_retry", "no mask; parse, validate, retry")}));

const KindRegistration jump_kind(kind(
    "constrain-jump-forward",
    "Model calls per document when the bytes the DFA forces are emitted without a call (SGLang's jump-forward).",
    with(constraint_keys(), {key_spec("documents", ParamType::Int, "documents per sample", Value(int64_t{20}), 1.0)}),
    {host("no_jump", "one model call per token"), host("jump_forward", "forced bytes emitted as tokens without a call")}));

const KindRegistration overhead_kind(kind(
    "constrain-overhead",
    "The cost of a mask at a decode step, against the LM head alone (logits = W·x, then greedy choice): "
    "lm_head_argmax vs lm_head_masked_argmax (GPU: cuBLAS GEMV + fused mask/argmax kernel, bitmask uploaded each "
    "step; CPU: SGEMV + masked argmax). The ratio is the overhead; a full engine decode step comes with the engine.",
    {enum_key("model", "LM-head shape: llama2-7b (4096 -> 32000), qwen2-0.5b (896 -> 151936), gpt2 (768 -> 50257), tiny (256 -> 50257)",
              "llama2-7b", {"llama2-7b", "qwen2-0.5b", "gpt2", "tiny"}),
     key_spec("mask_density", ParamType::Float, "fraction of tokens the mask allows", Value(0.5), 0.0, 1.0)},
    {{"lm_head_argmax", Backend::Cuda, "cuBLAS bf16 GEMV to fp32 logits, then a device argmax", {}},
     {"lm_head_masked_argmax", Backend::Cuda, "the same, with the step's bitmask uploaded and applied in the argmax kernel", {}},
     {"cpu_lm_head_argmax", Backend::Cpu, "fp32 SGEMV over the CPU threads, then argmax", {}},
     {"cpu_lm_head_masked_argmax", Backend::Cpu, "the same, masked", {}}}));

const KindRegistration keywords_kind(kind(
    "constrain-keywords",
    "The compiler's completeness table, one row per JSON Schema keyword (and regex: / choice:): a bundled case "
    "(lib/constrain/keyword_cases.h) with hand-written valid, invalid and by-design documents (valid by the schema, "
    "outside the language by design: key order, compact layout, ...). The row passes when the DFA accepts every valid "
    "document and rejects the others, and `walks` random walks through the DFA parse and satisfy an independent "
    "validator. Refused keywords are `unsupported` rows whose note is the compiler's error, which must name the "
    "keyword and the JSON pointer. One sample = one compile of the case.",
    {enum_key("keyword", "the keyword case: a supported keyword, regex, choice, or a refused keyword", "type-null",
              keyword_case_names()),
     key_spec("walks", ParamType::Int, "random documents drawn from the DFA per keyword, each checked by the validator",
              Value(int64_t{100}), 1.0, 100000.0)},
    {host("dfa", "the schema compiled to a minimal DFA, checked against the validator")}));

IB_REGISTER_VARIANT("constrain-compile", "precomputed", Precomputed);
IB_REGISTER_VARIANT("constrain-compile", "lazy", Lazy);
IB_REGISTER_VARIANT("constrain-mask", "precomputed", MaskPrecomputed);
IB_REGISTER_VARIANT("constrain-mask", "lazy", MaskLazy);
IB_REGISTER_VARIANT("constrain-validity", "constrained", Constrained);
IB_REGISTER_VARIANT("constrain-validity", "unconstrained_retry", UnconstrainedRetry);
IB_REGISTER_VARIANT("constrain-jump-forward", "no_jump", NoJump);
IB_REGISTER_VARIANT("constrain-jump-forward", "jump_forward", JumpForward);
IB_REGISTER_VARIANT("constrain-keywords", "dfa", KeywordCheck);
IB_REGISTER_VARIANT("constrain-overhead", "cpu_lm_head_argmax", CpuLmHeadArgmax);
IB_REGISTER_VARIANT("constrain-overhead", "cpu_lm_head_masked_argmax", CpuLmHeadMaskedArgmax);

}  // namespace
}  // namespace ib::constrain
