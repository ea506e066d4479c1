#include "tokenizer/gguf_vocab.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "core/gguf_file.h"

namespace ib::tokenizer {

namespace {

// llama.cpp's token types (llama_token_type).
constexpr int kControl = 3, kUserDefined = 4;

nlohmann::json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

// The regex split of Llama 3's and Qwen2's tokenizer.json, then byte-level without GPT-2's regex.
nlohmann::json split_then_byte_level(const char* regex) {
  return {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}}, byte_level(false)}}};
}

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pre-tokenizer of `tokenizers` that matches what llama.cpp runs for tokenizer.ggml.pre
// (llama-vocab.cpp's regex_exprs per pre type, and its ignore_merges).
struct PreTokenizer {
  nlohmann::json json;
  bool ignore_merges = false;
};
PreTokenizer pre_tokenizer_for(const gguf::File& f, const std::string& pre) {
  if (pre == "gpt-2" || pre == "default") return {byte_level(true)};  // GPT-2's regex
  if (pre == "smollm")                                                // "\p{N}", then GPT-2's regex
    return {{{"type", "Sequence"}, {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}}};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return {split_then_byte_level(kLlama3Regex), true};
  if (pre == "qwen2") return {split_then_byte_level(kQwen2Regex)};
  throw InputError(fmt::format("{}: key 'tokenizer.ggml.pre': '{}' is not supported (gpt-2, default, smollm, llama-bpe, qwen2)",
                               f.path(), pre));
}

}  // namespace

GgufTokenizer tokenizer_json_from_gguf(const gguf::File& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw InputError(
        fmt::format("{}: key 'tokenizer.ggml.model': '{}' is not supported (gpt2: byte-level BPE)", f.path(), model));
  const PreTokenizer pre = pre_tokenizer_for(f, f.opt_string("tokenizer.ggml.pre").value_or("default"));
  const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
  const auto& merges = f.get_strings("tokenizer.ggml.merges");
  const std::vector<double>* types = f.find("tokenizer.ggml.token_type") ? &f.get_numbers("tokenizer.ggml.token_type") : nullptr;
  if (types && types->size() != tokens.size())
    throw InputError(
        fmt::format("{}: key 'tokenizer.ggml.token_type': {} types for {} tokens", f.path(), types->size(), tokens.size()));
  if (f.opt_bool("tokenizer.ggml.add_space_prefix", false))
    throw InputError(
        fmt::format("{}: key 'tokenizer.ggml.add_space_prefix': true is not supported for a gpt2 vocabulary", f.path()));

  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (vocab.contains(tokens[id]))
      throw InputError(fmt::format("{}: key 'tokenizer.ggml.tokens': token {} ('{}') appears twice", f.path(), id, tokens[id]));
    vocab[tokens[id]] = id;
    const int type = types ? static_cast<int>((*types)[id]) : 1;
    if (type == kControl || type == kUserDefined)
      added.push_back({{"id", id},
                       {"content", tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", type == kUserDefined},
                       {"special", type == kControl}});
  }
  GgufTokenizer out;
  auto id_of = [&](const char* key) -> int32_t {
    auto v = f.opt_int(key);
    if (!v) return -1;
    if (*v < 0 || *v >= static_cast<int64_t>(tokens.size()))
      throw InputError(fmt::format("{}: key '{}': id {} is not in the vocabulary of {}", f.path(), key, *v, tokens.size()));
    return static_cast<int32_t>(*v);
  };
  out.bos = id_of("tokenizer.ggml.bos_token_id");
  out.eos = id_of("tokenizer.ggml.eos_token_id");
  // ggml's converter writes add_bos_token from the checkpoint; when set, BOS is prepended as the
  // checkpoint's TemplateProcessing would.
  nlohmann::json post = byte_level(true);
  if (f.opt_bool("tokenizer.ggml.add_bos_token", false) && out.bos >= 0)
    post = {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", tokens[static_cast<size_t>(out.bos)]}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair",
             {{{"SpecialToken", {{"id", tokens[static_cast<size_t>(out.bos)]}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens",
             {{tokens[static_cast<size_t>(out.bos)],
               {{"id", tokens[static_cast<size_t>(out.bos)]},
                {"ids", {out.bos}},
                {"tokens", {tokens[static_cast<size_t>(out.bos)]}}}}}}};
  nlohmann::json doc = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre.json},
      {"post_processor", post},
      {"decoder", byte_level(true)},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", pre.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  out.json = doc.dump();
  return out;
}

}  // namespace ib::tokenizer
