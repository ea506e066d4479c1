// Speculative decoding in the serving scheduler (serve/scheduler.h) on trained models: by prompt
// lookup and with a draft model, unconstrained and under a response_format's schema, every request
// gets the tokens it gets without speculation; drafts are verified in the batch and some kept.
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/trained_model.h"
#include "constrain/validator.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "serve/scheduler.h"
#include "serve/schema_constraint.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {
namespace {

// A speculating scheduler's run: each request's tokens and log-probabilities, what was drafted
// and kept (each step within the token budget, the counters the steps' sum).
struct SpeculationRun {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, std::vector<float>> logprobs;
  std::map<int64_t, std::string> failed;  // requests that failed, and why
  int drafted = 0, accepted = 0;
};
SpeculationRun run_speculation(Scheduler& s, const std::vector<Request>& rs, int token_budget) {
  SpeculationRun run;
  for (const Request& r : rs) EXPECT_EQ(s.submit(r), "");
  for (int guard = 0; s.has_work() && guard < 10000; ++guard) {
    StepResult step = s.step();
    run.drafted += step.drafted;
    run.accepted += step.accepted;
    EXPECT_LE(step.prefill_tokens + step.decode_rows + step.drafted, token_budget);
    for (const Emitted& e : step.tokens) {
      run.tokens[e.request].push_back(e.token);
      if (e.logprob) run.logprobs[e.request].push_back(e.logprob->logprob);
    }
    for (const auto& [id, why] : step.failed) run.failed[id] = why;
  }
  EXPECT_EQ(s.counters().spec_drafted, run.drafted);
  return run;
}

// Speculation kept every request's tokens: the same as without it (log-probabilities within
// 1e-3), and drafts were verified, some kept.
void expect_speculation_kept_the_tokens(const SpeculationRun& with, const SpeculationRun& without, const std::vector<Request>& rs,
                                        int64_t logprobs_request) {
  for (const Request& r : rs) EXPECT_EQ(with.tokens.at(r.id), without.tokens.at(r.id)) << "request " << r.id;
  const auto& got = with.logprobs.at(logprobs_request);
  const auto& want = without.logprobs.at(logprobs_request);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3);
  EXPECT_EQ(without.drafted, 0);
  EXPECT_GT(with.drafted, 0);
  EXPECT_GT(with.accepted, 0);
  EXPECT_LE(with.accepted, with.drafted);
}

// Speculative decoding by prompt lookup in the scheduler: with drafts verified in the batch, every
// request gets the tokens (and log-probabilities) it gets without speculation: greedy, sampled
// with its seed, with a repetition penalty, stopped at an EOS; the drafts are verified and some
// kept; on a paged cache every block comes back. A trained model on repeated code, so that
// lookups find continuations the model follows.
TEST(ServeScheduler, SpeculationByPromptLookupKeepsEveryRequestsTokens) {
  const testing_support::TrainedModel m;
  const auto& tok = m.tok;
  const std::string code = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n";
  std::vector<Request> rs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.id = i;
    r.prompt = tok->encode(code + code.substr(0, static_cast<size_t>(10 + 7 * i)));
    r.max_tokens = 24 + 3 * i;
    model::SamplingParams p;
    p.temperature = i < 2 ? 0.0f : 0.8f;
    p.seed = 40 + static_cast<uint64_t>(i);
    if (i == 3) p.top_k = 20;
    r.sampling = p;
    if (i == 4) r.processors.repetition_penalty = 1.3f;
    if (i == 1) r.logprobs = 2;
    rs.push_back(std::move(r));
  }
  {  // Request 5 ends at an EOS: the token it writes ninth without one.
    auto engine = m.cpu_engine();
    Scheduler s(*engine, SchedulerOptions{});
    rs[5].eos = run_speculation(s, {rs[5]}, SchedulerOptions{}.token_budget).tokens.at(5).at(8);
  }
  for (bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    SpeculationRun without;
    for (int k : {0, 4}) {
      auto engine = m.cpu_engine();
      if (paged) engine->enable_paged_kv(64, 8);
      SchedulerOptions o;
      o.max_seqs = 4;
      o.token_budget = 48;
      o.long_prefill = 16;
      o.spec_tokens = k;
      o.spec_ngram_min = 2;
      o.prefix_caching = paged;
      Scheduler s(*engine, o);
      const SpeculationRun run = run_speculation(s, rs, o.token_budget);
      if (k == 0) {
        without = run;
        continue;
      }
      expect_speculation_kept_the_tokens(run, without, rs, 1);
      EXPECT_LE(without.tokens.at(5).size(), 9u);  // it stopped at its EOS, a drafted one or not
      std::printf("[ specdec  ] %s: %d of %d drafted tokens kept\n", paged ? "paged" : "contiguous", run.accepted, run.drafted);
      if (paged) {
        s.clear_prefix_cache();
        EXPECT_EQ(engine->kv_blocks()->used_blocks(), 0);
      }
    }
  }
}

// Speculative decoding with a draft model (vLLM's draft-model method): ib-draft-1m drafts for
// ib-draft-5m (one tokenizer). Every request gets the tokens and log-probabilities it gets without
// speculation (greedy, sampled, a penalty, an EOS), drafts are kept, every draft sequence is
// released (a fresh draft sequence is 0 again), and a draft of another vocabulary is refused.
TEST(ServeScheduler, SpeculationWithADraftModelKeepsEveryRequestsTokens) {
  const testing_support::TrainedModel target("ib-draft-5m"), drafter("ib-draft-1m");
  const auto& tok = target.tok;
  const std::string text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n";
  std::vector<Request> rs;
  for (int i = 0; i < 5; ++i) {
    Request r;
    r.id = i;
    r.prompt = tok->encode(text.substr(0, static_cast<size_t>(20 + 6 * i)));
    r.max_tokens = 20 + 4 * i;
    model::SamplingParams p;
    p.temperature = i < 2 ? 0.0f : 0.7f;
    p.seed = 90 + static_cast<uint64_t>(i);
    r.sampling = p;
    if (i == 3) r.processors.repetition_penalty = 1.2f;
    if (i == 1) r.logprobs = 1;
    if (i == 4) r.eos = tok->encode("\n").back();
    rs.push_back(std::move(r));
  }
  for (bool paged : {false, true}) {
    SCOPED_TRACE(paged ? "paged" : "contiguous");
    SpeculationRun without;
    for (int k : {0, 3}) {
      auto engine = target.cpu_engine();
      auto draft = drafter.cpu_engine();
      if (paged) engine->enable_paged_kv(64, 8);
      SchedulerOptions o;
      o.max_seqs = 3;
      o.token_budget = 32;
      o.long_prefill = 12;
      o.spec_tokens = k;
      o.draft_model = draft.get();
      o.prefix_caching = paged;
      SpeculationRun run;
      {
        Scheduler s(*engine, o);
        run = run_speculation(s, rs, o.token_budget);
        if (paged) {
          s.clear_prefix_cache();
          EXPECT_EQ(engine->kv_blocks()->used_blocks(), 0);
        }
      }
      EXPECT_EQ(draft->new_sequence(8), 0) << "a draft sequence was not released";
      if (k == 0) {
        without = run;
        continue;
      }
      expect_speculation_kept_the_tokens(run, without, rs, 1);
      EXPECT_LT(run.accepted, run.drafted);
      std::printf("[ specdec  ] draft model, %s: %d of %d drafted tokens kept\n", paged ? "paged" : "contiguous", run.accepted,
                  run.drafted);
    }
  }
  // Another vocabulary: refused when the scheduler is made.
  model::ModelConfig other = drafter.config;
  other.vocab = 100;
  auto small = model::make_cpu_model(other, *model::random_weights(other, 1));
  auto engine = target.cpu_engine();
  SchedulerOptions o;
  o.spec_tokens = 2;
  o.draft_model = small.get();
  EXPECT_THROW(Scheduler(*engine, o), InputError);
}

// A schema's constraint whose accept() fails at its `cut`-th token (a constraint's fault found
// mid-draft): the schema's otherwise.
class CutSchemaConstraint : public TokenConstraint {
 public:
  CutSchemaConstraint(std::shared_ptr<SchemaConstraint::Compiled> compiled, int cut) : inner_(std::move(compiled)), cut_(cut) {}
  int32_t choose(const float* logits, int vocab, const model::SamplingParams& p, float u, int left) override {
    return inner_.choose(logits, vocab, p, u, left);
  }
  bool accept(int32_t token) override {
    if (cut_-- <= 0) throw std::logic_error("the constraint was cut");
    return inner_.accept(token);
  }

 private:
  SchemaConstraint inner_;
  int cut_;
};

// Speculation under a response_format (vLLM's structured outputs with a drafter): drafts are
// proposed without the schema and verified under it, stepped along the draws. Every request
// writes the document it writes without speculation, token for token (greedy and sampled; prompt
// lookup and a draft model; and on a paged pool small enough that drafts are dropped for blocks
// and requests preempted, with prefix caching), each a valid document of its schema; drafts were
// kept; a constraint that fails in the middle of a draft fails its request alone, after the
// tokens drawn before.
TEST(ServeScheduler, SpeculationUnderASchemaKeepsEveryRequestsDocument) {
  const testing_support::TrainedModel target("ib-draft-5m"), drafter("ib-draft-1m");
  const auto& tok = target.tok;
  const std::string schema_text = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
      "kind": {"enum": ["add", "sub", "mul"]}, "count": {"type": "integer", "minimum": 0, "maximum": 99}},
      "required": ["name", "kind", "count"], "additionalProperties": false})";
  const auto schema = ib::parse_json<constrain::SchemaValidator::json>(schema_text);
  const constrain::SchemaValidator validator(schema);
  const SchemaConstraint compiled(schema_text, target.vocab);
  // Each prompt holds a document the model wrote under the schema before (its own tokens, not the
  // tokenizer's spelling of them): what prompt lookup finds when the model writes another.
  std::map<int64_t, std::vector<int32_t>> earlier;
  auto requests = [&] {
    std::vector<Request> rs;
    for (int i = 0; i < 5; ++i) {
      Request r;
      r.id = i;
      r.prompt = tok->encode(i % 2 ? "# the record\n" : "def mul(a, b):\n");
      if (earlier.count(i)) {
        r.prompt.insert(r.prompt.end(), earlier[i].begin(), earlier[i].end());
        for (int32_t t : tok->encode("\n")) r.prompt.push_back(t);
      }
      r.max_tokens = 40;
      r.eos = target.vocab->eos;
      model::SamplingParams p;
      p.temperature = i < 2 ? 0.0f : 0.8f;
      p.seed = 70 + static_cast<uint64_t>(i);
      r.sampling = p;
      if (i == 4)
        r.constraint = std::make_shared<CutSchemaConstraint>(compiled.compiled(), 9);
      else
        r.constraint = std::make_shared<SchemaConstraint>(compiled.compiled());
      rs.push_back(std::move(r));
    }
    return rs;
  };
  {
    auto engine = target.cpu_engine();
    Scheduler s(*engine, SchedulerOptions{});
    earlier = run_speculation(s, requests(), SchedulerOptions{}.token_budget).tokens;
    for (auto& [id, tokens] : earlier)
      if (!tokens.empty() && tokens.back() == target.vocab->eos) tokens.pop_back();
  }
  struct Mode {
    const char* name;
    int tokens;
    bool draft_model;
    int kv_blocks = 0;  // > 0: paged, a pool this small (drafts dropped for blocks, requests preempted), prefix caching on
  };
  SpeculationRun without;
  int preempted = 0;
  for (const Mode& mode : {Mode{"none", 0, false}, Mode{"prompt lookup", 4, false}, Mode{"draft model", 3, true},
                           Mode{"draft model, paged", 3, true, 24}}) {
    SCOPED_TRACE(mode.name);
    auto engine = target.cpu_engine();
    auto draft = drafter.cpu_engine();
    if (mode.kv_blocks > 0) engine->enable_paged_kv(mode.kv_blocks, 8);
    SchedulerOptions o;
    o.max_seqs = 4;
    o.token_budget = 48;
    o.long_prefill = 16;
    o.spec_tokens = mode.tokens;
    o.prefix_caching = mode.kv_blocks > 0;
    if (mode.draft_model) o.draft_model = draft.get();
    const std::vector<Request> rs = requests();
    SpeculationRun run;
    {
      Scheduler s(*engine, o);
      run = run_speculation(s, rs, o.token_budget);
      EXPECT_EQ(s.running(), 0);
      preempted += static_cast<int>(s.counters().preemptions);
      s.clear_prefix_cache();
    }
    if (mode.kv_blocks > 0) {
      EXPECT_EQ(engine->kv_blocks()->used_blocks(), 0);  // the pool stays allocated; every block is back
    } else {
      EXPECT_EQ(engine->kv_bytes(), 0);
    }
    // The cut request: its nine tokens, then its failure; the others' documents are whole.
    ASSERT_EQ(run.failed.size(), 1u);
    EXPECT_NE(run.failed.at(4).find("the constraint was cut"), std::string::npos);
    EXPECT_EQ(run.tokens[4].size(), 9u);
    for (const Request& r : rs) {
      if (r.id == 4) continue;
      std::vector<int32_t> tokens = run.tokens.at(r.id);
      ASSERT_FALSE(tokens.empty());
      if (tokens.back() == target.vocab->eos) tokens.pop_back();  // else it stopped where the document was complete
      const std::string text = tok->decode(tokens, true);
      constrain::SchemaValidator::json doc;
      ASSERT_NO_THROW(doc = ib::parse_json<constrain::SchemaValidator::json>(text)) << text;
      EXPECT_TRUE(validator.valid(doc)) << text;
    }
    if (mode.tokens == 0) {
      without = run;
      EXPECT_EQ(run.drafted, 0);
      continue;
    }
    for (const Request& r : rs) EXPECT_EQ(run.tokens.at(r.id), without.tokens.at(r.id)) << "request " << r.id;
    EXPECT_GT(run.drafted, 0);
    EXPECT_GT(run.accepted, 0);
    EXPECT_LE(run.accepted, run.drafted);
    std::printf("[ specdec  ] under a schema, %s: %d of %d drafted tokens kept\n", mode.name, run.accepted, run.drafted);
  }
  EXPECT_GT(preempted, 0) << "the small pool preempted nothing: its case is not exercised";
}

}  // namespace
}  // namespace ib::serve
