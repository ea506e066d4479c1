// The GGUF reader against its references: ggml's block formats as gguf-py decodes them
// (tests/data/gguf/dequant.json), hostile and damaged files (one-line errors naming the key or
// tensor), ggml's q/k permutation undone (a tiny GGUF against the same model in safetensors).
// SmolLM2-135M-Instruct's GGUF, pre-tokenizers and chat templates: test_gguf_smollm2.cpp.
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
#include "../common/input_error.h"
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

TEST(GgufCheckpoint, RefusesDamagedAndHostileFiles) {
  auto load = [](const std::string& p) {
    const auto c = model::checkpoint_config(p);
    model::checkpoint_weights(c, p);
  };
  {
    TinyOptions o;
    o.truncate = true;
    const std::string p = write_tiny_gguf(temp_path("truncated.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "past the end of the file"});
  }
  {
    TinyOptions o;
    o.tensor_type = 99;
    const std::string p = write_tiny_gguf(temp_path("type99.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "token_embd.weight", "ggml type 99"});
  }
  {
    TinyOptions o;
    o.arch = "gpt-neox";
    const std::string p = write_tiny_gguf(temp_path("arch.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "general.architecture", "gpt-neox"});
  }
  {
    TinyOptions o;
    o.string_length_override = uint64_t{1} << 62;
    const std::string p = write_tiny_gguf(temp_path("hugestring.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "general.name"});
  }
  {
    TinyOptions o;
    o.drop_tensor = true;
    const std::string p = write_tiny_gguf(temp_path("missing.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "is missing"});
  }
  {
    TinyOptions o;
    o.extra_tensor = true;
    const std::string p = write_tiny_gguf(temp_path("extra.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "does not read", "blk.0.attn_sinks.weight"});
  }
  {
    TinyOptions o;
    o.wrong_rows = 3;
    const std::string p = write_tiny_gguf(temp_path("shape.gguf"), o);
    testing_support::expect_input_error([&] { load(p); }, {p, "shape"});
  }
  {
    const std::string p = temp_path("notgguf.gguf");
    std::ofstream(p) << "GGUX and then some bytes that are not a GGUF header at all";
    testing_support::expect_input_error([&] { gguf::File f(p); }, {p, "not a GGUF file"});
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

}  // namespace
}  // namespace ib
