// The GGUF reader against its references: ggml's block formats as gguf-py decodes them
// (tests/data/gguf/dequant.json), hostile and damaged files (one-line errors naming the key or
// tensor), ggml's q/k permutation undone (a tiny GGUF against the same model in safetensors), and
// SmolLM2-135M-Instruct against transformers' own forward of the same file (tests/data/gguf/
// smollm2.json; scripts/make-gguf-fixtures made both). The SmolLM2 tests need the model
// (scripts/get-models, part of the README's test command) and report themselves skipped without it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../common/greedy.h"
#include "core/json_input.h"

#include "core/errors.h"
#include "core/gguf_file.h"
#include "core/input_file.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "model/gguf_checkpoint.h"
#include "model/model.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ib {
namespace {

namespace fs = std::filesystem;

const std::string kSource = IB_SOURCE_DIR;
const std::string kSmolLM2 = kSource + "/data/models/smollm2-135m-instruct-q4_1.gguf";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return ib::parse_json<nlohmann::json>(in);
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(GgufDequantize, MatchesGgufPyOnEveryBlockType) {
  const auto doc = read_json(kSource + "/tests/data/gguf/dequant.json");
  int types = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string name = c.at("type");
    SCOPED_TRACE(name);
    const uint32_t t = c.at("ggml_type");
    ASSERT_EQ(gguf::tensor_type_name(t).value_or("?"), name);
    const auto type = static_cast<gguf::TensorType>(t);
    const auto raw = from_hex(c.at("hex"));
    const auto want = c.at("values").get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(raw.size()) / gguf::block_bytes(type) * gguf::block_elements(type),
              static_cast<int64_t>(want.size()));
    std::vector<float> got(want.size());
    gguf::dequantize(type, raw.data(), static_cast<int64_t>(want.size()), got.data());
    int differ = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      // ggml's float order of operations, reproduced: equal to gguf-py's numpy but for rounding
      // in its last place where numpy orders a product differently.
      const float tol = 2e-7f * std::max(1.0f, std::abs(want[i]));
      if (std::abs(got[i] - want[i]) > tol) ++differ;
      EXPECT_NEAR(got[i], want[i], tol) << "value " << i;
      if (differ > 4) break;
    }
    ++types;
  }
  EXPECT_EQ(types, 8);
}

// --- a tiny GGUF written here, and damaged on purpose ---------------------------------------

class GgufWriter {
 public:
  void u32(uint32_t v) { put(&v, 4); }
  void u64(uint64_t v) { put(&v, 8); }
  void f32(float v) { put(&v, 4); }
  void str(const std::string& s) {
    u64(s.size());
    out_ += s;
  }
  void kv_string(const std::string& k, const std::string& v) {
    str(k);
    u32(8);
    str(v);
  }
  void kv_u32(const std::string& k, uint32_t v) {
    str(k);
    u32(4);
    u32(v);
  }
  void kv_f32(const std::string& k, float v) {
    str(k);
    u32(6);
    f32(v);
  }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    str(k);
    u32(9);
    u32(8);
    u64(v.size());
    for (const auto& s : v) str(s);
  }
  void pad(size_t alignment) {
    while (out_.size() % alignment) out_.push_back('\0');
  }
  void put(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

struct TinyTensor {
  std::string name;
  std::vector<int64_t> dims;  // ggml order
  std::vector<float> values;
};

// Knobs a test turns to damage the file.
struct TinyOptions {
  std::string arch = "llama";
  uint32_t tensor_type = 0;  // F32
  bool truncate = false;
  uint64_t string_length_override = 0;
  bool drop_tensor = false;
  bool extra_tensor = false;
  int64_t wrong_rows = 0;
};

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.name = "tiny-gguf";
  c.layers = 1;
  c.hidden = 8;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 4;
  c.mlp = 16;
  c.vocab = 12;
  c.tied_embeddings = true;
  c.rope_theta = 10000.0f;
  c.rms_eps = 1e-5f;
  return c;
}

// The tensors of tiny_config() in Hugging Face names with seeded values.
std::vector<std::pair<model::TensorSpec, std::vector<float>>> tiny_tensors() {
  std::vector<std::pair<model::TensorSpec, std::vector<float>>> out;
  uint32_t x = 12345;
  for (const auto& spec : model::tensor_specs(tiny_config())) {
    std::vector<float> v(static_cast<size_t>(spec.elems()));
    for (float& f : v) {
      x = x * 1664525u + 1013904223u;
      // bf16-exact values (multiples of 1/64 below 2), so write_safetensors keeps them exactly
      f = spec.is_norm() ? 1.0f + static_cast<float>((x >> 24) % 8) / 64.0f
                         : static_cast<float>(static_cast<int>((x >> 24) % 64) - 32) / 64.0f;
    }
    out.emplace_back(spec, v);
  }
  return out;
}

// ggml's converter permutation of q/k rows (the inverse of what the reader undoes).
std::vector<float> permute_rows(const std::vector<float>& w, int64_t rows, int64_t cols, int heads) {
  std::vector<float> out(w.size());
  const int64_t d = rows / heads, half = d / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::copy_n(&w[static_cast<size_t>((h * d + j * half + i) * cols)], cols,
                    &out[static_cast<size_t>((h * d + 2 * i + j) * cols)]);
  return out;
}

std::string write_tiny_gguf(const std::string& path, const TinyOptions& o = {}) {
  const model::ModelConfig c = tiny_config();
  std::vector<TinyTensor> tensors;
  for (const auto& [spec, values] : tiny_tensors()) {
    TinyTensor t;
    t.name = model::gguf_tensor_name(spec.name);
    t.dims.assign(spec.shape.rbegin(), spec.shape.rend());
    t.values = values;
    if (spec.name.find("q_proj") != std::string::npos) t.values = permute_rows(values, spec.shape[0], spec.shape[1], c.heads);
    if (spec.name.find("k_proj") != std::string::npos) t.values = permute_rows(values, spec.shape[0], spec.shape[1], c.kv_heads);
    tensors.push_back(t);
  }
  if (o.drop_tensor) tensors.erase(tensors.begin() + 2);
  if (o.extra_tensor) tensors.push_back({"blk.0.attn_sinks.weight", {8}, std::vector<float>(8, 0.0f)});
  if (o.wrong_rows) tensors[1].dims.back() += o.wrong_rows;
  std::vector<std::string> vocab;
  for (int i = 0; i < c.vocab; ++i) vocab.push_back(std::string(1, static_cast<char>('a' + i)));

  GgufWriter w;
  w.put("GGUF", 4);
  w.u32(3);
  w.u64(tensors.size());
  w.u64(10);
  w.kv_string("general.architecture", o.arch);
  if (o.string_length_override) {
    w.str("general.name");
    w.u32(8);
    w.u64(o.string_length_override);
  } else {
    w.kv_string("general.name", "tiny");
  }
  w.kv_u32(o.arch + ".block_count", 1);
  w.kv_u32(o.arch + ".embedding_length", 8);
  w.kv_u32(o.arch + ".feed_forward_length", 16);
  w.kv_u32(o.arch + ".attention.head_count", 2);
  w.kv_u32(o.arch + ".attention.head_count_kv", 1);
  w.kv_f32(o.arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_f32(o.arch + ".rope.freq_base", 10000.0f);
  w.kv_strings("tokenizer.ggml.tokens", vocab);
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    w.str(t.name);
    w.u32(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) w.u64(static_cast<uint64_t>(d));
    w.u32(o.tensor_type);
    w.u64(offset);
    offset += (t.values.size() * 4 + 31) / 32 * 32;
  }
  w.pad(32);
  for (const auto& t : tensors) {
    w.put(t.values.data(), t.values.size() * 4);
    w.pad(32);
  }
  std::string& bytes = w.bytes();
  if (o.truncate) bytes.resize(bytes.size() - 100);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string temp_path(const std::string& name) { return (fs::temp_directory_path() / ("ib-test-gguf-" + name)).string(); }

TEST(GgufCheckpoint, TinyModelMatchesTheSameWeightsInSafetensors) {
  const std::string gguf = write_tiny_gguf(temp_path("tiny.gguf"));
  ASSERT_TRUE(model::is_gguf_checkpoint(gguf));
  const model::ModelConfig c = model::checkpoint_config(gguf);
  EXPECT_EQ(c.layers, 1);
  EXPECT_EQ(c.hidden, 8);
  EXPECT_EQ(c.heads, 2);
  EXPECT_EQ(c.kv_heads, 1);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.mlp, 16);
  EXPECT_EQ(c.vocab, 12);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.model_type, "llama");
  auto gw = model::checkpoint_weights(c, gguf);
  EXPECT_NE(gw->describe().find("F32"), std::string::npos) << gw->describe();

  // The same tensors, unpermuted, read back exactly, and the two engines agree bit for bit.
  const auto tensors = tiny_tensors();
  for (const auto& [spec, values] : tensors) {
    std::vector<float> got(values.size());
    gw->read(spec, got.data());
    EXPECT_EQ(got, values) << spec.name;
  }
  const std::string st = temp_path("tiny.safetensors");
  model::write_safetensors(st, tensors);
  // A safetensors WeightSource over that one file, with the same config.
  const fs::path dir = temp_path("tiny-dir");
  fs::create_directories(dir);
  fs::rename(st, dir / "model.safetensors");
  auto sw = model::safetensors_weights(c, dir.string());
  auto a = model::make_cpu_model(c, *gw);
  auto b = model::make_cpu_model(c, *sw);
  const std::vector<int32_t> ids = {1, 5, 3, 7, 2, 9};
  std::vector<float> la(ids.size() * 12), lb(ids.size() * 12);
  for (auto [m, out] : {std::pair{a.get(), &la}, std::pair{b.get(), &lb}}) {
    const int s = m->new_sequence(static_cast<int>(ids.size()));
    model::StepOutput o;
    o.logits = out->data();
    m->prefill(s, ids.data(), static_cast<int>(ids.size()), static_cast<int>(ids.size()), o);
  }
  EXPECT_EQ(la, lb);
  fs::remove_all(dir);
}

// A checkpoint's metadata is parsed once while the file is unchanged, and again once it changes.
TEST(GgufFile, OpenFileParsesAnUnchangedFileOnce) {
  const std::string path = write_tiny_gguf(temp_path("cached.gguf"));
  const auto a = gguf::open_file(path), b = gguf::open_file(path);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->get_string("general.architecture"), "llama");
  TinyOptions other;
  other.arch = "qwen2";  // a longer name: another size
  write_tiny_gguf(path, other);
  const auto c = gguf::open_file(path);
  EXPECT_NE(c.get(), a.get());
  EXPECT_EQ(c->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(a->get_string("general.architecture"), "llama");  // a holder keeps what it read
  TinyOptions cut;
  cut.truncate = true;
  write_tiny_gguf(path, cut);
  EXPECT_THROW(gguf::open_file(path), InputError);
  fs::remove(path);
  EXPECT_THROW(gguf::open_file(path), InputError);
}

// Damaged and hostile files: one line naming the file and what is wrong, never a crash.
void expect_refused(const std::function<void()>& f, const std::vector<std::string>& names) {
  try {
    f();
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& n : names) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

TEST(GgufCheckpoint, RefusesDamagedAndHostileFiles) {
  auto load = [](const std::string& p) {
    const auto c = model::checkpoint_config(p);
    model::checkpoint_weights(c, p);
  };
  {
    TinyOptions o;
    o.truncate = true;
    const std::string p = write_tiny_gguf(temp_path("truncated.gguf"), o);
    expect_refused([&] { load(p); }, {p, "past the end of the file"});
  }
  {
    TinyOptions o;
    o.tensor_type = 99;
    const std::string p = write_tiny_gguf(temp_path("type99.gguf"), o);
    expect_refused([&] { load(p); }, {p, "token_embd.weight", "ggml type 99"});
  }
  {
    TinyOptions o;
    o.arch = "gpt-neox";
    const std::string p = write_tiny_gguf(temp_path("arch.gguf"), o);
    expect_refused([&] { load(p); }, {p, "general.architecture", "gpt-neox"});
  }
  {
    TinyOptions o;
    o.string_length_override = uint64_t{1} << 62;
    const std::string p = write_tiny_gguf(temp_path("hugestring.gguf"), o);
    expect_refused([&] { load(p); }, {p, "general.name"});
  }
  {
    TinyOptions o;
    o.drop_tensor = true;
    const std::string p = write_tiny_gguf(temp_path("missing.gguf"), o);
    expect_refused([&] { load(p); }, {p, "is missing"});
  }
  {
    TinyOptions o;
    o.extra_tensor = true;
    const std::string p = write_tiny_gguf(temp_path("extra.gguf"), o);
    expect_refused([&] { load(p); }, {p, "does not read", "blk.0.attn_sinks.weight"});
  }
  {
    TinyOptions o;
    o.wrong_rows = 3;
    const std::string p = write_tiny_gguf(temp_path("shape.gguf"), o);
    expect_refused([&] { load(p); }, {p, "shape"});
  }
  {
    const std::string p = temp_path("notgguf.gguf");
    std::ofstream(p) << "GGUX and then some bytes that are not a GGUF header at all";
    expect_refused([&] { gguf::File f(p); }, {p, "not a GGUF file"});
  }
  // Every prefix of a valid file: refused cleanly (or, for the full file, read).
  {
    const std::string full = write_tiny_gguf(temp_path("prefix-src.gguf"));
    std::ifstream in(full, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string p = temp_path("prefix.gguf");
    for (size_t n = 0; n < bytes.size(); n += 7) {
      std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(n));
      EXPECT_THROW(gguf::File f(p), InputError) << n << " bytes";
    }
  }
}

// The pre-tokenizers that tokenizer.ggml.pre names beyond SmolLM2's, on vocabulary-only GGUFs of
// our trained BPE: every battery string as llama.cpp tokenizes it with the same file.
class GgufPreTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufPreTokenizer, MatchesLlamaCpp) {
  const std::string base = kSource + "/tests/data/gguf/vocab-" + GetParam();
  const auto golden = read_json(base + ".llamacpp.json");
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
  const auto golden = read_json(kSource + "/tests/data/gguf/smollm2.json");
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
  const auto battery = read_json(kSource + "/tests/data/gguf/smollm2.battery.json");
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
  const auto golden = read_json(kSource + "/tests/data/gguf/smollm2.json");
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
  const auto golden = read_json(kSource + "/tests/data/gguf/smollm2.json").at("perplexity");
  const model::ModelConfig c = model::checkpoint_config(kSmolLM2);
  auto w = model::checkpoint_weights(c, kSmolLM2);
  auto m = model::make_cpu_model(c, *w);
  auto tok = tokenizer::Tokenizer::load(kSmolLM2);
  std::ifstream in(kSource + "/" + golden.at("text").get<std::string>());
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
  expect_refused([] { model::ChatTemplate bad("{% for m in messages %}{{ m.role }", "", "", "bad.jinja"); },
                 {"bad.jinja", "does not parse"});
  const model::ChatTemplate raises("{% if messages[0].role != 'system' %}{{ raise_exception('a system turn first') }}{% endif %}",
                                   "", "", "strict.jinja");
  expect_refused([&] { raises.render({{"user", "x"}}, true); }, {"strict.jinja", "a system turn first"});
}

// A template with tools (ours, in the hermes format) renders conversations with tools, an
// assistant's tool calls and the tools' results as transformers' renderer did
// (scripts/make-chat-fixtures): the messages' other fields and the tools reach the template with
// their keys in the client's order, and its `tojson` writes them as Python's json.dumps.
TEST(ChatTemplate, ToolsAndToolCallsRenderAsTransformersDoes) {
  std::ifstream in(kSource + "/tests/data/chat/hermes-tools.golden.json");
  const auto golden = ib::parse_json<nlohmann::ordered_json>(in);
  const model::ChatTemplate t(read_input_file(kSource + "/tests/data/chat/hermes-tools.jinja", 1 << 20), "", "",
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
  const auto golden = read_json(kSource + "/tests/data/gguf/smollm2.json");
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
