// The OpenAI API layer of `infer-bench serve` (serve/openai_request.h, openai_response.h, stream_text.h): bodies parsed and
// refused field by field, the response objects and stream chunks as the `openai` client reads them, the streamed text held back
// at a cut UTF-8 character. The engine loop (serve/engine_loop.h): many threads' requests served, a cancelled one's reservation
// returned, a refused one named, per-request sampling independent of what a request is batched with.
#include <cmath>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/trained_model.h"
#include "constrain/constraint.h"
#include "constrain/grammar_mask.h"
#include "constrain/token_index.h"
#include "constrain/validator.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "model/config.h"
#include "model/engine_studies.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/weights.h"
#include "serve/engine_loop.h"
#include "serve/histogram.h"
#include "serve/logits_processors.h"
#include "serve/openai_request.h"
#include "serve/openai_response.h"
#include "serve/scheduler.h"
#include "serve/schema_constraint.h"
#include "serve/stream_text.h"
#include "tokenizer/tokenizer.h"

namespace ib::serve {
namespace {

using nlohmann::json;

ApiError refusal_of(const std::string& body, bool chat) {
  ApiError e;
  EXPECT_FALSE(parse_api_request(body, chat, e).has_value()) << body;
  return e;
}

TEST(ServeApi, CompletionAndChatBodiesAreParsed) {
  ApiError e;
  auto c = parse_api_request(R"({"model": "m", "prompt": "Hello", "max_tokens": 5, "temperature": 0, "stream": true,
                                 "stream_options": {"include_usage": true}, "seed": 7, "n": 1, "user": "u"})",
                             false, e);
  ASSERT_TRUE(c) << e.message;
  EXPECT_EQ(c->prompts, (std::vector<std::string>{"Hello"}));
  EXPECT_EQ(c->max_tokens, 5);
  EXPECT_TRUE(c->sampling.greedy());
  EXPECT_TRUE(c->stream && c->include_usage && c->seed_given);
  EXPECT_EQ(c->sampling.seed, 7u);
  auto t = parse_api_request(R"({"model": "m", "prompt": [1, 2, 3]})", false, e);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  const auto lists = parse_api_request(R"({"model": "m", "prompt": [[1, 2], [3]]})", false, e);
  ASSERT_TRUE(lists) << e.message;
  EXPECT_EQ(lists->prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  const auto texts = parse_api_request(R"({"model": "m", "prompt": ["a", "b"], "n": 2})", false, e);
  ASSERT_TRUE(texts) << e.message;
  EXPECT_EQ(texts->prompts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(t->max_tokens, 16);                 // OpenAI's default
  EXPECT_FLOAT_EQ(t->sampling.temperature, 1);  // likewise
  auto ch = parse_api_request(
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
          "max_completion_tokens": 3, "top_p": 0.9, "response_format": {"type": "text"}})",
      true, e);
  ASSERT_TRUE(ch) << e.message;
  ASSERT_EQ(ch->messages.size(), 2u);
  EXPECT_EQ(ch->messages[1].content, "Hi");
  EXPECT_EQ(ch->max_tokens, 3);
  EXPECT_FLOAT_EQ(ch->sampling.top_p, 0.9f);
}

TEST(ServeApi, WhatCannotBeHonouredIsRefusedWithTheFieldNamed) {
  EXPECT_NE(refusal_of("{not json", false).message.find("not valid JSON"), std::string::npos);
  // A field not known is ignored and named (vLLM's behaviour; clients send vendor extensions).
  ApiError e;
  const auto vendor = parse_api_request(
      R"({"model": "m", "prompt": "x", "temprature": 0, "stream_options": {"continuous_usage_stats": true, "x": 1}})", false, e);
  ASSERT_TRUE(vendor) << e.message;
  EXPECT_EQ(vendor->ignored_fields, (std::vector<std::string>{"temprature", "stream_options.x"}));
  EXPECT_TRUE(vendor->continuous_usage);
  EXPECT_EQ(
      ib::parse_json<json>(stream_chunk(*vendor, "c", 1, "m", "ab", "", false, {5, 2}).substr(6))["usage"]["completion_tokens"],
      2);
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "stream_options": {"continuous_usage_stats": 1}})", false).param,
            "stream_options");
  EXPECT_EQ(refusal_of(R"({"prompt": "x"})", false).param, "model");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "n": 17})", false).param, "n");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "n": 2, "best_of": 3})", false).param, "best_of");
  {
    const auto three = parse_api_request(R"({"model": "m", "prompt": "x", "n": 3, "best_of": 3})", false, e);
    ASSERT_TRUE(three) << e.message;
    EXPECT_EQ(three->n, 3);
    const json j = ib::parse_json<json>(completion_json(*three, "c", 1, "m", {{"a", "stop"}, {"b", "length"}}, {2, 5}));
    EXPECT_EQ(j["choices"][1]["index"], 1);
    EXPECT_EQ(j["choices"][1]["text"], "b");
    EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
    EXPECT_EQ(ib::parse_json<json>(stream_chunk(*three, "c", 1, "m", "x", "", false, {}, 2).substr(6))["choices"][0]["index"], 2);
  }
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "stop": [""]})", false).param, "stop");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "stop": 3})", false).param, "stop");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "stop_token_ids": [-1]})", false).param, "stop_token_ids");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "temperature": 3})", false).param, "temperature");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "max_tokens": 0})", false).param, "max_tokens");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": ["a", [1]]})", false).param, "prompt");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": ["a", ""]})", false).param, "prompt");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": ["a", "b", "c", "d", "e"], "n": 16})", false).param, "prompt");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "logprobs": 21})", false).param, "logprobs");
  EXPECT_EQ(refusal_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", true).param,
            "top_logprobs");
  EXPECT_EQ(refusal_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": 3})", true).param,
            "logprobs");
  EXPECT_EQ(refusal_of(R"({"model": "m", "messages": []})", true).param, "messages");
  {
    const auto parts =
        parse_api_request(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
        {"type": "text", "text": "b"}]}]})",
                          true, e);
    ASSERT_TRUE(parts) << e.message;
    EXPECT_EQ(parts->messages[0].content, "ab");
  }
  EXPECT_EQ(
      refusal_of(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})", true)
          .param,
      "messages");
  EXPECT_EQ(refusal_of(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]})", true).param,
            "messages");
  EXPECT_EQ(refusal_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
                          "response_format": {"type": "json_schema", "json_schema": {}}})",
                       true)
                .param,
            "response_format");
  // echo: completions only (streamed too); max_tokens 0 only with it (the prompt scored alone).
  {
    const auto echo =
        parse_api_request(R"({"model": "m", "prompt": "x", "echo": true, "max_tokens": 0, "logprobs": 1})", false, e);
    ASSERT_TRUE(echo) << e.message;
    EXPECT_TRUE(echo->echo);
    EXPECT_EQ(echo->max_tokens, 0);
    const auto streamed = parse_api_request(R"({"model": "m", "prompt": "x", "echo": true, "stream": true})", false, e);
    ASSERT_TRUE(streamed) << e.message;
    EXPECT_TRUE(streamed->echo && streamed->stream);
  }
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "max_tokens": 0})", false).param, "max_tokens");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "echo": "yes"})", false).param, "echo");
  EXPECT_EQ(refusal_of(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "echo": true})", true).param, "echo");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "suffix": "y"})", false).param, "suffix");
  const json err = ib::parse_json<json>(error_json({404, "not_found_error", "no such model", "model"}));
  EXPECT_EQ(err["error"]["code"], 404);
  EXPECT_EQ(err["error"]["param"], "model");
}

TEST(ServeApi, ResponsesAndChunksHaveOpenAisShape) {
  ApiError e;
  const ApiRequest chat = *parse_api_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", true, e);
  const json whole = ib::parse_json<json>(completion_json(chat, "chatcmpl-1", 5, "m", "hi", "stop", {3, 2}));
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"]["total_tokens"], 5);
  const std::string first = stream_chunk(chat, "chatcmpl-1", 5, "m", "", "", true);
  ASSERT_EQ(first.rfind("data: ", 0), 0u);
  ASSERT_EQ(first.substr(first.size() - 2), "\n\n");
  const json c0 = ib::parse_json<json>(first.substr(6));
  EXPECT_EQ(c0["object"], "chat.completion.chunk");
  EXPECT_EQ(c0["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(c0["choices"][0]["finish_reason"].is_null());
  const json last = ib::parse_json<json>(stream_chunk(chat, "chatcmpl-1", 5, "m", "", "length", false).substr(6));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  const ApiRequest comp = *parse_api_request(R"({"model": "m", "prompt": "x"})", false, e);
  EXPECT_EQ(ib::parse_json<json>(stream_chunk(comp, "cmpl-1", 5, "m", "ab", "", true).substr(6))["choices"][0]["text"], "ab");
  EXPECT_EQ(ib::parse_json<json>(models_json("m", 1, 2048))["data"][0]["id"], "m");
}

TEST(ServeApi, TokenizeBodiesAndModelsWithAdapters) {
  ApiError e;
  auto t = parse_tokenize_request(R"({"model": "m", "prompt": "hi"})", true, e);
  ASSERT_TRUE(t) << e.message;
  EXPECT_EQ(t->prompt, "hi");
  auto d = parse_tokenize_request(R"({"model": "m", "tokens": [3, 4]})", false, e);
  ASSERT_TRUE(d) << e.message;
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_FALSE(parse_tokenize_request(R"({"model": "m", "tokens": [-1]})", false, e));
  EXPECT_EQ(e.param, "tokens");
  EXPECT_FALSE(parse_tokenize_request(R"({"model": "m", "prompt": "x", "extra": 1})", true, e));
  EXPECT_EQ(e.param, "extra");
  const json m = ib::parse_json<json>(models_json("base", 1, 2048, {"a", "b"}));
  ASSERT_EQ(m["data"].size(), 3u);
  EXPECT_TRUE(m["data"][0]["parent"].is_null());
  EXPECT_EQ(m["data"][2]["id"], "b");
  EXPECT_EQ(m["data"][2]["parent"], "base");
}

TEST(ServeApi, StreamedTextWaitsForACutCharacter) {
  size_t sent = 0;
  EXPECT_EQ(text_delta("Hi", sent, false), "Hi");
  EXPECT_EQ(text_delta("Hi \xEF\xBF\xBD", sent, false), " ");  // the replacement may be half of "é"
  EXPECT_EQ(text_delta("Hi \xC3\xA9", sent, false), "\xC3\xA9");
  EXPECT_EQ(text_delta("Hi \xC3\xA9\xEF\xBF\xBD", sent, true), "\xEF\xBF\xBD");  // the end: as decoded
  EXPECT_EQ(sent, 8u);
}

struct LoopEngine {
  model::ModelConfig config = *model::preset("tiny");
  std::unique_ptr<model::WeightSource> weights = model::random_weights(config, 21);
  std::unique_ptr<model::Model> engine = model::make_cpu_model(config, *weights);
};

Request loop_request(int prompt, int max_tokens, uint64_t seed) {
  Request r;
  for (int i = 0; i < prompt; ++i) r.prompt.push_back(static_cast<int32_t>((seed * 31 + static_cast<uint64_t>(i) * 17) % 512));
  r.max_tokens = max_tokens;
  return r;
}

std::vector<int32_t> read_all(RequestStream& s) {
  std::vector<int32_t> out;
  while (!s.wait(out.size(), out, 5.0)) {
  }
  return out;
}

TEST(ServeEngineLoop, ThreadsRequestsAreServedAndCancelledOnesReturned) {
  LoopEngine e;
  SchedulerOptions o;
  o.max_seqs = 4;
  o.token_budget = 64;
  o.long_prefill = 16;
  EngineLoop loop(*e.engine, o);
  std::vector<std::thread> clients;
  std::vector<size_t> got(6);
  for (int i = 0; i < 6; ++i)
    clients.emplace_back([&, i] {
      auto s = loop.submit(loop_request(5 + 7 * i, 3 + i, static_cast<uint64_t>(i)));
      got[static_cast<size_t>(i)] = read_all(*s).size();
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<size_t>(3 + i));
  // The gauges (/metrics) are current when the last token is out, though the loop now sleeps.
  EXPECT_EQ(loop.counters().running, 0);
  EXPECT_EQ(loop.counters().kv_reserved, 0);
  // A long request cancelled after its first token: its stream ends with "cancelled", its
  // sequence and reservation come back.
  int64_t id = -1;
  auto s = loop.submit(loop_request(10, 400, 9), &id);
  std::vector<int32_t> first;
  s->wait(0, first, 10.0);
  loop.cancel(id);
  read_all(*s);
  EXPECT_EQ(s->error(), "cancelled");
  for (int i = 0; i < 200 && loop.counters().kv_reserved != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineCounters c = loop.counters();
  EXPECT_EQ(c.finished, 6);
  EXPECT_EQ(c.cancelled, 1);
  EXPECT_EQ(c.kv_reserved, 0);
  EXPECT_THROW(loop.submit(loop_request(e.config.max_positions, 1, 1)), InputError);
  loop.stop();
  loop.join();
  EXPECT_EQ(e.engine->kv_bytes(), 0);
  EXPECT_THROW(loop.submit(loop_request(4, 1, 1)), InputError);  // stopping: nothing new
}

TEST(ServeEngineLoop, RequestsOfDifferentAdaptersShareTheBatchAndGetTheirOwn) {
  LoopEngine e;
  const auto modules = model::parse_modules("all", "modules");
  for (uint64_t i = 0; i < 2; ++i)
    model::lora_adapters(*e.engine).add_adapter(model::random_adapter(e.config, 4, 8.0f, modules, 70 + i));
  // Each request alone, with its adapter, one after another.
  auto alone = [&](int adapter) {
    SchedulerOptions o;
    o.max_seqs = 1;
    o.token_budget = 64;
    EngineLoop loop(*e.engine, o);
    Request r = loop_request(9, 10, 5);
    r.adapter = adapter;
    return read_all(*loop.submit(std::move(r)));
  };
  const std::vector<std::vector<int32_t>> want = {alone(-1), alone(0), alone(1)};
  EXPECT_NE(want[1], want[0]);  // the adapters change the greedy output
  EXPECT_NE(want[2], want[1]);
  // The three together, in one running batch.
  SchedulerOptions o;
  o.max_seqs = 3;
  o.token_budget = 64;
  EngineLoop loop(*e.engine, o);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int a = -1; a <= 1; ++a) {
    Request r = loop_request(9, 10, 5);
    r.adapter = a;
    streams.push_back(loop.submit(std::move(r)));
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(read_all(*streams[i]), want[i]) << "adapter " << static_cast<int>(i) - 1;
}

TEST(ServeEngineLoop, ARequestsOwnSamplingDoesNotDependOnItsBatch) {
  LoopEngine e;
  SchedulerOptions o;
  o.max_seqs = 8;
  o.token_budget = 64;
  auto sampled = [](uint64_t seed) {
    Request r = loop_request(12, 12, 3);
    model::SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    r.sampling = p;
    return r;
  };
  std::vector<int32_t> alone, crowded, other_seed;
  {
    EngineLoop loop(*e.engine, o);
    alone = read_all(*loop.submit(sampled(42)));
  }
  {
    EngineLoop loop(*e.engine, o);
    std::vector<std::shared_ptr<RequestStream>> others;
    for (int i = 0; i < 5; ++i) others.push_back(loop.submit(loop_request(3 + i, 9, 50 + static_cast<uint64_t>(i))));
    crowded = read_all(*loop.submit(sampled(42)));
    other_seed = read_all(*loop.submit(sampled(43)));
    for (auto& s : others) read_all(*s);
  }
  EXPECT_EQ(crowded, alone);
  EXPECT_NE(other_seed, alone);
}

TEST(ServeApi, ResponseFormatCarriesTheSchema) {
  ApiError e;
  auto r = parse_api_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
                          "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})",
                             true, e);
  ASSERT_TRUE(r) << e.message;
  EXPECT_EQ(ib::parse_json<json>(r->response_schema)["properties"]["a"]["type"], "integer");
  r = parse_api_request(R"({"model": "m", "prompt": "x", "response_format": {"type": "json_object"}})", false, e);
  ASSERT_TRUE(r) << e.message;
  EXPECT_EQ(r->response_schema, R"({"type":"object"})");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "response_format": {"type": "yaml"}})", false).param, "response_format");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "response_format": {"type": "json_schema",
                          "json_schema": {"schema": {}, "extra": 1}}})",
                       false)
                .param,
            "response_format");
}

TEST(ServeApi, LogprobsAreTheLogSoftmaxAndTheMostLikelyTokens) {
  ApiError e;
  auto chat = parse_api_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true,
      "top_logprobs": 2})",
                                true, e);
  ASSERT_TRUE(chat) << e.message;
  EXPECT_EQ(chat->logprobs, 2);
  auto comp = parse_api_request(R"({"model": "m", "prompt": "x", "logprobs": 0})", false, e);
  ASSERT_TRUE(comp) << e.message;
  EXPECT_EQ(comp->logprobs, 0);
  // softmax([0, ln 3, 0]) = [0.2, 0.6, 0.2]: token 2's log-probability, and the top two (ties by id).
  const float logits[] = {0.0f, std::log(3.0f), 0.0f};
  const TokenLogprob t = token_logprob(logits, 3, 2, 2);
  EXPECT_EQ(t.token, 2);
  EXPECT_NEAR(t.logprob, std::log(0.2), 1e-6);
  ASSERT_EQ(t.top.size(), 2u);
  EXPECT_EQ(t.top[0].first, 1);
  EXPECT_NEAR(t.top[0].second, std::log(0.6), 1e-6);
  EXPECT_EQ(t.top[1].first, 0);
  const std::vector<TokenLogprobText> toks = {{"ab", -0.5f, {{"ab", -0.5f}, {"c", -1.0f}}}, {"d", -2.0f, {}}};
  const json c = logprobs_json(*comp, toks, 3);
  EXPECT_EQ(c["tokens"], json({"ab", "d"}));
  EXPECT_EQ(c["text_offset"], json({3, 5}));
  EXPECT_FLOAT_EQ(c["top_logprobs"][0]["c"].get<float>(), -1.0f);
  const json h = logprobs_json(*chat, toks);
  EXPECT_EQ(h["content"][0]["bytes"], json({97, 98}));
  EXPECT_EQ(h["content"][0]["top_logprobs"][1]["token"], "c");
}

TEST(ServeApi, LogitBiasAndPenaltiesAsVllmAppliesThem) {
  ApiError e;
  const auto r = parse_api_request(R"({"model": "m", "prompt": "x", "logit_bias": {"3": 5, "0": -100},
      "frequency_penalty": 0.5, "presence_penalty": 1, "repetition_penalty": 2})",
                                   false, e);
  ASSERT_TRUE(r) << e.message;
  EXPECT_EQ(r->processors.logit_bias, (std::vector<std::pair<int32_t, float>>{{0, -100.0f}, {3, 5.0f}}));
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "logit_bias": {"a": 1}})", false).param, "logit_bias");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "logit_bias": {"1": 101}})", false).param, "logit_bias");
  EXPECT_EQ(refusal_of(R"({"model": "m", "prompt": "x", "presence_penalty": 3})", false).param, "presence_penalty");
  // Token 1 in the prompt, token 2 twice in the output, token 3 biased.
  std::vector<float> l = {1.0f, 4.0f, -2.0f, 0.5f, 2.0f};
  apply_logits_processors(r->processors, {1}, {2, 2}, l.data(), 5);
  EXPECT_FLOAT_EQ(l[0], 1.0f - 100.0f);
  EXPECT_FLOAT_EQ(l[1], 4.0f / 2);                     // seen, positive: divided by the repetition penalty
  EXPECT_FLOAT_EQ(l[2], -2.0f * 2 - 0.5f * 2 - 1.0f);  // seen, negative: multiplied; then frequency · 2 and presence
  EXPECT_FLOAT_EQ(l[3], 0.5f + 5.0f);
  EXPECT_FLOAT_EQ(l[4], 2.0f);
}

TEST(ServeMetrics, HistogramsAreCumulativeInThePrometheusFormat) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  const std::string text = prometheus_histogram("vllm:x_seconds", "help", "model_name=\"m\"", h);
  EXPECT_NE(text.find("# TYPE vllm:x_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:x_seconds_bucket{model_name=\"m\",le=\"0.1\"} 2\n"), std::string::npos) << text;  // <= 0.1
  EXPECT_NE(text.find("vllm:x_seconds_bucket{model_name=\"m\",le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:x_seconds_sum{model_name=\"m\"} 3.65\n"), std::string::npos) << text;
  EXPECT_NE(text.find("vllm:x_seconds_count{model_name=\"m\"} 4\n"), std::string::npos) << text;
}

TEST(ServeApi, StopSequencesCutTheTextAndHoldBackWhatCouldStartOne) {
  ApiError e;
  auto r = parse_api_request(R"({"model": "m", "prompt": "x", "stop": "\n\n", "stop_token_ids": [7, 9]})", false, e);
  ASSERT_TRUE(r) << e.message;
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n\n"}));
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{7, 9}));
  r = parse_api_request(R"({"model": "m", "prompt": "x", "stop": ["END", "\n"], "include_stop_str_in_output": true})", false, e);
  ASSERT_TRUE(r) << e.message;
  EXPECT_TRUE(r->include_stop_str);
  const std::vector<std::string> stops = {"END", "\n"};
  EXPECT_EQ(stop_cut("ab\ncdEND", stops, false), 2u);  // the earliest, whichever it is
  EXPECT_EQ(stop_cut("abENDc\n", stops, true), 5u);
  EXPECT_FALSE(stop_cut("abEN", stops, false));
  // "abEN" may become "abEND": "EN" is held back; a cut character is not split.
  EXPECT_EQ(stop_safe_end("abEN", stops), 2u);
  EXPECT_EQ(stop_safe_end("a\xc3\xa9", {"xyz"}), 1u);
  EXPECT_EQ(stop_safe_end("abc", {}), 3u);
}

// What a hostile client sends is a 400 naming the body, and the error object is valid JSON
// whatever bytes the input held (#48: the server died building the error of a 0xFF path).
TEST(ServeApi, HostileBodiesAreRefusedAndTheirErrorsAreValidJson) {
  auto refused_json = [](const std::string& body) {
    const ApiError e = refusal_of(body, false);
    EXPECT_EQ(e.status, 400) << body.substr(0, 80);
    const std::string text = error_json(e);
    json j;
    EXPECT_NO_THROW(j = ib::parse_json<json>(text)) << text.substr(0, 200);
    return e.message;
  };
  EXPECT_NE(refused_json("{\"model\": \"m\", \"prompt\": \"a\xff\xfe b\"}").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refused_json(R"({"model": "m", "prompt": "x", "max_tokens": 1e400})").find("out of range"), std::string::npos);
  EXPECT_NE(refused_json(R"({"model": "m", "prompt": "x", "temperature": -1e400})").find("out of range"), std::string::npos);
  // A response_format schema nested 100,000 levels deep (a 1 MB body): refused before anything
  // recurses over it.
  std::string deep = R"({"model": "m", "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": )";
  for (int i = 0; i < 100000; ++i) deep += R"({"not": )";
  deep += "{}" + std::string(100000, '}') + "}}}";
  EXPECT_NE(refused_json(deep).find("nested deeper"), std::string::npos);
  // An error that quotes bytes that are not UTF-8 (a path's): replaced, not thrown.
  const std::string text = error_json({404, "not_found_error", "no route GET /\xff\xc3(", ""});
  EXPECT_EQ(ib::parse_json<json>(text)["error"]["message"], "no route GET /\xEF\xBF\xBD\xEF\xBF\xBD(");
  // A text decoded between two tokens of one character, in a response.
  ApiRequest r;
  EXPECT_TRUE(ib::json_accepts(completion_json(r, "id", 0, "m", "ab\xe2\x82", "length", {1, 1})));
}

// Our trained ib-draft-1m with its own tokenizer: a schema's documents through the scheduler.
TEST(ServeSchemaConstraint, EveryRequestWritesADocumentOfItsSchema) {
  const testing_support::TrainedModel m;
  auto engine = m.cpu_engine();
  const auto& tok = m.tok;
  const auto& vocab = m.vocab;
  const std::string schema_text = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
      "count": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}}, "required": ["name", "count", "ok"]})";
  const auto schema = ib::parse_json<constrain::SchemaValidator::json>(schema_text);
  const constrain::SchemaValidator validator(schema);
  for (const constrain::SchemaPath path : {constrain::SchemaPath::Grammar, constrain::SchemaPath::Dfa}) {
    SCOPED_TRACE(path == constrain::SchemaPath::Grammar ? "grammar" : "dfa");
    SchedulerOptions o;
    o.max_seqs = 4;
    o.token_budget = 64;
    o.long_prefill = 16;
    EngineLoop loop(*engine, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 4; ++i) {
      Request r;
      r.prompt = tok->encode(i % 2 ? "{\"name\": " : "def main():\n    x = ");
      auto sc = std::make_shared<SchemaConstraint>(schema_text, vocab, path);
      EXPECT_EQ(sc->on_grammar(), path == constrain::SchemaPath::Grammar);
      r.max_tokens = sc->min_tokens() + 6 * i;  // a tight budget too: the document still ends valid
      r.eos = vocab->eos;
      model::SamplingParams p;
      p.temperature = i == 0 ? 0.0f : 1.0f;
      p.seed = 100 + static_cast<uint64_t>(i);
      r.sampling = p;
      r.constraint = sc;
      streams.push_back(loop.submit(std::move(r)));
    }
    for (auto& s : streams) {
      std::vector<int32_t> tokens = read_all(*s);
      ASSERT_TRUE(s->stopped());  // ended at EOS or complete, not cut at max_tokens
      if (!tokens.empty() && tokens.back() == vocab->eos) tokens.pop_back();
      const std::string text = tok->decode(tokens, true);
      constrain::SchemaValidator::json doc;
      ASSERT_NO_THROW(doc = ib::parse_json<constrain::SchemaValidator::json>(text)) << text;
      EXPECT_TRUE(validator.valid(doc)) << text;
    }
  }
  EXPECT_THROW(SchemaConstraint(R"({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}, "required": ["a"]})", vocab),
               InputError);
  // The book's tool-call schema: `arguments` declares no properties, so the model's keys are
  // allowed (they were not: every answer's arguments came back {}); declared objects stay strict.
  const constrain::CompiledConstraint tool = constrain::compile_constraint(
      "tool", R"({"type": "object", "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
          "required": ["name", "arguments"]})",
      SchemaConstraint::options());
  EXPECT_TRUE(tool.dfa->matches(R"({"name":"get_weather","arguments":{"city":"Paris","days":3}})"));
  EXPECT_TRUE(tool.dfa->matches(R"({"name":"f","arguments":{}})"));
  EXPECT_FALSE(tool.dfa->matches(R"({"name":"f","arguments":{},"extra":1})"));
  EXPECT_TRUE(constrain::compile_constraint("json_object", R"({"type": "object"})", SchemaConstraint::options())
                  .dfa->matches(R"({"a":[1,"b"],"c":{"d":null}})"));
  // On the grammar path (the default) the arguments are any JSON object at any depth; the DFA cuts
  // free values off past any_depth.
  const std::string deep = R"({"name":"f","arguments":{"a":{"b":{"c":{"d":[1,{"e":null}]}}}}})";
  EXPECT_FALSE(tool.dfa->matches(deep));
  const std::string tool_schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "arguments": {"type": "object"}}, "required": ["name", "arguments"]})";
  SchemaConstraint on_grammar(tool_schema, vocab);
  ASSERT_TRUE(on_grammar.on_grammar());
  const constrain::Grammar& g = on_grammar.compiled()->masks->grammar()->grammar();
  const std::vector<int32_t> spelled = constrain::grammar_tokenize_greedy(g, *vocab, *constrain::vocab_trie(vocab), deep);
  ASSERT_FALSE(spelled.empty());
  for (bool first : {true, false}) {
    SchemaConstraint second(on_grammar.compiled());  // another choice of the request: the compile shared
    SchemaConstraint* sc = first ? &on_grammar : &second;
    std::vector<float> logits(static_cast<size_t>(vocab->size()), 0.0f);
    model::SamplingParams greedy;
    greedy.temperature = 0;
    for (size_t i = 0; i < spelled.size(); ++i) {
      logits[static_cast<size_t>(spelled[i])] = 10.0f;
      ASSERT_EQ(sc->choose(logits.data(), vocab->size(), greedy, 0.5f, 1000), spelled[i]) << "token " << i;
      logits[static_cast<size_t>(spelled[i])] = 0.0f;
      EXPECT_EQ(sc->accept(spelled[i]), i + 1 == spelled.size()) << "token " << i;
    }
  }
  // A schema past the compile budget (--schema-compile-seconds) is refused naming it.
  try {
    SchemaConstraint(R"({"type":"string","pattern":"^[ab]*a[ab]{16}$"})", vocab, constrain::SchemaPath::Grammar, 0.02);
    ADD_FAILURE() << "compiled within its budget";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("max_compile_seconds"), std::string::npos) << e.what();
  }
  // A schema no document satisfies is refused at admission (it failed its batch at its first token).
  try {
    SchemaConstraint(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", vocab);
    ADD_FAILURE() << "an empty language was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ib::serve
