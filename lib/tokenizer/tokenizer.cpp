// Loading tokenizer.json and the encode / decode pipeline of `tokenizers` (TokenizerImpl::encode
// and ::decode), with its post-processors.
//
// Supported: model BPE (vocab, merges in both forms, byte_fallback, fuse_unk, unk_token,
// ignore_merges, continuing_subword_prefix, end_of_word_suffix); the normalizers, pre-tokenizers
// and decoders listed in normalize.cpp, pretokenize.cpp and decode.cpp; post-processors
// TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing and Sequence; added tokens with
// all their flags. Refused with an InputError naming file and JSON pointer: other models
// (WordPiece, Unigram, WordLevel), dropout, unknown component types, ids outside [0, 2^24) or
// shared by two tokens, merges naming tokens outside the vocabulary, Sequence nesting past 64,
// files past 64 MiB; NFKC and NFKD in builds that leave ICU's data library out
// (INFER_BENCH_STATIC_DEPS, the default: see CMakeLists.txt). truncation and padding are ignored
// (encode returns every token).
//
// Where Unicode versions differ (onig's, Rust's and its crates' tables against PCRE2 10.42 and
// ICU 72) the differences were measured over every code point against tokenizers 0.23.3 and are
// made up in regex.cpp and unicode.cpp.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <map>
#include <mutex>

#include "core/data_dir.h"
#include "core/errors.h"
#include "core/gguf_file.h"
#include "core/input_file.h"
#include "core/json_input.h"
#include "tokenizer/added_vocab.h"
#include "tokenizer/gguf_vocab.h"

// The GPT-2 tokenizer compiled into the binary (constrain/vocab_embed.S).
extern "C" const unsigned char ib_gpt2_tokenizer_gz[];
extern "C" const unsigned char ib_gpt2_tokenizer_gz_end[];

namespace ib::tokenizer {

namespace detail {

constexpr size_t kMaxFileBytes = size_t{64} << 20;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<int32_t>* ids, bool add_special_tokens) const = 0;
  // The special token put before / after the sequence, -1 when none.
  virtual int32_t bos() const { return -1; }
  virtual int32_t eos() const { return -1; }
};

namespace {

class TemplatePostProcessor : public PostProcessor {
 public:
  struct Item {
    bool sequence;
    std::vector<int32_t> ids;  // of a special token
  };
  explicit TemplatePostProcessor(std::vector<Item> single) : single_(std::move(single)) {}
  void process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    std::vector<int32_t> out;
    out.reserve(ids->size() + 4);
    for (const auto& item : single_) {
      if (item.sequence)
        out.insert(out.end(), ids->begin(), ids->end());
      else if (add_special_tokens)
        out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
    *ids = std::move(out);
  }
  int32_t bos() const override {
    return !single_.empty() && !single_.front().sequence && !single_.front().ids.empty() ? single_.front().ids.front() : -1;
  }
  int32_t eos() const override {
    return !single_.empty() && !single_.back().sequence && !single_.back().ids.empty() ? single_.back().ids.back() : -1;
  }

 private:
  std::vector<Item> single_;
};

// RobertaProcessing / BertProcessing: cls + sequence + sep.
class ClsSepPostProcessor : public PostProcessor {
 public:
  ClsSepPostProcessor(int32_t cls, int32_t sep) : cls_(cls), sep_(sep) {}
  void process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids->insert(ids->begin(), cls_);
    ids->push_back(sep_);
  }
  int32_t bos() const override { return cls_; }
  int32_t eos() const override { return sep_; }

 private:
  int32_t cls_, sep_;
};

class IdentityPostProcessor : public PostProcessor {  // ByteLevel: offsets only
 public:
  void process(std::vector<int32_t>*, bool) const override {}
};

class SequencePostProcessor : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>* ids, bool add_special_tokens) const override {
    for (const auto& p : parts_) p->process(ids, add_special_tokens);
  }
  int32_t bos() const override {
    for (const auto& p : parts_)
      if (p->bos() >= 0) return p->bos();
    return -1;
  }
  int32_t eos() const override {
    for (const auto& p : parts_)
      if (p->eos() >= 0) return p->eos();
    return -1;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

int32_t token_id_pair(const Json& j) {  // ["<s>", 0]
  if (j.size() != 2) j.fail("expected [token, id]");
  j.at(0).str();
  return static_cast<int32_t>(j.at(1).integer(0, kMaxId));
}

std::unique_ptr<PostProcessor> parse_post_processor(const Json& j, int depth) {
  const std::string type = j.type();
  if (type == "TemplateProcessing") {
    Json specials = j["special_tokens"];
    if (!specials.is_object()) specials.fail("expected an object of special tokens");
    std::map<std::string, std::vector<int32_t>> special_ids;
    for (const auto& [name, v] : specials.raw().items()) {
      Json t = specials.child(name, v);
      Json ids = t["ids"];
      std::vector<int32_t> list;
      for (size_t i = 0; i < ids.size(); ++i) list.push_back(static_cast<int32_t>(ids.at(i).integer(0, kMaxId)));
      if (t["tokens"].size() != list.size()) t.fail("ids and tokens must be of the same length");
      special_ids[name] = list;
    }
    auto parse_template = [&](const Json& tj, bool single) {
      std::vector<TemplatePostProcessor::Item> items;
      for (size_t i = 0; i < tj.size(); ++i) {
        Json piece = tj.at(i);
        if (piece.has("Sequence")) {
          const std::string id = piece["Sequence"]["id"].str();
          if (id != "A" && id != "B") piece["Sequence"]["id"].fail("'" + id + "' is not a sequence (A, B)");
          if (single && id == "B") piece["Sequence"]["id"].fail("the single template names sequence B");
          items.push_back({true, {}});
        } else if (piece.has("SpecialToken")) {
          Json st = piece["SpecialToken"]["id"];
          auto it = special_ids.find(st.str());
          if (it == special_ids.end()) st.fail("special token '" + st.str() + "' is not in special_tokens");
          items.push_back({false, it->second});
        } else {
          piece.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
      }
      return items;
    };
    auto single = parse_template(j["single"], true);
    if (j.has("pair")) parse_template(j["pair"], false);
    return std::make_unique<TemplatePostProcessor>(std::move(single));
  }
  if (type == "RobertaProcessing" || type == "BertProcessing")
    return std::make_unique<ClsSepPostProcessor>(token_id_pair(j["cls"]), token_id_pair(j["sep"]));
  if (type == "ByteLevel") return std::make_unique<IdentityPostProcessor>();
  if (type == "Sequence") {
    return std::make_unique<SequencePostProcessor>(parse_sequence(j, "processors", depth, parse_post_processor));
  }
  j["type"].fail("'" + type + "' is not supported (TemplateProcessing, ByteLevel, RobertaProcessing, BertProcessing, Sequence)");
}

}  // namespace

struct TokenizerImpl {
  std::string name;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  int32_t bos = -1, eos = -1;
};

std::unique_ptr<TokenizerImpl> parse(const std::string& text, const std::string& source) {
  if (text.size() > kMaxFileBytes) throw InputError(source + ": larger than 64 MiB");
  nlohmann::json doc;
  try {
    doc = parse_json_bounded(text, source);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(source + ": not JSON (at byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception& e) {  // a number past double's range (out_of_range.406)
    throw InputError(source + ": not JSON: " + e.what());
  }
  Json root(doc, "", &source);
  if (!root.is_object()) root.fail("expected an object (a tokenizer.json)");
  if (root.has("version") && root["version"].str() != "1.0")
    root["version"].fail("unknown tokenizer version '" + root["version"].str() + "'");
  if (!root.has("model")) root.fail("missing member 'model'");

  auto t = std::make_unique<TokenizerImpl>();
  {
    Json model = root["model"];
    if (!model.is_object()) model.fail("expected an object");
    if (model.has("type") && model["type"].str() != "BPE")
      model["type"].fail("'" + model["type"].str() + "' is not supported (BPE)");
    if (!model.has("type") && !model.has("merges"))
      model.fail("no \"type\" and no merges: not a BPE model (only BPE is supported)");
    t->model = std::make_unique<BpeModel>(model);
  }
  if (root.has("normalizer")) t->normalizer = parse_normalizer(root["normalizer"], 0);
  if (root.has("pre_tokenizer")) t->pre_tokenizer = parse_pre_tokenizer(root["pre_tokenizer"], 0);
  if (root.has("post_processor")) t->post_processor = parse_post_processor(root["post_processor"], 0);
  if (root.has("decoder")) t->decoder = parse_decoder(root["decoder"], 0);
  if (root.has("added_tokens")) t->added.add(root["added_tokens"], *t->model, t->normalizer.get());

  if (t->post_processor) {
    t->bos = t->post_processor->bos();
    t->eos = t->post_processor->eos();
  }
  // Otherwise the conventional names among the special added tokens (first in file order).
  static const char* bos_names[] = {"<s>", "<|begin_of_text|>",
                                    "<\xef\xbd\x9c"
                                    "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                    "<|startoftext|>", "<bos>"};
  static const char* eos_names[] = {"<|endoftext|>",
                                    "</s>",
                                    "<|end_of_text|>",
                                    "<|eot_id|>",
                                    "<|im_end|>",
                                    "<\xef\xbd\x9c"
                                    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                    "<eos>"};
  int32_t endoftext = -1;
  for (const auto& [id, tok] : t->added.in_order()) {
    if (!tok.special) continue;
    for (const char* n : bos_names)
      if (t->bos < 0 && tok.content == n) t->bos = id;
    for (const char* n : eos_names)
      if (t->eos < 0 && tok.content == n) t->eos = id;
    if (tok.content == "<|endoftext|>" && endoftext < 0) endoftext = id;
  }
  if (t->bos < 0) t->bos = endoftext;  // GPT-2 style: one token begins and ends a text
  t->name = source;
  return t;
}

}  // namespace detail

Tokenizer::Tokenizer(std::unique_ptr<detail::TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& source_name) {
  return Tokenizer(detail::parse(json_text, source_name));
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& given) {
  namespace fs = std::filesystem;
  const std::string what = ib::data_path(given);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const Tokenizer>> cache;

  std::string path, key;
  bool embedded = false, from_gguf = false;
  std::error_code ec;
  if (what == "gpt2" || what == "llama2" || what == "deepseek-llm") {
    path = ib::data_directory() + "/tokenizers/" + what + ".tokenizer.json.gz";
    if (what == "gpt2" && !fs::exists(path, ec)) embedded = true;
  } else if (fs::is_regular_file(what, ec) && gguf::is_gguf(what)) {
    path = what;
    from_gguf = true;
  } else if (fs::is_directory(what, ec)) {
    path = (fs::path(what) / "tokenizer.json").string();
    if (!fs::exists(path, ec) && fs::exists(path + ".gz", ec)) path += ".gz";
    if (!fs::exists(path, ec)) throw InputError(what + ": no tokenizer.json in this directory");
  } else if (fs::exists(what, ec)) {
    path = what;
  } else {
    throw InputError(
        "'" + what +
        "': not a tokenizer name (gpt2, llama2, deepseek-llm), nor a tokenizer.json file, a GGUF file or a checkpoint "
        "directory");
  }
  if (embedded) {
    key = "<embedded gpt2>";
  } else {
    key = fs::weakly_canonical(path, ec).string();
    if (ec) key = path;
  }

  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  std::string text;
  GgufTokenizer gguf_ids;
  if (embedded) {
    const std::string gz(reinterpret_cast<const char*>(ib_gpt2_tokenizer_gz),
                         static_cast<size_t>(ib_gpt2_tokenizer_gz_end - ib_gpt2_tokenizer_gz));
    text = maybe_gunzip(gz, detail::kMaxFileBytes, "gpt2.tokenizer.json.gz (compiled in)");
  } else if (from_gguf) {
    gguf_ids = tokenizer_json_from_gguf(*gguf::open_file(path));
    text = std::move(gguf_ids.json);
  } else {
    text = maybe_gunzip(read_input_file(path, detail::kMaxFileBytes), detail::kMaxFileBytes, path);
  }
  auto impl = detail::parse(text, embedded ? std::string("gpt2.tokenizer.json.gz (compiled in)") : path);
  // A GGUF names its BOS and EOS ids outright (tokenizer.ggml.*_token_id): they, not a guess.
  if (gguf_ids.bos >= 0) impl->bos = gguf_ids.bos;
  if (gguf_ids.eos >= 0) impl->eos = gguf_ids.eos;
  impl->name = what;
  auto t = std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
  cache[key] = t;
  return t;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  const auto& t = *impl_;
  std::vector<detail::Piece> pieces = detail::is_valid_utf8(text)
                                          ? t.added.extract_and_normalize(text, t.normalizer.get())
                                          : t.added.extract_and_normalize(detail::utf8_lossy(text), t.normalizer.get());
  if (t.pre_tokenizer) t.pre_tokenizer->pre_tokenize(&pieces);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const auto& p : pieces) {
    if (p.id >= 0)
      ids.push_back(p.id);
    else
      t.model->tokenize(p.text, &ids);
  }
  if (t.post_processor) t.post_processor->process(&ids, add_special_tokens);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const auto& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* s = t.added.id_to_token(id);
    if (!s) s = t.model->id_to_token(id);
    if (!s) continue;
    if (skip_special_tokens && t.added.is_special_string(*s)) continue;
    tokens.push_back(*s);
  }
  std::string out;
  if (t.decoder) {
    t.decoder->decode_chain(&tokens);
    for (const auto& s : tokens) out += s;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

int32_t Tokenizer::vocab_size() const { return std::max(impl_->model->max_id(), impl_->added.max_id()) + 1; }

std::optional<int32_t> Tokenizer::token_to_id(const std::string& token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const std::string* s = impl_->added.id_to_token(id)) return *s;
  if (const std::string* s = impl_->model->id_to_token(id)) return *s;
  return std::nullopt;
}

int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
const std::string& Tokenizer::name() const { return impl_->name; }
bool Tokenizer::is_special(int32_t id) const { return impl_->added.is_special_id(id); }

}  // namespace ib::tokenizer
