#include "constrain/vocab.h"
#include "core/data_dir.h"
#include "core/errors.h"
#include "core/gguf_file.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "model/checkpoint.h"
#include "tokenizer/gguf_vocab.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

#include <nlohmann/json.hpp>

// The GPT-2 vocabulary, compiled in (vocab_embed.S) so the default needs no data folder.
extern "C" const unsigned char ib_gpt2_tokenizer_gz[];
extern "C" const unsigned char ib_gpt2_tokenizer_gz_end[];

namespace ib::constrain {

namespace {

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n && i + static_cast<size_t>(k) < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

// GPT-2's byte <-> printable-character table: bytes 33-126, 161-172 and 174-255 stand for
// themselves; the other 68 bytes map to 256, 257, ... in byte order.
std::map<uint32_t, uint8_t> byte_level_decoder() {
  std::map<uint32_t, uint8_t> m;
  uint32_t extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    m[printable ? static_cast<uint32_t>(b) : 256 + extra++] = static_cast<uint8_t>(b);
  }
  return m;
}

// Whether a component of this type appears in the tree, looked for down to 64 levels (real
// tokenizers nest a Sequence or two; the bound keeps a hostile file from overflowing the stack).
bool uses(const nlohmann::json& node, const std::string& type, int depth = 0) {
  if (depth > 64) return false;
  if (node.is_object()) {
    if (node.value("type", std::string()) == type) return true;
    for (const auto& [k, v] : node.items())
      if (uses(v, type, depth + 1)) return true;
  } else if (node.is_array()) {
    for (const auto& v : node)
      if (uses(v, type, depth + 1)) return true;
  }
  return false;
}

// tokenizer.json files of released models are at most a few tens of MiB.
constexpr uint64_t kMaxTokenizerBytes = uint64_t{64} << 20;

}  // namespace

Vocabulary parse_tokenizer_json(const std::string& text, const std::string& name) {
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, name);
  } catch (const std::exception& e) {
    throw InputError(name + ": not JSON: " + e.what());
  }
  if (!j.contains("model") || !j["model"].contains("vocab") || !j["model"]["vocab"].is_object())
    throw InputError(name + ": no model.vocab (not a tokenizer.json?)");
  // By reference: value() would copy the subtree.
  const nlohmann::json none;
  const nlohmann::json& decoder = j.contains("decoder") ? j["decoder"] : none;
  const nlohmann::json& pre_tokenizer = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : none;
  const bool byte_level = uses(decoder, "ByteLevel") || uses(pre_tokenizer, "ByteLevel");
  const nlohmann::json& fallback = j["model"].contains("byte_fallback") ? j["model"]["byte_fallback"] : none;
  if (!fallback.is_null() && !fallback.is_boolean()) throw InputError(name + ": /model/byte_fallback: not true or false");
  const bool byte_fallback = fallback.is_boolean() && fallback.get<bool>() ? true : uses(decoder, "ByteFallback");
  Vocabulary v;
  v.name = name;
  // Every id and size read from the file is checked before it sizes or indexes anything.
  constexpr int64_t kMaxId = (int64_t{1} << 24) - 1;
  constexpr size_t kMaxTokenBytes = 65535;  // the token index stores trie depths in 16 bits
  auto checked_id = [&](const nlohmann::json& id, const std::string& where) {
    if (!id.is_number_integer()) throw InputError(name + ": " + where + ": the id is not an integer");
    const int64_t value = id.get<int64_t>();
    if (value < 0 || value > kMaxId)
      throw InputError(name + ": " + where + ": id " + std::to_string(value) + " is outside 0 .. 2^24 - 1");
    return value;
  };
  int64_t max_id = -1;
  for (const auto& [tok, id] : j["model"]["vocab"].items()) {
    max_id = std::max<int64_t>(max_id, checked_id(id, "/model/vocab/" + tok.substr(0, 40)));
    if (tok.size() > kMaxTokenBytes)
      throw InputError(name + ": /model/vocab: a token of " + std::to_string(tok.size()) + " bytes (at most " +
                       std::to_string(kMaxTokenBytes) + ")");
  }
  std::map<std::string, bool> added;  // content -> special
  const nlohmann::json added_tokens = j.value("added_tokens", nlohmann::json::array());
  if (!added_tokens.is_array()) throw InputError(name + ": /added_tokens: not a list");
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const auto& a = added_tokens[i];
    const std::string where = "/added_tokens/" + std::to_string(i);
    if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string())
      throw InputError(name + ": " + where + ": needs an integer id and a string content");
    max_id = std::max<int64_t>(max_id, checked_id(a["id"], where + "/id"));
    if (a.contains("special") && !a["special"].is_boolean())
      throw InputError(name + ": " + where + "/special: not true or false");
    added[a["content"].get<std::string>()] = a.value("special", true);
  }
  v.token_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
  v.special.assign(static_cast<size_t>(max_id + 1), 1);  // ids without an entry are never produced
  static const std::map<uint32_t, uint8_t> table = byte_level_decoder();
  for (const auto& [tok, idj] : j["model"]["vocab"].items()) {
    const size_t id = static_cast<size_t>(idj.get<int64_t>());
    if (added.count(tok) && added[tok]) continue;  // special: stays special
    std::string bytes;
    if (byte_level) {
      bool ok = true;
      for (uint32_t cp : code_points(tok)) {
        auto it = table.find(cp);
        if (it == table.end()) {
          ok = false;
          break;
        }
        bytes += static_cast<char>(it->second);
      }
      if (!ok) throw InputError(name + ": token '" + tok + "' is not byte-level encoded");
    } else {
      if (byte_fallback && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(tok[3])) && std::isxdigit(static_cast<unsigned char>(tok[4]))) {
        bytes += static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16));
      } else {
        for (uint32_t cp : code_points(tok)) {
          if (cp == 0x2581)
            bytes += ' ';  // SentencePiece's word-boundary marker
          else
            append_utf8(cp, &bytes);
        }
      }
    }
    v.token_bytes[id] = bytes;
    v.special[id] = bytes.empty() ? 1 : 0;
    v.max_token_bytes = std::max(v.max_token_bytes, bytes.size());
  }
  for (const auto& a : added_tokens) {
    const std::string content = a["content"].get<std::string>();
    static const char* eos_names[] = {"<|endoftext|>",
                                      "</s>",
                                      "<|end_of_text|>",
                                      "<|eot_id|>",
                                      "<|im_end|>",
                                      "<\xef\xbd\x9c"
                                      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"};
    for (const char* e : eos_names)
      if (content == e && v.eos < 0) v.eos = static_cast<int32_t>(a["id"].get<int64_t>());
  }
  return v;
}

std::shared_ptr<const Vocabulary> load_vocabulary(const std::string& what) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Vocabulary>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(what); it != cache.end()) return it->second;
  std::string text;
  int32_t checkpoint_eos = -1;  // the checkpoint's own end of sequence (GGUF or HF config), when it names one
  if (what == "gpt2") {
    text = maybe_gunzip(std::string(reinterpret_cast<const char*>(ib_gpt2_tokenizer_gz),
                                    static_cast<size_t>(ib_gpt2_tokenizer_gz_end - ib_gpt2_tokenizer_gz)),
                        kMaxTokenizerBytes, "gpt2 (compiled in)");
  } else {
    std::string path = what;
    if (what == "llama2" || what == "deepseek-llm") path = data_directory() + "/tokenizers/" + what + ".tokenizer.json.gz";
    path = data_path(path);
    std::error_code ec;
    // A Hugging Face checkpoint directory, or the tokenizer.json inside one: its config names the
    // end of sequence (generation_config.json's first eos_token_id), not a guess by token name.
    namespace fs = std::filesystem;
    if (fs::is_directory(path, ec)) path = (fs::path(path) / "tokenizer.json").string();
    const fs::path dir = fs::path(path).parent_path();
    if (fs::path(path).filename() == "tokenizer.json" && fs::is_regular_file(dir / "config.json", ec)) {
      try {
        const std::vector<int32_t> eos = model::checkpoint_config(dir.empty() ? "." : dir.string()).eos_ids;
        if (!eos.empty()) checkpoint_eos = eos.front();
      } catch (const std::exception&) {
        // A config.json we do not read as a model (another architecture): the name guess stands.
      }
    }
    if (std::filesystem::is_regular_file(path, ec) && gguf::is_gguf(path)) {  // a GGUF checkpoint's tokenizer.ggml.*
      auto g = tokenizer::tokenizer_json_from_gguf(*gguf::open_file(path));
      text = std::move(g.json);
      checkpoint_eos = g.eos;
    } else {
      text = maybe_gunzip(read_input_file(path, kMaxTokenizerBytes), kMaxTokenizerBytes, path);
    }
  }
  Vocabulary parsed = parse_tokenizer_json(text, what);
  // A checkpoint names its end of sequence (a chat model's end of turn, <|im_end|>), not a guess by name.
  if (checkpoint_eos >= 0 && checkpoint_eos < parsed.size()) parsed.eos = checkpoint_eos;
  auto v = std::make_shared<const Vocabulary>(std::move(parsed));
  cache[what] = v;
  return v;
}

std::array<bool, 256> single_byte_tokens(const Vocabulary& vocab) {
  std::array<bool, 256> has{};
  for (int32_t t = 0; t < vocab.size(); ++t) {
    const std::string& b = vocab.token_bytes[static_cast<size_t>(t)];
    if (!vocab.special[static_cast<size_t>(t)] && b.size() == 1) has[static_cast<unsigned char>(b[0])] = true;
  }
  return has;
}

}  // namespace ib::constrain
