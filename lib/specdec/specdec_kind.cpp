// Kind `specdec` (§8.2): autoregressive decoding against speculative decoding with a draft model
// (acceptance controlled or real) and with n-gram prompt lookup, on the transformer engine.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/registry.h"
#include "core/stats.h"
#include "model/decode_variants.h"
#include "model/text_prompt.h"
#include "specdec/lookahead.h"
#include "specdec/specdec.h"
#include "specdec/step_helpers.h"
#include "specdec/texts.h"

namespace ib::specdec {
namespace {

std::vector<std::string> tree_shapes() {
  return {"1x1x1",     "3x2x1",     "1x1x1x1x1", "2x1x1x1x1", "3x1x1x1x1",       "2x2x1x1x1",
          "3x2x1x1x1", "4x2x1x1x1", "3x3x1x1x1", "4x3x2x1x1", "1x1x1x1x1x1x1x1", "3x2x1x1x1x1x1x1"};
}

// Keys every variant reads, then `own`.
std::vector<std::string> spec_reads(std::vector<std::string> own) {
  for (const char* key : {"target", "target_weights", "prompt", "new_tokens", "text", "temperature", "top_k", "top_p"})
    own.push_back(key);
  for (const auto& key : model::text_prompt_key_names()) own.push_back(key);
  return own;
}

KindInfo specdec_kind() {
  KindInfo k;
  k.name = "specdec";
  k.group = "specdec";
  k.doc =
      "Speculative decoding on the engine: one run generates new_tokens. Greedy (temperature 0): every variant's output "
      "is first checked token for token against the target decoding alone (or the forced text). Sampled (temperature > "
      "0, rejection sampling, trees by recursive rejection sampling): the distributions verification used are checked "
      "against the target's own from a fresh prefill of the output, and every token must lie in its support. "
      "Acceptance comes from a named source: controlled(alpha) (greedy only; the draft model really runs, its token is "
      "the target's next with probability alpha), model (the draft's own choices), or a real text (n-gram).";
  std::vector<std::string> texts = text_names();
  texts.insert(texts.begin(), "none");
  std::vector<std::string> models = model::preset_names();
  models.push_back("checkpoint");
  std::vector<std::string> drafts = models;
  drafts.push_back("self");
  k.keys = {
      enum_key("target", "target model preset (random weights unless target_weights), or checkpoint (target_weights: DIR)",
               "qwen2-7b", models),
      enum_key("draft",
               "draft model preset (random weights unless draft_weights), checkpoint (draft_weights: DIR), or self (the target's "
               "first draft_layers layers and its LM head: self-speculative early exit, Draft & Verify / LayerSkip)",
               "qwen2-0.5b", drafts),
      key_spec("draft_layers", ParamType::Int, "draft: self — how many of the target's layers the draft runs", Value(int64_t{0}),
               0.0),
      key_spec("target_weights", ParamType::String,
               "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
               Value(std::string("random"))),
      key_spec("draft_weights", ParamType::String,
               "random (seeded), or a Hugging Face checkpoint directory (config.json + safetensors)",
               Value(std::string("random"))),
      // A verify pass of k + 1 <= 8 rows and the draft's steps are the GEMV's shapes (bigger passes,
      // most trees and batches, stay on cuBLAS).
      model::matmul_key("CUDA target and draft engines'"),
      model::cpu_matmul_key(),
      key_spec("k", ParamType::Int, "tokens drafted per step", Value(int64_t{5}), 1.0, 16.0),
      enum_key("acceptance", "draft_model: controlled (alpha) or model (the draft's own agreement)", "controlled",
               {"controlled", "model"}),
      key_spec("alpha", ParamType::Float, "controlled acceptance: probability a drafted token is the target's", Value(0.8), 0.0,
               1.0),
      key_spec("prompt", ParamType::Int, "prompt tokens (random; a text brings its own)", Value(int64_t{128}), 2.0),
      key_spec("new_tokens", ParamType::Int, "tokens generated per run", Value(int64_t{64}), 2.0),
      enum_key("text", "none, or a bundled text whose continuation is the target trajectory (n-gram drafting)", "none", texts),
      key_spec("ngram_min", ParamType::Int, "shortest n-gram looked up", Value(int64_t{1}), 1.0),
      key_spec("ngram_max", ParamType::Int, "longest n-gram looked up", Value(int64_t{3}), 1.0),
      enum_key("tree", "draft_tree: children per node at each depth (the draft's top choices); 1x1x1x1x1 is a chain of 5",
               "3x2x1x1x1", tree_shapes()),
      key_spec("dynamic_nodes", ParamType::Int,
               "draft_tree: 0 = the static shape; N > 0 = an EAGLE-2 dynamic tree of the N nodes the draft is most confident of "
               "(path probability), the shape's depth, each depth expanding its first width's most confident nodes",
               Value(int64_t{0}), 0.0, 256.0),
      key_spec("branches", ParamType::Int, "ngram_tree: earlier occurrences whose continuations are verified together",
               Value(int64_t{4}), 1.0, 16.0),
      key_spec("batch", ParamType::Int,
               "autoregressive and draft_model: sequences decoded together (greedy, or sampled with acceptance: model); a "
               "batched step verifies every sequence's drafts in one target pass",
               Value(int64_t{1}), 1.0, 256.0),
      key_spec("temperature", ParamType::Float,
               "0: greedy verification; > 0: sampling, verified by rejection sampling (acceptance: model or n-gram)", Value(0.0),
               0.0),
      key_spec("top_k", ParamType::Int, "sampling: keep the k most likely tokens (0: all)", Value(int64_t{0}), 0.0),
      key_spec("top_p", ParamType::Float, "sampling: keep the smallest set whose mass reaches p (1: all)", Value(1.0), 0.0, 1.0),
      key_spec("lookahead_window", ParamType::Int, "lookahead: W, columns of the Jacobi window", Value(int64_t{5}), 1.0, 64.0),
      key_spec("lookahead_ngram", ParamType::Int, "lookahead: N, the n-gram size (the window has N − 1 levels)",
               Value(int64_t{4}), 2.0, 16.0),
      key_spec("lookahead_candidates", ParamType::Int,
               "lookahead: G, pool n-grams starting with the last token verified per step", Value(int64_t{5}), 0.0, 64.0),
      key_spec("lookahead_prompt", ParamType::Bool,
               "lookahead: also pool the n-grams of the prompt and of the output so far (prompt lookup inside lookahead)",
               Value(false)),
  };
  for (auto& t : model::text_prompt_keys()) k.keys.push_back(std::move(t));
  k.check = [](const std::map<std::string, std::vector<Value>>& values) {
    if (auto problem = model::check_model_weights(values, "target", "target_weights")) return problem;
    if (auto problem = model::check_model_weights(values, "draft", "draft_weights")) return problem;
    return model::check_text_prompts(values, "target_weights", "tokenizer", "target");  // auto: the target's tokenizer.json
  };
  return k;
}

const KindRegistration registration(specdec_kind());

enum class Mode { Autoregressive, DraftModel, Ngram, DraftTree, NgramTree, Lookahead };

using detail::since;

class SpecVariant : public Variant {
 public:
  SpecVariant(Backend b, Mode m) : backend_(b), mode_(m) {}

  std::string unsupported(const Point& p) const override {
    if (drafts() && p.text("draft") == p.text("target") && p.text("draft_weights") == p.text("target_weights"))
      return "draft and target are the same model";
    if (drafts() && p.text("draft") == "self") {
      const int64_t l = p.integer("draft_layers");
      const auto tc = model::preset(p.text("target"));
      if (l < 1) return "draft: self needs draft_layers >= 1";
      if (tc && l >= tc->layers) return fmt::format("draft_layers {} is not below the target's {} layers", l, tc->layers);
    }
    if (lookup() && p.integer("ngram_min") > p.integer("ngram_max")) return "ngram_min > ngram_max";
    if (mode_ == Mode::DraftTree && p.integer("dynamic_nodes") > 0) {
      if (p.text("acceptance") == "controlled")
        return "a dynamic tree ranks candidates by the draft's confidence: it needs acceptance: model";
      if (p.number("temperature") > 0)
        return "dynamic trees are verified greedily (pruning by confidence breaks the sampled draws)";
    }
    if (mode_ == Mode::Lookahead && p.number("temperature") > 0) return "lookahead rows verify greedily (temperature 0)";
    // The prompt and the new tokens must fit the models' positions (a bundled text's prompt is short).
    const int64_t need = (p.text("text") == "none" && p.find("prompt") ? p.integer("prompt") : 0) + p.integer("new_tokens");
    for (const char* role : {"target", "draft"}) {
      if (std::string(role) == "draft" && !drafts()) continue;
      if (const auto c = model::preset(p.text(role)); c && need > c->max_positions)
        return fmt::format("a {}-token sequence exceeds the {} {}'s {} positions", need, role, c->name, c->max_positions);
    }
    if (p.find("batch") && p.integer("batch") > 1) {
      if (p.text("text") != "none") return "a bundled text is one sequence; batched rows need text: none";
    }
    if (p.text("text") != "none" &&
        (!p.text("prompt_text").empty() || !p.text("prompt_file").empty() || !p.text("prompts").empty()))
      return "a bundled text brings its own prompt: give text: none with prompt_text, prompt_file or prompts";
    if (p.number("temperature") > 0) {
      if (p.text("text") != "none") return "a bundled text forces a greedy trajectory; sampled rows need text: none";
      if (drafts() && p.text("acceptance") == "controlled")
        return "controlled acceptance decides tokens for greedy verification; sampling needs acceptance: model";
    }
    return {};
  }

  void prepare(const Point& p, BackendRuntime& rt, uint64_t seed) override {
    engine_.matmul = model::matmul_of(p);   // the CUDA target's and draft's
    cpu_matmul_ = model::cpu_matmul_of(p);  // the CPU engines'
    const model::ModelChoice tm =
        model::choose_model(p.text("target"), p.text("target_weights"), seed, "target", "target_weights");
    target_ = make(tm, rt);
    const model::ModelConfig& tc = target_->config();
    if (drafts()) {
      if (p.text("draft") == "self") {
        // Self-speculative: the target's own first layers (read from its weights) as the draft.
        model::ModelChoice dm;
        const int layers = static_cast<int>(p.integer("draft_layers"));
        dm.config = model::first_layers_config(tm.config, layers);
        dm.weights = model::first_layers(*tm.weights, layers);
        draft_ = make(dm, rt);
      } else {
        draft_ = make(model::choose_model(p.text("draft"), p.text("draft_weights"), seed + 1, "draft", "draft_weights"), rt);
      }
      cfg_.source = p.text("acceptance") == "model" ? DraftSource::Model : DraftSource::Controlled;
      cfg_.alpha = p.number("alpha");
    } else if (lookup()) {
      cfg_.source = DraftSource::Ngram;
      cfg_.ngram_min = static_cast<int>(p.integer("ngram_min"));
      cfg_.ngram_max = static_cast<int>(p.integer("ngram_max"));
    }
    if (mode_ == Mode::DraftTree) {
      cfg_.tree = parse_tree_shape(p.text("tree"));
      cfg_.k = static_cast<int>(cfg_.tree.size());
      cfg_.dynamic_nodes = static_cast<int>(p.integer("dynamic_nodes"));
    } else if (mode_ != Mode::Autoregressive && mode_ != Mode::Lookahead) {
      cfg_.k = static_cast<int>(p.integer("k"));
    }
    if (mode_ == Mode::NgramTree) cfg_.branches = static_cast<int>(p.integer("branches"));
    if (mode_ == Mode::Lookahead) {
      la_.window = static_cast<int>(p.integer("lookahead_window"));
      la_.ngram = static_cast<int>(p.integer("lookahead_ngram"));
      la_.candidates = static_cast<int>(p.integer("lookahead_candidates"));
      la_.prompt_pool = p.flag("lookahead_prompt");
      la_.seed = seed;
    }
    cfg_.seed = base_seed_ = seed;
    cfg_.sampling.temperature = static_cast<float>(p.number("temperature"));
    cfg_.sampling.top_k = static_cast<int>(p.integer("top_k"));
    cfg_.sampling.top_p = static_cast<float>(p.number("top_p"));
    cfg_.sampling.seed = seed;
    gpu_ = backend_ == Backend::Cuda;
    n_ = static_cast<int>(p.integer("new_tokens"));
    const std::string text = p.text("text");
    forced_ = text != "none";
    text_.reset();
    if (forced_) {
      TokenizedText t = load_text(text);
      prompt_ = t.prompt;
      truth_ = t.output;
      n_ = std::min<int>(n_, static_cast<int>(truth_.size()));
    } else if ((text_ = model::text_prompts(p, p.text("target_weights"), tc.vocab))) {
      prompt_ = text_->for_sequence(0);
      if (draft_ && text_->tokenizer->vocab_size() > draft_->config().vocab)
        throw InputError(fmt::format("tokenizer: {} has {} tokens, past the draft's vocabulary of {}", text_->tokenizer->name(),
                                     text_->tokenizer->vocab_size(), draft_->config().vocab));
    } else {
      prompt_ = model::random_prompt(tc.vocab, static_cast<int>(p.integer("prompt")), seed + 5);
    }
    // A tree's nodes all sit in the cache during its verify pass.
    int tree_nodes = cfg_.k;
    if (mode_ == Mode::NgramTree) tree_nodes = cfg_.k * cfg_.branches;
    if (mode_ == Mode::DraftTree)
      for (int w = 1, t = 0; t < static_cast<int>(cfg_.tree.size()); ++t) tree_nodes += w *= cfg_.tree[static_cast<size_t>(t)];
    if (cfg_.dynamic_nodes > 0) tree_nodes = std::max(tree_nodes, cfg_.dynamic_nodes + cfg_.k * cfg_.tree[0]);
    if (mode_ == Mode::Lookahead) tree_nodes = lookahead_max_nodes(la_) + la_.window + la_.ngram;
    const int cap = static_cast<int>(prompt_.size()) + n_ + tree_nodes + 2;
    const int need = static_cast<int>(prompt_.size()) + n_;
    for (const model::Model* m : {target_.get(), draft_.get()})
      if (m && need > m->config().max_positions)  // a checkpoint's max_position_embeddings (presets: unsupported rows)
        throw InputError(fmt::format("a {}-token sequence exceeds {}'s {} positions (max_position_embeddings)", need,
                                     m->config().name, m->config().max_positions));
    tseq_ = target_->new_sequence(cap);
    if (draft_) dseq_ = draft_->new_sequence(cap);
    batch_ = p.find("batch") ? static_cast<int>(p.integer("batch")) : 1;
    if (batch_ > 1) {
      // Sequence 0 is the one above; the others get prompts of their own.
      bprompts_ = {prompt_};
      btseqs_ = {tseq_};
      bdseqs_ = {dseq_};
      for (int b = 1; b < batch_; ++b) {
        bprompts_.push_back(
            text_ ? text_->for_sequence(static_cast<size_t>(b))
                  : model::random_prompt(tc.vocab, static_cast<int>(prompt_.size()), seed + 5 + 1000 * static_cast<uint64_t>(b)));
        btseqs_.push_back(target_->new_sequence(cap));
        if (draft_) bdseqs_.push_back(draft_->new_sequence(cap));
      }
    }
    reset();
    // The target's own greedy trajectory: the reference of the gate and Controlled's truth.
    if (batch_ > 1 && cfg_.sampling.greedy())
      btruths_ = autoregressive_generate_batch(*target_, btseqs_, lasts(), n_);
    else if (!forced_ && cfg_.sampling.greedy())
      truth_ = autoregressive_generate(*target_, tseq_, prompt_.back(), n_, {}, {}, false);
    // Calibration: the target's decode step at this context and batch (c and v are relative to it).
    std::vector<double> t;
    for (int i = 0; i < 5; ++i) {
      reset();
      const auto t0 = std::chrono::steady_clock::now();
      if (batch_ > 1)
        autoregressive_generate_batch(*target_, btseqs_, lasts(), 1);
      else
        autoregressive_generate(*target_, tseq_, prompt_.back(), 1, {}, {}, false);
      t.push_back(since(t0));
    }
    target_step_ = summarize(t).median;
    reset();
  }

  Validation validate(BackendRuntime&) override {
    if (!cfg_.sampling.greedy()) return validate_sampled();
    if (batch_ > 1) return validate_batch();
    const std::vector<int32_t> out = generate();
    int64_t wrong = 0;
    for (int i = 0; i < n_; ++i) wrong += out[static_cast<size_t>(i)] != truth_[static_cast<size_t>(i)];
    const int cached = target_->length(tseq_), want = static_cast<int>(prompt_.size()) - 1 + n_;
    if (cached != want)
      return {false, "cache_length", static_cast<double>(cached), static_cast<double>(want),
              "the target's cache after generation"};
    runs_ = 0;
    stats_ = {};
    run_seconds_.clear();
    cfg_.seed = base_seed_;
    if (wrong > 0 && gpu_ && !forced_) {
      const Validation v = greedy_up_to_rounding({prompt_}, {out}, wrong);
      // Controlled drafts follow the trajectory the verify passes take (past the near-tie), not
      // the decode steps' one, which verification would no longer meet.
      if (v.ok) truth_ = out;
      return v;
    }
    return {wrong == 0, "mismatches", static_cast<double>(wrong), 0,
            fmt::format("{} tokens vs {}", n_, forced_ ? "the text" : "the target decoding alone (greedy)")};
  }

  // The target's logits before each of the n_ output tokens, from one fresh prefill of prompt +
  // output (a sequence of its own): the reference the gates compare against.
  std::vector<float> fresh_logits(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
    const int tv = target_->config().vocab;
    std::vector<int32_t> full = prompt;
    for (int i = 0; i + 1 < n_; ++i) full.push_back(out[static_cast<size_t>(i)]);
    for (auto& t : full) t %= tv;
    std::vector<float> logits(static_cast<size_t>(n_) * static_cast<size_t>(tv));
    const int fs = target_->new_sequence(static_cast<int>(full.size()) + 1);
    model::StepOutput o;
    o.logits = logits.data();
    target_->prefill(fs, full.data(), static_cast<int>(full.size()), n_, o);
    target_->release(fs);
    return logits;
  }

  // The GPU's verify pass (a GEMM over K + 1 rows) and its decode step (a GEMV) round bf16
  // differently, so where two tokens' logits nearly tie the speculative output may take the other
  // one and then continue from there. Such an output is still the target's greedy decoding up to
  // rounding: each token is within a hair of the best at its position, with the logits of a fresh
  // prefill of prompt + output (a third path). Passes when every token's gap to the row's maximum is
  // at most 1% of the row's logit range; a wrong token (a misaligned position, a stale cache) is
  // typically a large part of the range away.
  Validation greedy_up_to_rounding(const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<std::vector<int32_t>>& outs, int64_t mismatches) {
    const int tv = target_->config().vocab;
    double worst = 0;
    for (size_t b = 0; b < prompts.size(); ++b) {
      const std::vector<float> logits = fresh_logits(prompts[b], outs[b]);
      for (int i = 0; i < n_; ++i) {
        const float* row = &logits[static_cast<size_t>(i) * static_cast<size_t>(tv)];
        const auto [lo, hi] = std::minmax_element(row, row + tv);
        const double range = std::max(1e-6, static_cast<double>(*hi - *lo));
        worst = std::max(worst, static_cast<double>(*hi - row[outs[b][static_cast<size_t>(i)]]) / range);
      }
    }
    return {worst <= 1e-2, "greedy_gap", worst, 1e-2,
            fmt::format("{} of {} tokens differ from the target decoding alone (bf16 near-ties); every token's logit within this "
                        "fraction of its row's range of the best (fresh prefill)",
                        mismatches, static_cast<int64_t>(prompts.size()) * n_)};
  }

  // Each measured run draws its own controlled decisions (seed + run), so α̂ and tokens/step
  // average over runs instead of repeating one realisation.
  void run(BackendRuntime&) override {
    cfg_.seed = cfg_.sampling.seed = base_seed_ + static_cast<uint64_t>(++runs_);
    const auto t0 = std::chrono::steady_clock::now();
    generate();
    run_seconds_.push_back(since(t0));
  }

  // The target checkpoint's settings and, with a text prompt, the prompt and the target's greedy
  // continuation (what every verified output equals), decoded.
  std::string note() const override {
    const model::ModelConfig& c = target_->config();
    std::string n = c.model_type.empty() ? std::string() : "target " + c.describe_details();
    if (text_) {
      std::string t = fmt::format("'{}'", model::short_text(text_->texts[0], 24));
      if (!truth_.empty()) t += fmt::format(" -> '{}'", model::short_text(text_->tokenizer->decode(truth_), 32));
      t += fmt::format(" ({} prompt tokens, {})", prompt_.size(), text_->tokenizer->name());
      n = n.empty() ? t : t + "; " + n;  // the text first: a terminal's shortened note keeps it
    }
    return n;
  }
  std::vector<std::pair<std::string, std::string>> texts() const override {
    if (!text_) return {};
    std::vector<std::pair<std::string, std::string>> t = {{"prompt", text_->texts[0]}};
    if (!truth_.empty()) t.emplace_back("output", text_->tokenizer->decode(truth_));
    return t;
  }

  std::vector<Metric> metrics() const override {
    std::vector<Metric> m;
    m.push_back({"target step", target_step_ * 1e3, "ms"});
    if (!run_seconds_.empty()) {
      // Per measured run (new_tokens for each of the batch's sequences): output tokens per second
      // and time per output token of a sequence, medians over the runs.
      const double t = summarize(run_seconds_).median;
      m.push_back({"TPS", static_cast<double>(batch_) * n_ / t, "tok/s"});
      m.push_back({"TPOT", t / n_ * 1e3, "ms"});
    }
    if (mode_ == Mode::Autoregressive) return m;
    add_positions(m);
    if (mode_ == Mode::Lookahead) return lookahead_metrics(m);
    const double steps = static_cast<double>(stats_.steps);
    const double passes = static_cast<double>(stats_.passes);  // one per step, or per batched step
    const double verify = passes > 0 ? stats_.verify_seconds / passes : 0;
    m.push_back({"acceptance α̂", 100.0 * stats_.acceptance(), "%"});
    m.push_back({"drafts kept", 100.0 * stats_.drafts_kept(), "%"});
    m.push_back({"tokens/step", stats_.tokens_per_step(), ""});
    m.push_back({"verify", verify * 1e3, "ms"});
    const double v = verify / target_step_;
    double c = 0;
    if (tree()) m.push_back({"tree nodes", steps > 0 ? static_cast<double>(stats_.tree_nodes) / steps : 0, ""});
    if (drafts() && stats_.draft_forward > 0) {
      const double draft_step = stats_.draft_seconds / static_cast<double>(stats_.draft_forward);
      c = draft_step / target_step_;
      m.push_back({"draft step", draft_step * 1e3, "ms"});
      m.push_back({"c", c, ""});
    }
    m.push_back({"v", v, ""});
    // The analytic model at the measured acceptance and cost ratios.
    const double a = std::min(stats_.acceptance(), 0.999999);
    if (mode_ == Mode::DraftTree) {
      // The tree's analytic model at the α the spec sets (controlled) – per-depth α̂ is not the α
      // of a tree – and the draft forwards per step as measured.
      if (cfg_.source == DraftSource::Controlled) {
        const double e = expected_tokens_tree(cfg_.alpha, cfg_.tree);
        const double forwards = steps > 0 ? static_cast<double>(stats_.draft_forward) / steps : 0;
        m.push_back({"E (analytic)", e, ""});
        m.push_back({"predicted speedup", e / (forwards * c + v), "×"});
      }
      return m;
    }
    if (mode_ == Mode::NgramTree) return m;
    m.push_back({"E (analytic)", expected_tokens(a, cfg_.k), ""});
    if (mode_ == Mode::DraftModel) m.push_back({"predicted speedup", predicted_speedup(a, cfg_.k, c, v), "×"});
    return m;
  }

 private:
  // Sampled rows: the output cannot equal the target's own draw token for token. What is checked:
  // every emitted token lies in the support of the target's sampling distribution at its position,
  // and (speculative variants) the distribution verification used there is the target's own,
  // recomputed by a fresh prefill of prompt + output — total variation under 1e-3 on the CPU, 0.15
  // on the GPU (bf16 verify and prefill passes take different kernels and round differently: a
  // 1–2% logit difference is ~0.02–0.04 per row at temperature 0.7; a misaligned position or a
  // corrupted cache gives ~0.5 and more). That the rejection sampling
  // preserves the distribution is proven by the unit tests (chi-square-style checks over many draws).
  Validation validate_sampled() {
    std::vector<std::vector<std::vector<float>>> used(static_cast<size_t>(batch_));
    if (mode_ != Mode::Autoregressive) {
      if (batch_ > 1)
        cfg_.record_batch = &used;
      else
        cfg_.record_target = &used[0];
    }
    const std::vector<std::vector<int32_t>> outs = batch_ > 1 ? generate_batch() : std::vector<std::vector<int32_t>>{generate()};
    cfg_.record_target = nullptr;
    cfg_.record_batch = nullptr;
    runs_ = 0;
    stats_ = {};
    run_seconds_.clear();
    cfg_.seed = cfg_.sampling.seed = base_seed_;
    const int tv = target_->config().vocab;
    int64_t off = 0;
    double worst = 0;
    for (int b = 0; b < batch_; ++b) {
      const std::vector<int32_t>& prompt = batch_ > 1 ? bprompts_[static_cast<size_t>(b)] : prompt_;
      const std::vector<int32_t>& out = outs[static_cast<size_t>(b)];
      const std::vector<std::vector<float>>& rows = used[static_cast<size_t>(b)];
      const int seq = batch_ > 1 ? btseqs_[static_cast<size_t>(b)] : tseq_;
      const int cached = target_->length(seq), want = static_cast<int>(prompt.size()) - 1 + n_;
      if (cached != want)
        return {false, "cache_length", static_cast<double>(cached), static_cast<double>(want),
                fmt::format("the target's cache of sequence {} after generation", b)};
      if (mode_ != Mode::Autoregressive && static_cast<int>(rows.size()) != n_)
        return {false, "recorded_rows", static_cast<double>(rows.size()), static_cast<double>(n_),
                fmt::format("target distributions recorded by verification of sequence {}", b)};
      // The target's own distributions at every output position: one fresh prefill.
      const std::vector<float> fresh = fresh_logits(prompt, out);
      std::vector<float> pf(static_cast<size_t>(tv));
      for (int i = 0; i < n_; ++i) {
        model::sampling_distribution(&fresh[static_cast<size_t>(i) * static_cast<size_t>(tv)], tv, cfg_.sampling, pf.data());
        const int32_t t = out[static_cast<size_t>(i)];
        off += t < 0 || t >= tv || !(pf[static_cast<size_t>(t)] > 0);
        if (rows.empty()) continue;
        double d = 0;
        for (int x = 0; x < tv; ++x)
          d += std::fabs(static_cast<double>(pf[static_cast<size_t>(x)]) - rows[static_cast<size_t>(i)][static_cast<size_t>(x)]);
        worst = std::max(worst, d / 2);
      }
    }
    const int64_t total = static_cast<int64_t>(batch_) * n_;
    const std::string what =
        batch_ > 1 ? fmt::format("{} sequences × {} sampled tokens", batch_, n_) : fmt::format("{} sampled tokens", n_);
    if (off > 0)
      return {false, "off_support", static_cast<double>(off), 0,
              fmt::format("of {} sampled tokens outside the target's distribution", total)};
    if (mode_ == Mode::Autoregressive)
      return {true, "off_support", 0, 0, fmt::format("{}, all in the target's distribution (fresh prefill)", what)};
    const double tol = gpu_ ? 0.15 : 1e-3;
    return {
        worst <= tol, "tv_target", worst, tol,
        fmt::format("{} in support; max total variation of the verification's target distributions vs a fresh prefill", what)};
  }

  // Batched rows: every sequence's output equals its own greedy trajectory, every cache the
  // prompt plus the output.
  Validation validate_batch() {
    const auto out = generate_batch();
    int64_t wrong = 0;
    for (int b = 0; b < batch_; ++b)
      for (int i = 0; i < n_; ++i)
        wrong += out[static_cast<size_t>(b)][static_cast<size_t>(i)] != btruths_[static_cast<size_t>(b)][static_cast<size_t>(i)];
    const int want = static_cast<int>(prompt_.size()) - 1 + n_;
    for (int b = 0; b < batch_; ++b)
      if (target_->length(btseqs_[static_cast<size_t>(b)]) != want)
        return {false, "cache_length", static_cast<double>(target_->length(btseqs_[static_cast<size_t>(b)])),
                static_cast<double>(want), fmt::format("the target's cache of sequence {} after generation", b)};
    runs_ = 0;
    stats_ = {};
    run_seconds_.clear();
    cfg_.seed = cfg_.sampling.seed = base_seed_;
    if (wrong > 0 && gpu_) {
      const Validation v = greedy_up_to_rounding(bprompts_, out, wrong);
      if (v.ok) btruths_ = out;  // as in validate(): controlled drafts follow the verify passes' trajectory
      return v;
    }
    return {wrong == 0, "mismatches", static_cast<double>(wrong), 0,
            fmt::format("{} sequences × {} tokens vs each one's target decoding alone (greedy)", batch_, n_)};
  }
  std::vector<int32_t> lasts() const {
    std::vector<int32_t> l;
    for (const auto& pr : bprompts_) l.push_back(pr.back());
    return l;
  }
  std::vector<std::vector<int32_t>> generate_batch() {
    reset();
    if (mode_ == Mode::Autoregressive) return autoregressive_generate_batch(*target_, btseqs_, lasts(), n_, cfg_.sampling);
    std::vector<std::function<int32_t(int64_t)>> truths;
    for (int b = 0; b < batch_; ++b)
      truths.push_back([this, b](int64_t i) {
        const auto& tr = btruths_[static_cast<size_t>(b)];
        return tr.empty() ? 0 : tr[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(tr.size()) - 1))];
      });
    return speculative_generate_batch(*target_, btseqs_, *draft_, bdseqs_, lasts(), n_, cfg_, truths, stats_);
  }

  // vLLM's acceptance per position: of the steps that drafted position i, the share whose first
  // i tokens were all accepted (for a tree or lookahead, depth i). Up to 8 positions.
  void add_positions(std::vector<Metric>& m) const {
    for (size_t i = 0; i < std::min<size_t>(8, stats_.drafted_at.size()); ++i)
      m.push_back({fmt::format("accepted @{}", i + 1), 100.0 * stats_.acceptance_at(i), "%"});
  }

  // Lookahead rows: no drafted-token acceptance (every node is a candidate); where the accepted
  // tokens came from instead, the pool's size, and the host's bookkeeping per step.
  std::vector<Metric> lookahead_metrics(std::vector<Metric> m) const {
    const double steps = static_cast<double>(stats_.steps), acc = static_cast<double>(stats_.accepted);
    const double verify = steps > 0 ? stats_.verify_seconds / steps : 0;
    m.push_back({"tokens/step", stats_.tokens_per_step(), ""});
    m.push_back({"tree nodes", steps > 0 ? static_cast<double>(stats_.tree_nodes) / steps : 0, ""});
    m.push_back({"verify", verify * 1e3, "ms"});
    m.push_back({"v", verify / target_step_, ""});
    m.push_back({"from pool", acc > 0 ? 100.0 * static_cast<double>(stats_.pool_accepted) / acc : 0, "%"});
    m.push_back({"from window", acc > 0 ? 100.0 * static_cast<double>(stats_.window_accepted) / acc : 0, "%"});
    m.push_back({"pool n-grams", static_cast<double>(stats_.pool_ngrams), ""});
    m.push_back({"bookkeeping", steps > 0 ? stats_.draft_seconds / steps * 1e3 : 0, "ms"});
    return m;
  }

  bool tree() const { return mode_ == Mode::DraftTree || mode_ == Mode::NgramTree; }
  bool drafts() const { return mode_ == Mode::DraftModel || mode_ == Mode::DraftTree; }
  bool lookup() const { return mode_ == Mode::Ngram || mode_ == Mode::NgramTree; }
  std::unique_ptr<model::Model> make(const model::ModelChoice& m, BackendRuntime& rt) {
    if (backend_ == Backend::Cuda) return model::make_cuda_model(m.config, *m.weights, engine_, rt.stream());
    return model::make_cpu_model(m.config, *m.weights, cpu_matmul_);
  }
  // Both caches back to the prompt minus its last token (the first token fed at generation).
  void reset() {
    const int keep = static_cast<int>(prompt_.size()) - 1;
    auto fill = [&](model::Model& m, int seq, const std::vector<int32_t>& prompt) {
      if (m.length(seq) > keep) m.truncate(seq, keep);
      if (m.length(seq) < keep) {
        std::vector<int32_t> in(prompt.begin() + m.length(seq), prompt.begin() + keep);
        for (auto& t : in) t %= m.config().vocab;
        m.prefill(seq, in.data(), static_cast<int>(in.size()), 1, {});
      }
    };
    fill(*target_, tseq_, prompt_);
    if (draft_) fill(*draft_, dseq_, prompt_);
    for (int b = 1; b < batch_; ++b) {
      fill(*target_, btseqs_[static_cast<size_t>(b)], bprompts_[static_cast<size_t>(b)]);
      if (draft_) fill(*draft_, bdseqs_[static_cast<size_t>(b)], bprompts_[static_cast<size_t>(b)]);
    }
  }
  std::vector<int32_t> generate() {
    if (batch_ > 1) return generate_batch()[0];
    reset();
    auto truth = [this](int64_t i) {
      return truth_.empty() ? 0 : truth_[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(truth_.size()) - 1))];
    };
    if (mode_ == Mode::Autoregressive)
      return autoregressive_generate(*target_, tseq_, prompt_.back(), n_, cfg_.sampling, truth, forced_);
    std::vector<int32_t> history = prompt_;
    if (mode_ == Mode::Lookahead)
      return lookahead_generate(*target_, tseq_, prompt_.back(), n_, la_, truth, forced_, history, stats_);
    if (tree())
      return speculative_generate_tree(*target_, tseq_, draft_.get(), dseq_, prompt_.back(), n_, cfg_, truth, forced_, history,
                                       stats_);
    return speculative_generate(*target_, tseq_, draft_.get(), dseq_, prompt_.back(), n_, cfg_, truth, forced_, history, stats_);
  }

  Backend backend_;
  Mode mode_;
  SpecConfig cfg_;
  LookaheadConfig la_;
  model::EngineOptions engine_;  // of the CUDA engines: the defaults but for `matmul`
  model::CpuMatmul cpu_matmul_ = model::CpuMatmul::Blas;
  std::unique_ptr<model::Model> target_, draft_;
  int tseq_ = -1, dseq_ = -1, n_ = 0, batch_ = 1;
  std::vector<std::vector<int32_t>> bprompts_, btruths_;  // batch > 1: every sequence's prompt and greedy trajectory
  std::vector<int> btseqs_, bdseqs_;
  bool forced_ = false, gpu_ = false;
  std::vector<int32_t> prompt_, truth_;
  std::optional<model::TextPrompts> text_;  // a text prompt (prompt_text, prompt_file, prompts)
  double target_step_ = 0;
  SpecStats stats_;
  std::vector<double> run_seconds_;  // each measured run's generation
  int64_t runs_ = 0;
  uint64_t base_seed_ = 0;
};

// ---- the variants: one SpecVariant per backend and mode ----

// The keys each mode reads; the CUDA variants also read `matmul` (model::with_matmul), the CPU
// ones `cpu_matmul` (model::with_cpu_matmul).
const std::vector<std::string> kAutoregressiveKeys = spec_reads({"batch"});
const std::vector<std::string> kDraftModelKeys =
    spec_reads({"draft", "draft_weights", "draft_layers", "k", "acceptance", "alpha", "batch"});
const std::vector<std::string> kNgramKeys = spec_reads({"k", "ngram_min", "ngram_max"});
const std::vector<std::string> kDraftTreeKeys =
    spec_reads({"draft", "draft_weights", "draft_layers", "tree", "dynamic_nodes", "acceptance", "alpha"});
const std::vector<std::string> kNgramTreeKeys = spec_reads({"k", "branches", "ngram_min", "ngram_max"});
const std::vector<std::string> kLookaheadKeys =
    spec_reads({"lookahead_window", "lookahead_ngram", "lookahead_candidates", "lookahead_prompt"});

VariantFactory spec_variant(Backend backend, Mode mode) { return make_variant<SpecVariant>(backend, mode); }
using model::with_cpu_matmul;
using model::with_matmul;

const VariantListRegistration specdec_variants(
    "specdec",
    {
        {{"autoregressive", Backend::Cuda, "the target alone, one decode step per token (the baseline)",
          with_matmul(kAutoregressiveKeys)},
         IB_IF_CUDA(spec_variant(Backend::Cuda, Mode::Autoregressive))},
        {{"draft_model", Backend::Cuda, "draft K tokens with the draft model, verify them in one target pass",
          with_matmul(kDraftModelKeys)},
         IB_IF_CUDA(spec_variant(Backend::Cuda, Mode::DraftModel))},
        {{"ngram", Backend::Cuda, "draft by prompt lookup (no draft model), verify in one target pass", with_matmul(kNgramKeys)},
         IB_IF_CUDA(spec_variant(Backend::Cuda, Mode::Ngram))},
        {{"cpu_autoregressive", Backend::Cpu, "the target alone on the CPU engine", with_cpu_matmul(kAutoregressiveKeys)},
         spec_variant(Backend::Cpu, Mode::Autoregressive)},
        {{"cpu_draft_model", Backend::Cpu, "draft model + verify on the CPU engine", with_cpu_matmul(kDraftModelKeys)},
         spec_variant(Backend::Cpu, Mode::DraftModel)},
        {{"cpu_ngram", Backend::Cpu, "prompt lookup + verify on the CPU engine", with_cpu_matmul(kNgramKeys)},
         spec_variant(Backend::Cpu, Mode::Ngram)},
        {{"draft_tree", Backend::Cuda,
          "a token tree of the draft's top candidates verified in one target pass with a tree attention mask (Medusa/EAGLE's "
          "mechanism)",
          with_matmul(kDraftTreeKeys)},
         IB_IF_CUDA(spec_variant(Backend::Cuda, Mode::DraftTree))},
        {{"ngram_tree", Backend::Cuda, "the continuations of several earlier occurrences as a token tree, verified in one pass",
          with_matmul(kNgramTreeKeys)},
         IB_IF_CUDA(spec_variant(Backend::Cuda, Mode::NgramTree))},
        {{"cpu_draft_tree", Backend::Cpu, "token-tree drafting + tree verification on the CPU engine",
          with_cpu_matmul(kDraftTreeKeys)},
         spec_variant(Backend::Cpu, Mode::DraftTree)},
        {{"cpu_ngram_tree", Backend::Cpu, "several prompt-lookup candidates as a tree, verified in one pass on the CPU engine",
          with_cpu_matmul(kNgramTreeKeys)},
         spec_variant(Backend::Cpu, Mode::NgramTree)},
        {{"lookahead", Backend::Cuda,
          "lookahead decoding (no draft model): a Jacobi window of the target's own guesses and a pool of the n-grams it "
          "produced, both verified in one target pass under a tree mask (greedy)",
          with_matmul(kLookaheadKeys)},
         IB_IF_CUDA(spec_variant(Backend::Cuda, Mode::Lookahead))},
        {{"cpu_lookahead", Backend::Cpu, "lookahead decoding on the CPU engine", with_cpu_matmul(kLookaheadKeys)},
         spec_variant(Backend::Cpu, Mode::Lookahead)},
    });

}  // namespace
}  // namespace ib::specdec
