// SmolLM2-135M-Instruct's GGUF against transformers' own forward of the same file and llama.cpp
// (tests/data/gguf/smollm2.json; scripts/make-gguf-fixtures made it): config, tokenizer, logits,
// int8 activations, perplexity, chat template. The pre-tokenizers that tokenizer.ggml.pre names
// against llama.cpp, and chat templates against Jinja and transformers. The SmolLM2 tests need the
// model (scripts/get-models, part of the README's test command) and report themselves skipped
// without it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/greedy.h"
#include "../common/input_error.h"
#include "core/errors.h"
#include "core/gguf_file.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "model/engine_studies.h"
#include "model/gguf_checkpoint.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

const std::string kRepo = IB_SOURCE_DIR;
const std::string kSmolLM2 = kRepo + "/data/models/smollm2-135m-instruct-q4_1.gguf";

nlohmann::json golden_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return ib::parse_json<nlohmann::json>(in);
}

// The pre-tokenizers that tokenizer.ggml.pre names beyond SmolLM2's, on vocabulary-only GGUFs of
// our trained BPE: every battery string as llama.cpp tokenizes it with the same file.
class GgufPreTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufPreTokenizer, MatchesLlamaCpp) {
  const std::string base = kRepo + "/tests/data/gguf/vocab-" + GetParam();
  const auto golden = golden_json(base + ".llamacpp.json");
  auto t = tokenizer::Tokenizer::load(base + ".gguf");
  size_t checked = 0, matched = 0;
  for (const auto& c : golden.at("cases")) {
    if (c.at("ids").is_null()) continue;
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto ids = t->encode(c.at("text").get<std::string>(), false);
    EXPECT_EQ(ids, want) << c.at("text").dump();
    ++checked;
    matched += ids == want;
  }
  EXPECT_GE(checked, 120u);
  std::printf("[ battery  ] GGUF pre %s: %zu of %zu cases match llama.cpp %s\n", GetParam().c_str(), matched, checked,
              golden.at("llama_cpp").get<std::string>().c_str());
}

INSTANTIATE_TEST_SUITE_P(Names, GgufPreTokenizer, ::testing::Values("llama-bpe", "qwen2"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// --- SmolLM2-135M-Instruct against transformers -----------------------------------------

// log Σ exp(row[v]) in double, shifted by the row's maximum.
double log_sum_exp(const float* row, int n) {
  double mx = row[0];
  for (int v = 1; v < n; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int v = 0; v < n; ++v) sum += std::exp(row[v] - mx);
  return mx + std::log(sum);
}

#define IB_NEED_SMOLLM2() \
  if (!fs::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " is not here (scripts/get-models)"

TEST(GgufSmolLM2, ConfigIsTheModelsOwn) {
  IB_NEED_SMOLLM2();
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.layers, 30);
  EXPECT_EQ(c.hidden, 576);
  EXPECT_EQ(c.heads, 9);
  EXPECT_EQ(c.kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.mlp, 1536);
  EXPECT_EQ(c.vocab, 49152);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.max_positions, 8192);
  EXPECT_TRUE(c.tied_embeddings);
  // The end of a chat turn, as the GGUF (and the checkpoint's config files) say: <|im_end|>.
  const auto golden = golden_json(kRepo + "/tests/data/gguf/smollm2.json");
  EXPECT_EQ(c.eos_ids, std::vector<int32_t>{golden.at("eos_token_id").get<int32_t>()});
  auto tok = tokenizer::Tokenizer::load(kSmolLM2);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->id_to_token(2).value_or(""), "<|im_end|>");
}

// Both references on the battery: llama.cpp (which runs the pre-tokenizer tokenizer.ggml.pre
// names) on every case it can take, and transformers wherever the two agree. Where they disagree
// (transformers' converter drops the "smollm" digit splitting), ours must side with llama.cpp.
TEST(GgufSmolLM2, TokenizerMatchesLlamaCppAndTransformersOnTheBattery) {
  IB_NEED_SMOLLM2();
  const auto battery = golden_json(kRepo + "/tests/data/gguf/smollm2.battery.json");
  auto t = tokenizer::Tokenizer::load(kSmolLM2);
  size_t matched_hf = 0, matched_llama = 0, with_llama = 0, references_differ = 0;
  const auto& cases = battery.at("cases");
  ASSERT_GE(cases.size(), 100u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string text = c.at("text");
    const auto hf = c.at("ids").get<std::vector<int32_t>>();
    const auto ids = t->encode(text, false);
    const bool have_llama = !c.at("ids_llamacpp").is_null();
    const auto llama = have_llama ? c.at("ids_llamacpp").get<std::vector<int32_t>>() : hf;
    with_llama += have_llama;
    references_differ += llama != hf;
    if (have_llama) {
      EXPECT_EQ(ids, llama) << "llama.cpp, case " << i << ": " << c.at("text").dump();
    }
    if (llama == hf) {
      EXPECT_EQ(ids, hf) << "transformers, case " << i << ": " << c.at("text").dump();
    }
    matched_hf += ids == hf;
    matched_llama += have_llama && ids == llama;
    const std::string decoded = t->decode(c.at("ids_special").get<std::vector<int32_t>>(), false);
    EXPECT_EQ(decoded, c.at("decoded").get<std::string>()) << "case " << i;
  }
  EXPECT_LE(references_differ, 2u) << "the references disagree on more cases than the known digit splitting";
  std::printf(
      "[ battery  ] smollm2 (GGUF): %zu of %zu cases match llama.cpp, %zu of %zu transformers (%s; the two differ on %zu)\n",
      matched_llama, with_llama, matched_hf, cases.size(), battery.value("source", std::string("?")).c_str(), references_differ);
}

TEST(GgufSmolLM2, LogitsAndGreedyTokensMatchTransformers) {
  IB_NEED_SMOLLM2();
  const auto golden = golden_json(kRepo + "/tests/data/gguf/smollm2.json");
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  auto m = model::make_cpu_model(c, *w);
  auto tok = tokenizer::Tokenizer::load(kSmolLM2);
  const int V = c.vocab;
  double worst = 0;
  for (const auto& p : golden.at("prompts")) {
    const std::string text = p.at("text");
    SCOPED_TRACE(text);
    const auto ids = p.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, false), ids);
    const int n = static_cast<int>(ids.size());
    std::vector<float> out(static_cast<size_t>(n) * V);
    const int s = m->new_sequence(n + 40);
    model::StepOutput o;
    o.logits = out.data();
    m->prefill(s, ids.data(), n, n, o);
    const auto& rows = p.at("positions");
    ASSERT_EQ(static_cast<int>(rows.size()), n);
    for (int i = 0; i < n; ++i) {
      const float* row = &out[static_cast<size_t>(i) * V];
      const auto& r = rows[static_cast<size_t>(i)];
      const auto top = r.at("top_ids").get<std::vector<int32_t>>();
      const auto want = r.at("top_logits").get<std::vector<double>>();
      // Relative to the row's largest logit: transformers' float32 forward and ours differ in
      // summation order only.
      const double scale = std::max(1.0, std::abs(want[0]));
      for (size_t k = 0; k < top.size(); ++k) worst = std::max(worst, std::abs(row[top[k]] - want[k]) / scale);
      worst = std::max(worst, std::abs(log_sum_exp(row, V) - r.at("logsumexp").get<double>()) / scale);
    }
    // transformers' greedy continuation, token for token.
    const auto want_greedy = p.at("greedy").get<std::vector<int32_t>>();
    m->release(s);
    EXPECT_EQ(testing_support::greedy_continuation(*m, ids, want_greedy.size()), want_greedy);
  }
  EXPECT_LE(worst, 1e-4) << "logits, relative to the row's largest";
  RecordProperty("smollm2_logits_rel", std::to_string(worst));
  std::printf("[ parity   ] SmolLM2-135M GGUF vs transformers %s: worst logit error %.2e of the row's largest\n",
              golden.value("transformers", std::string("?")).c_str(), worst);
}

// The decode GEMV streams the file's Q4_1 projections and Q8_0 embedding as stored (packed into
// panels, not dequantized): the logits of prefills of a few rows and of batched decode steps are
// the float32 reference engine's on the dequantized weights, bit for bit, and a step streams the
// file's tensor bytes (a quarter of float32's).
TEST(GgufSmolLM2, DecodeStreamsTheFilesBlocksAndGivesTheReferenceLogitsBitForBit) {
  IB_NEED_SMOLLM2();
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  size_t blocks = 0;
  for (const auto& spec : model::tensor_specs(c)) blocks += w->block_rows(spec).has_value();
  EXPECT_EQ(blocks, 7u * 30 + 1) << "every projection (Q4_1) and the embedding (Q8_0)";
  auto ref = model::make_cpu_model(c, *w, model::CpuMatmul::Reference);
  auto packed = model::make_cpu_model(c, *w, model::CpuMatmul::Packed);
  uint64_t file_tensor_bytes = 0;
  const auto file = gguf::open_file(kSmolLM2);
  for (const auto& t : file->tensors()) file_tensor_bytes += t.bytes;
  EXPECT_EQ(packed->streamed_weight_bytes(1), static_cast<int64_t>(file_tensor_bytes));
  EXPECT_GT(ref->streamed_weight_bytes(1), 5 * packed->streamed_weight_bytes(1));
  const size_t V = static_cast<size_t>(c.vocab);
  const std::vector<int32_t> a = {1, 504, 3458, 282, 2399, 30, 216}, b = {28, 9, 4, 1100};
  std::vector<float> want(a.size() * V), got(want.size());
  for (auto [m, out] : {std::pair{ref.get(), &want}, std::pair{packed.get(), &got}}) {
    ASSERT_EQ(m->new_sequence(32), 0);
    ASSERT_EQ(m->new_sequence(32), 1);
    m->prefill(0, a.data(), static_cast<int>(a.size()), static_cast<int>(a.size()), {out->data()});
  }
  ASSERT_EQ(got, want) << "prefill of 7 rows";
  want.assign(2 * V, -1.0f);
  got.assign(2 * V, -2.0f);
  for (auto [m, out] : {std::pair{ref.get(), &want}, std::pair{packed.get(), &got}}) {
    m->prefill(1, b.data(), static_cast<int>(b.size()), 1, {out->data()});
    const int seqs[2] = {0, 1};
    const int32_t next[2] = {42, 77};
    m->decode(seqs, next, 2, {out->data()});
  }
  ASSERT_EQ(got, want) << "batched decode step";
}

// CpuMatmul::Int8 multiplies the same blocks with activations quantized to int8 (llama.cpp's
// arithmetic): the same bytes streamed, logits within the quantization error of the float32
// reference's (relative L2; 3.4e-2 measured here, through 30 layers; a wrong layout or scale gives ~1), and the top token of each
// row the reference's where the reference's margin is not a near-tie.
TEST(GgufSmolLM2, Int8ActivationsStayWithinTheirQuantizationErrorOfTheReference) {
  IB_NEED_SMOLLM2();
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  auto ref = model::make_cpu_model(c, *w, model::CpuMatmul::Reference);
  auto int8 = model::make_cpu_model(c, *w, model::CpuMatmul::Int8);
  uint64_t file_tensor_bytes = 0;
  for (const auto& t : gguf::open_file(kSmolLM2)->tensors()) file_tensor_bytes += t.bytes;
  EXPECT_EQ(int8->streamed_weight_bytes(1), static_cast<int64_t>(file_tensor_bytes)) << "the same bytes as the exact layout";
  // Every product has int8 panels, which take any row count: no float32 matrix is kept (the
  // reference's 540 MB of them), only the embedding rows, the norms and the panels; and so an
  // adapter cannot be merged (one served per request still can).
  EXPECT_LT(int8->weight_bytes(), ref->weight_bytes() / 3) << int8->weight_bytes() << " of " << ref->weight_bytes();
  const int adapter = model::lora_adapters(*int8).add_adapter(model::random_adapter(c, 4, 8, {model::LoraModule::Q}, 3));
  EXPECT_THROW(model::lora_adapters(*int8).merge_adapter(adapter), InputError);
  const size_t V = static_cast<size_t>(c.vocab);
  const std::vector<int32_t> a = {1, 504, 3458, 282, 2399, 30, 216, 28, 9, 4, 1100};
  std::vector<float> want(a.size() * V), got(want.size());
  for (auto [m, out] : {std::pair{ref.get(), &want}, std::pair{int8.get(), &got}}) {
    ASSERT_EQ(m->new_sequence(32), 0);
    m->prefill(0, a.data(), static_cast<int>(a.size()), static_cast<int>(a.size()), {out->data()});
    const int32_t next = 42;
    const int seq = 0;
    std::vector<float> step(V);
    m->decode(&seq, &next, 1, {step.data()});
    out->insert(out->end(), step.begin(), step.end());
  }
  double err2 = 0, norm2 = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    err2 += (got[e] - want[e]) * static_cast<double>(got[e] - want[e]);
    norm2 += want[e] * static_cast<double>(want[e]);
  }
  const double rel = std::sqrt(err2 / norm2);
  EXPECT_LT(rel, 6e-2);
  EXPECT_GT(rel, 0.0) << "int8 activations are not the float product";
  int agree = 0, rows = static_cast<int>(a.size()) + 1;
  for (int r = 0; r < rows; ++r) {
    const float* wr = &want[static_cast<size_t>(r) * V];
    const float* gr = &got[static_cast<size_t>(r) * V];
    const size_t top = static_cast<size_t>(std::max_element(wr, wr + V) - wr);
    const size_t ours = static_cast<size_t>(std::max_element(gr, gr + V) - gr);
    agree += top == ours;
    EXPECT_LE(wr[top] - wr[ours], 0.5f) << "row " << r << ": our top token is not a near-tie of the reference's";
  }
  std::printf(
      "[ int8     ] SmolLM2-135M Q4_1 on int8 activations: logits rel_l2 %.2e from the float32 reference, top token equal "
      "on %d of %d rows\n",
      rel, agree, rows);
}

// With int8 activations every product is the same for a row in any pass: int8 panels take any
// row count (no float SGEMM past 32 rows) and attention is one order per query (attend_queries).
// So a prompt's logits are the same bits prefilled in one pass of 45 rows, in chunks of 7 and 38
// beside another sequence's rows, and token by token in decode steps batched with it — a
// request's tokens do not depend on what shares its passes.
TEST(GgufSmolLM2, Int8RowsGiveTheSameBitsInAnyPass) {
  IB_NEED_SMOLLM2();
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  auto m = model::make_cpu_model(c, *w, model::CpuMatmul::Int8);
  const size_t V = static_cast<size_t>(c.vocab);
  std::vector<int32_t> a;
  for (int i = 0; i < 45; ++i) a.push_back(static_cast<int32_t>((i * 7919 + 13) % 49000 + 2));
  const std::vector<int32_t> b = {1, 504, 3458, 282, 2399, 30, 216, 28, 9};
  const int n = static_cast<int>(a.size());
  // One pass.
  std::vector<float> whole(a.size() * V);
  const int s0 = m->new_sequence(64);
  m->prefill(s0, a.data(), n, n, {whole.data()});
  // Chunks of 7 and 38 rows, each in one pass with rows of sequence sb.
  const int s1 = m->new_sequence(64), sb = m->new_sequence(64);
  std::vector<float> chunked;
  int done = 0, b_done = 0;
  for (int chunk : {7, 38}) {
    const int seqs[2] = {sb, s1};
    const int b_rows = chunk == 7 ? 5 : 4;
    const int counts[2] = {b_rows, chunk};
    std::vector<int32_t> tokens(b.begin() + b_done, b.begin() + b_done + b_rows);
    tokens.insert(tokens.end(), a.begin() + done, a.begin() + done + chunk);
    std::vector<float> rows(static_cast<size_t>(b_rows + chunk) * V);
    m->prefill_batch(seqs, counts, 2, tokens.data(), {rows.data()});
    chunked.insert(chunked.end(), rows.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(b_rows) * V), rows.end());
    done += chunk;
    b_done += b_rows;
  }
  // Token by token: the first row prefilled alone, then decode steps of two rows (sb continues).
  const int s2 = m->new_sequence(64), sc = m->new_sequence(64);
  std::vector<float> stepped(V);
  m->prefill(s2, a.data(), 1, 1, {stepped.data()});
  m->prefill(sc, b.data(), 3, 1, {});
  for (int i = 1; i < n; ++i) {
    const int seqs[2] = {sc, s2};
    const int32_t next[2] = {static_cast<int32_t>(100 + i), a[static_cast<size_t>(i)]};
    std::vector<float> rows(2 * V);
    m->decode(seqs, next, 2, {rows.data()});
    stepped.insert(stepped.end(), rows.begin() + static_cast<std::ptrdiff_t>(V), rows.end());
  }
  ASSERT_EQ(chunked.size(), whole.size());
  ASSERT_EQ(stepped.size(), whole.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(0, std::memcmp(&whole[r * V], &chunked[r * V], V * sizeof(float))) << "row " << r << ": one pass vs chunks";
    ASSERT_EQ(0, std::memcmp(&whole[r * V], &stepped[r * V], V * sizeof(float))) << "row " << r << ": one pass vs decode steps";
  }
}

// Perplexity as llama-perplexity computes it (chunks of n_ctx tokens, no BOS for this vocabulary,
// the second half of each chunk scored), within 1% of llama.cpp's on the same file and text:
// llama.cpp multiplies Q4_1 weights with 8-bit-quantized activations, we with the dequantized
// weights in float32.
TEST(GgufSmolLM2, PerplexityWithinOnePercentOfLlamaCpp) {
  IB_NEED_SMOLLM2();
  const auto golden = golden_json(kRepo + "/tests/data/gguf/smollm2.json").at("perplexity");
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  auto m = model::make_cpu_model(c, *w);
  auto tok = tokenizer::Tokenizer::load(kSmolLM2);
  std::ifstream in(kRepo + "/" + golden.at("text").get<std::string>());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto ids = tok->encode(text, true);
  const int n_ctx = golden.at("n_ctx"), chunks = golden.at("chunks"), first = n_ctx / 2, V = c.vocab;
  ASSERT_GE(static_cast<int>(ids.size()), n_ctx * chunks);
  const auto running = golden.at("running_ppl").get<std::vector<double>>();
  ASSERT_EQ(static_cast<int>(running.size()), chunks);
  double nll = 0;
  int64_t count = 0;
  std::vector<float> logits(static_cast<size_t>(n_ctx - first) * V);
  for (int k = 0; k < chunks; ++k) {
    const int32_t* chunk = ids.data() + static_cast<ptrdiff_t>(k) * n_ctx;
    const int s = m->new_sequence(n_ctx);
    model::StepOutput o;
    o.logits = logits.data();
    m->prefill(s, chunk, n_ctx, n_ctx - first, o);
    m->release(s);
    for (int r = 0; r + first + 1 < n_ctx; ++r) {
      const float* row = &logits[static_cast<size_t>(r) * V];
      nll += log_sum_exp(row, V) - row[chunk[first + r + 1]];
      ++count;
    }
    const double ppl = std::exp(nll / static_cast<double>(count));
    EXPECT_NEAR(ppl, running[static_cast<size_t>(k)], 0.01 * running[static_cast<size_t>(k)]) << "after chunk " << k + 1;
  }
  const double ppl = std::exp(nll / static_cast<double>(count)), want = golden.at("ppl");
  EXPECT_NEAR(ppl, want, 0.01 * want);
  std::printf("[ ppl      ] SmolLM2-135M Q4_1 on %s, %d chunks of %d: %.4f here, %.4f llama.cpp %s (%+.2f%%)\n",
              golden.at("text").get<std::string>().c_str(), chunks, n_ctx, ppl, want,
              golden.at("llama_cpp").get<std::string>().c_str(), 100.0 * (ppl / want - 1.0));
}

TEST(ChatTemplate, RendersAndRefusesAsJinjaDoes) {
  const model::ChatTemplate t(
      "{% for m in messages %}<{{ m['role'] }}>{{ m.content | trim }}</{{ m.role }}>\n{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "<s>", "</s>", "test template");
  EXPECT_EQ(t.render({{"user", " hi "}, {"assistant", "hello"}}, true),
            "<user>hi</user>\n<assistant>hello</assistant>\n<assistant>");
  EXPECT_EQ(t.render({{"user", "x"}}, false), "<user>x</user>\n");
  testing_support::expect_input_error([] { model::ChatTemplate bad("{% for m in messages %}{{ m.role }", "", "", "bad.jinja"); },
                                      {"bad.jinja", "does not parse"});
  const model::ChatTemplate raises("{% if messages[0].role != 'system' %}{{ raise_exception('a system turn first') }}{% endif %}",
                                   "", "", "strict.jinja");
  testing_support::expect_input_error([&] { raises.render({{"user", "x"}}, true); }, {"strict.jinja", "a system turn first"});
}

// A template with tools (ours, in the hermes format) renders conversations with tools, an
// assistant's tool calls and the tools' results as transformers' renderer did
// (scripts/make-chat-fixtures): the messages' other fields and the tools reach the template with
// their keys in the client's order, and its `tojson` writes them as Python's json.dumps.
TEST(ChatTemplate, ToolsAndToolCallsRenderAsTransformersDoes) {
  std::ifstream in(kRepo + "/tests/data/chat/hermes-tools.golden.json");
  const auto golden = ib::parse_json<nlohmann::ordered_json>(in);
  const model::ChatTemplate t(read_input_file(kRepo + "/tests/data/chat/hermes-tools.jinja", 1 << 20), "", "",
                              "hermes-tools.jinja");
  int cases = 0;
  for (const auto& c : golden.at("cases")) {
    std::vector<model::ChatTurn> turns;
    for (const auto& m : c.at("messages")) {
      nlohmann::ordered_json fields = m;
      fields.erase("role");
      fields.erase("content");
      turns.push_back({m.at("role"), m.at("content"), fields.empty() ? "" : fields.dump()});
    }
    const std::string tools = c.at("tools").is_null() ? "" : c.at("tools").dump();
    EXPECT_EQ(t.render(turns, c.at("add_generation_prompt").get<bool>(), tools), c.at("rendered").get<std::string>())
        << "case " << cases;
    ++cases;
  }
  EXPECT_EQ(cases, 3);
}

// SmolLM2's own template (from the GGUF) renders each chat as transformers' apply_chat_template
// did, and the engine's greedy answer stops where transformers' generate() stopped: at <|im_end|>.
TEST(GgufSmolLM2, ChatTemplateAndEndOfTurnMatchTransformers) {
  IB_NEED_SMOLLM2();
  const auto golden = golden_json(kRepo + "/tests/data/gguf/smollm2.json");
  const auto tmpl = model::checkpoint_chat_template(kSmolLM2);
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(tmpl->source(), golden.at("chat_template").get<std::string>());
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  auto m = model::make_cpu_model(c, *w);
  auto tok = tokenizer::Tokenizer::load(kSmolLM2);
  for (const auto& chat : golden.at("chats")) {
    std::vector<model::ChatTurn> turns;
    for (const auto& msg : chat.at("messages")) turns.push_back({msg.at("role"), msg.at("content")});
    const std::string text = tmpl->render(turns, true);
    EXPECT_EQ(text, chat.at("rendered").get<std::string>());
    const auto ids = tok->encode(text, false);
    EXPECT_EQ(ids, chat.at("ids").get<std::vector<int32_t>>());
    const auto want = chat.at("generated").get<std::vector<int32_t>>();
    const auto got = testing_support::greedy_continuation(*m, ids, 64, c.eos_ids);
    EXPECT_EQ(got, want);
    EXPECT_EQ(tok->decode(got, true), chat.at("text").get<std::string>());
  }
}

}  // namespace
}  // namespace ib
