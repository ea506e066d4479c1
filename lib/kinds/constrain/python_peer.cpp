// The XGrammar and llguidance peers of constrain-compile and constrain-mask: one python process
// per row runs the compiled-in scripts/constrain_peer.py on a file we write (the schema's text,
// our vocabulary's token bytes, EOS and special ids, the random valid documents our rows walk,
// tokenised by our greedy tokeniser, and which masks to return whole). The script walks every
// document through the peer's masks and makes random walks under them; only when every target
// token and every final EOS was allowed does it time, under the row's stopping rule, in its own
// process (Variant::measure_self: timing the process from here would time python's start-up).
// This side is the judge: the gate is MaskVariant's (every target token of the valid documents
// allowed, and EOS at each end), read from the peer's bits; the sampled masks are compared with
// our DFA's (tokens the peer allows beyond ours, and ours it refuses), and the walks' finished
// documents are checked by our independent validator (validity_check). No python, no package, a
// schema the peer refuses: an `unsupported` row that says which.
#include "kinds/constrain/python_peer.h"
#include "core/json_input.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "constrain/generate.h"
#include "constrain/token_index.h"
#include "constrain/validity_check.h"
#include "core/backend.h"
#include "core/peer_process.h"
#include "core/registry.h"
#include "core/spec.h"
#include "kinds/constrain/constrain_keys.h"
#include "kinds/constrain/constrain_kind.h"

extern "C" const char ib_constrain_peer_py[];  // constrain_peer_embed.S

namespace ib::constrain {

const char* constrain_peer_script() { return ib_constrain_peer_py; }

namespace {

constexpr int kCompileDocuments = 8;  // the valid documents a constrain-compile peer row is checked on
constexpr int kSampledMasks = 12;     // masks compared with our DFA's (as mask_mismatches samples 12 states)
constexpr int kWalks = 8;             // random walks under the peer's mask, checked by our validator
constexpr int kWalkTokens = 256;      // tokens a walk may take before it is left unfinished

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string from_hex(const std::string& hex) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::runtime_error("not hex");
  };
  if (hex.size() % 2) throw std::runtime_error("odd hex length");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(nibble(hex[2 * i]) * 16 + nibble(hex[2 * i + 1]));
  return out;
}

// A token's bytes as a message shows them.
std::string show(const std::string& bytes, size_t max_bytes = 60) {
  std::string out = "`";
  for (size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    out += c >= 0x20 && c < 0x7F && c != '`' ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  if (bytes.size() > max_bytes) out += "…";
  return out + "`";
}

// A temporary directory, removed with its files.
struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ib-constrain-peer-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// Where a vocabulary spells one byte string with several ids (Llama 2's "o" and its byte-fallback
// <0x6F>), the id our greedy tokeniser emits: the first token of the string's trie node.
std::vector<int32_t> preferred_duplicates(const Vocabulary& v, const VocabTrie& trie) {
  std::unordered_map<std::string, int> count;
  for (int32_t t = 0; t < v.size(); ++t)
    if (!v.special[static_cast<size_t>(t)]) ++count[v.token_bytes[static_cast<size_t>(t)]];
  std::vector<int32_t> out;
  for (const auto& [bytes, n] : count) {
    if (n < 2) continue;
    int32_t node = 0;
    for (const char ch : bytes) {
      const uint8_t b = static_cast<uint8_t>(ch);
      int32_t child = -1;
      for (int32_t c = node + 1; c < trie.subtree_end[static_cast<size_t>(node)]; c = trie.subtree_end[static_cast<size_t>(c)])
        if (trie.byte[static_cast<size_t>(c)] == b) {
          child = c;
          break;
        }
      node = child;
      if (node < 0) break;
    }
    if (node > 0 && trie.token_begin[static_cast<size_t>(node)] < trie.token_begin[static_cast<size_t>(node) + 1])
      out.push_back(trie.tokens[static_cast<size_t>(trie.token_begin[static_cast<size_t>(node)])]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

enum class Mode { Compile, Mask };

class PythonPeer : public Variant {
 public:
  PythonPeer(Mode mode, std::string peer) : mode_(mode), peer_(std::move(peer)) {}

  // The point's keys as constrain-mask's: a compile row is checked on kCompileDocuments documents.
  MaskKeys keys(const Point& p) const {
    if (mode_ == Mode::Mask) return mask_keys().read(p);
    const CompileKeys c = compile_keys().read(p);
    MaskKeys k;
    k.constraint = c.constraint;
    k.documents = kCompileDocuments;
    k.peer = c.peer;
    return k;
  }

  std::string unsupported(const Point& p) const override {
    if (!keys(p).constraint.is_schema())
      return fmt::format("the {} peer is given JSON Schemas only (regex: and choice: are our syntax)", peer_);
    return {};
  }

  void prepare(const Point& p, BackendRuntime&, uint64_t seed) override {
    const MaskKeys point = keys(p);
    setup_.load(point.constraint);
    compiled_ = setup_.compile();
    valid_ = validity_check(compiled_);
    whitespace_ = point.constraint.whitespace;
    strict_ = point.constraint.strict_properties;
    python_ = point.peer.python;
    peer_timeout_ = point.peer.peer_timeout;
    seed_ = seed;
    // The documents MaskVariant decodes at this point: the same seed, the same draws.
    const Dfa& dfa = *compiled_.dfa;
    std::mt19937_64 rng(seed);
    const auto dist = distance_to_accept(dfa);
    const int64_t n = point.documents;
    docs_.clear();
    for (int64_t d = 0; d < n; ++d)
      docs_.push_back(tokenize_greedy(random_document(dfa, dist, dfa.start, rng), dfa, dfa.start, *setup_.trie));
    // The masks the peer returns whole: the first step, then steps drawn over every document.
    size_t steps = 0;
    for (const auto& doc : docs_) steps += doc.size() + 1;
    mask_steps_.clear();
    mask_steps_.push_back({0, 0});
    std::mt19937_64 pick(seed ^ 0x5eedULL);
    for (int i = 1; i < kSampledMasks && steps > 1; ++i) {
      size_t k = pick() % steps;
      for (size_t d = 0; d < docs_.size(); ++d) {
        if (k <= docs_[d].size()) {
          mask_steps_.push_back({d, k});
          break;
        }
        k -= docs_[d].size() + 1;
      }
    }
  }
  Validation validate(BackendRuntime&) override {
    throw std::logic_error("the " + peer_ + " peer is checked in its own process (measure_self)");
  }
  void run(BackendRuntime&) override {
    throw std::logic_error("the " + peer_ + " peer is timed in its own process (measure_self)");
  }

  std::optional<SelfMeasurement> measure_self(BackendRuntime&, const RunControl& c) override {
    TempDir dir;
    const std::string input = dir.path + "/input.json";
    write_input(input);
    std::vector<std::string> argv = {python_,
                                     "-c",
                                     constrain_peer_script(),
                                     "--peer",
                                     peer_,
                                     "--mode",
                                     mode_ == Mode::Mask ? "mask" : "compile",
                                     "--input",
                                     input,
                                     "--threads",
                                     std::to_string(cpu_threads()),
                                     "--warmup",
                                     std::to_string(c.warmup),
                                     "--min-samples",
                                     std::to_string(c.min_samples),
                                     "--min-time",
                                     fmt::format("{}", c.min_time),
                                     "--max-noise",
                                     fmt::format("{}", c.max_noise),
                                     "--timeout",
                                     fmt::format("{}", c.timeout)};
    const double deadline = c.timeout + peer_timeout_;
    return read_result(run_peer_process(argv, deadline), deadline);
  }

  std::vector<Metric> metrics() const override { return metrics_; }

 private:
  void write_input(const std::string& path) const {
    const Vocabulary& v = *setup_.vocab;
    nlohmann::json tokens = nlohmann::json::array(), special = nlohmann::json::array();
    for (int32_t t = 0; t < v.size(); ++t) {
      const bool sp = v.special[static_cast<size_t>(t)] != 0;
      tokens.push_back(sp ? std::string() : to_hex(v.token_bytes[static_cast<size_t>(t)]));
      if (sp && t != v.eos) special.push_back(t);
    }
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& [d, s] : mask_steps_) steps.push_back({d, s});
    const nlohmann::json job = {{"schema", setup_.source},
                                {"whitespace", whitespace_},
                                {"strict_properties", strict_},
                                {"vocab",
                                 {{"name", v.name},
                                  {"eos", v.eos},
                                  {"tokens", std::move(tokens)},
                                  {"special", std::move(special)},
                                  {"preferred", preferred_duplicates(v, *setup_.trie)}}},
                                {"documents", docs_},
                                {"mask_steps", std::move(steps)},
                                {"walks", kWalks},
                                {"walk_tokens", kWalkTokens},
                                {"seed", seed_}};
    std::ofstream f(path, std::ios::binary);
    f << job.dump();
    if (!f) throw std::runtime_error("cannot write the " + peer_ + " peer's input " + path);
  }

  SelfMeasurement read_result(const PeerProcess& p, double deadline) {
    SelfMeasurement m;
    if (!p.spawn_error.empty()) {
      if (p.spawn_error == std::strerror(ENOENT))
        m.unsupported = fmt::format("no `{}` here (the `python` key): the {} peer needs python3 with {}", python_, peer_, peer_);
      else
        throw std::runtime_error(fmt::format("cannot start `{}` for the {} peer: {}", python_, peer_, p.spawn_error));
      return m;
    }
    if (p.timed_out)
      throw std::runtime_error(fmt::format("{} peer killed after {:.3g} s (the row's timeout + peer_timeout){}", peer_, deadline,
                                           p.err.empty() ? "" : "; its last words: " + last_line(p.err)));
    const std::string line = result_line(p.out);
    if (line.empty()) {
      const std::string why = last_line(p.err);
      throw std::runtime_error(fmt::format("{} peer (`{}`) exited with code {} and printed no result{}", peer_, python_,
                                           p.exit_code, why.empty() ? "" : ": " + why));
    }
    try {
      const nlohmann::json j = ib::parse_json<nlohmann::json>(line);
      const std::string status = j.at("status").get<std::string>();
      const std::string reason = j.value("reason", std::string());
      if (status == "unsupported") {
        m.unsupported = reason.empty() ? "the " + peer_ + " peer says unsupported, without a reason" : reason;
        return m;
      }
      if (status == "failed") throw std::runtime_error(peer_ + " peer failed: " + reason);
      if (status != "ok") throw std::runtime_error(peer_ + " peer: unknown status '" + status + "'");
      const std::string who = fmt::format("{} {}", peer_, j.value("peer_version", std::string("?")));
      const nlohmann::json& check = j.at("check");
      m.validation = judge(check.at("documents"), who);
      const std::string walks = judge_walks(check.at("walks"));
      if (!m.validation.ok) return m;
      compare_masks(check.at("masks"));
      m.note =
          fmt::format("{} (python {}), in its own process; {}", j.value("note", who), j.value("python", std::string("?")), walks);
      for (const auto& ms : j.at("samples_ms")) m.samples.push_back(ms.get<double>() / 1e3);
      m.stop_reason = j.value("stop_reason", std::string()) + " (timed in the peer's process)";
      add_metrics(j.at("metrics"));
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(
          fmt::format("{} peer printed an unreadable result ({}): {}", peer_, e.what(), line.substr(0, 200)));
    }
    return m;
  }

  [[noreturn]] void unreadable(const std::string& why) const {
    throw std::runtime_error(fmt::format("{} peer printed an unreadable result: {}", peer_, why));
  }

  // The last bytes of a document before step `i`.
  std::string show_tail(const std::vector<int32_t>& doc, size_t i) const {
    std::string text;
    for (size_t k = 0; k < i && k < doc.size(); ++k) text += setup_.vocab->token_bytes[static_cast<size_t>(doc[k])];
    constexpr size_t kTail = 48;
    return text.size() > kTail ? "…" + show(text.substr(text.size() - kTail)) : show(text);
  }

  // MaskVariant's gate on the peer's bits: every target token allowed, and EOS at each end.
  Validation judge(const nlohmann::json& docs, const std::string& who) const {
    if (docs.size() != docs_.size()) unreadable(fmt::format("{} documents checked of {}", docs.size(), docs_.size()));
    size_t bad = 0, steps = 0;
    std::string first;
    const Vocabulary& v = *setup_.vocab;
    for (size_t d = 0; d < docs.size(); ++d) {
      const std::string bits = docs[d].at("steps").get<std::string>();
      const auto& doc = docs_[d];
      std::string problem;
      for (size_t i = 0; i < bits.size() && i < doc.size(); ++i) {
        ++steps;
        if (bits[i] == '1') continue;
        ++bad;
        if (problem.empty())
          problem = fmt::format("document {} step {}: token {} {} not allowed after {}", d, i, doc[i],
                                show(v.token_bytes[static_cast<size_t>(doc[i])]), show_tail(doc, i));
      }
      const bool eos = docs[d].at("eos").get<bool>(), accepted = docs[d].at("accepted").get<bool>();
      if (bits.size() < doc.size()) {
        ++bad;  // the peer stopped before the end: the rest is unchecked
        if (problem.empty()) problem = fmt::format("document {} stopped at step {} of {}", d, bits.size(), doc.size());
      } else if (!eos || !accepted) {
        ++bad;
        if (problem.empty())
          problem = fmt::format("document {}: EOS {} at the end", d, eos ? "allowed, then not accepted" : "not allowed");
      }
      const std::string error = docs[d].value("error", std::string());
      if (!problem.empty() && !error.empty()) problem += fmt::format(" ({}: {})", peer_, error.substr(0, 160));
      if (first.empty()) first = problem;
    }
    std::string detail =
        fmt::format("{} steps of {} valid documents through {}'s masks, in its own process", steps, docs_.size(), who);
    if (bad > 0) detail += "; first: " + first;
    return {bad == 0, "disallowed_steps", static_cast<double>(bad), 0, detail};
  }

  // The walks' finished documents by our validator; what the note says of them.
  std::string judge_walks(const nlohmann::json& walks) {
    walks_ = static_cast<int>(walks.size());
    finished_ = valid_walks_ = 0;
    std::string first_invalid;
    for (const auto& w : walks) {
      if (!w.at("finished").get<bool>()) continue;
      ++finished_;
      std::string text;
      try {
        text = from_hex(w.at("text").get<std::string>());
      } catch (const std::runtime_error& e) {
        unreadable(std::string("a walk's text: ") + e.what());
      }
      if (valid_(text))
        ++valid_walks_;
      else if (first_invalid.empty())
        first_invalid = show(text, 80);
    }
    std::string out =
        fmt::format("{} of {} random walks under its mask finished, {} valid by our validator", finished_, walks_, valid_walks_);
    if (!first_invalid.empty()) out += fmt::format(" (not: {})", first_invalid);
    return out;
  }

  // The returned masks against our DFA's at the same step.
  void compare_masks(const nlohmann::json& masks) {
    const Dfa& dfa = *compiled_.dfa;
    const Vocabulary& v = *setup_.vocab;
    const size_t words = (static_cast<size_t>(v.size()) + 31) / 32;
    std::vector<uint32_t> ours(words), theirs(words);
    compared_ = 0;
    extra_ = missing_ = 0;
    for (const auto& mk : masks) {
      const size_t d = mk.at("doc").get<size_t>(), s = mk.at("step").get<size_t>();
      if (d >= docs_.size() || s > docs_[d].size()) continue;
      int32_t state = dfa.start;
      for (size_t i = 0; i < s && state >= 0; ++i) state = advance(dfa, v, state, docs_[d][i]);
      if (state < 0) continue;
      std::string bytes;
      try {
        bytes = from_hex(mk.at("words").get<std::string>());
      } catch (const std::runtime_error& e) {
        unreadable(std::string("a mask: ") + e.what());
      }
      if (bytes.size() != words * 4) unreadable(fmt::format("a mask of {} bytes, not {}", bytes.size(), words * 4));
      for (size_t w = 0; w < words; ++w)
        theirs[w] = static_cast<uint32_t>(static_cast<unsigned char>(bytes[4 * w])) |
                    static_cast<uint32_t>(static_cast<unsigned char>(bytes[4 * w + 1])) << 8 |
                    static_cast<uint32_t>(static_cast<unsigned char>(bytes[4 * w + 2])) << 16 |
                    static_cast<uint32_t>(static_cast<unsigned char>(bytes[4 * w + 3])) << 24;
      std::fill(ours.begin(), ours.end(), 0u);
      compute_mask(dfa, v, *setup_.trie, state, ours.data());
      for (int32_t t = 0; t < v.size(); ++t) {
        const bool a = mask_allows(theirs.data(), t), b = mask_allows(ours.data(), t);
        extra_ += a && !b;
        missing_ += b && !a;
      }
      ++compared_;
    }
  }

  void add_metrics(const nlohmann::json& pm) {
    metrics_.clear();
    auto number = [&](const char* key) { return pm.contains(key) ? pm.at(key).get<double>() : -1.0; };
    if (mode_ == Mode::Mask) {
      size_t steps = 0;
      for (const auto& d : docs_) steps += d.size() + 1;
      metrics_.push_back({"steps_per_run", static_cast<double>(steps), ""});
      metrics_.push_back({"step_p50", number("step_p50"), "us"});
      metrics_.push_back({"step_p99", number("step_p99"), "us"});
      metrics_.push_back({"step_mean", number("step_mean"), "us"});
      metrics_.push_back({"bitmask", static_cast<double>((static_cast<size_t>(setup_.vocab->size()) + 31) / 32 * 4), "B"});
      metrics_.push_back({"py_overhead", number("py_overhead_us"), "us"});
    } else {
      metrics_.push_back({"tokenizer", number("tokenizer_ms"), "ms"});
      if (pm.contains("index_mb")) metrics_.push_back({"index", number("index_mb"), "MB"});
    }
    const double n = compared_ > 0 ? static_cast<double>(compared_) : 1;
    metrics_.push_back({"mask_extra", static_cast<double>(extra_) / n, ""});
    metrics_.push_back({"mask_missing", static_cast<double>(missing_) / n, ""});
    metrics_.push_back({"walks_finished", static_cast<double>(finished_), ""});
    metrics_.push_back({"walks_valid", static_cast<double>(valid_walks_), ""});
  }

  Mode mode_;
  std::string peer_;
  ConstraintSetup setup_;
  CompiledConstraint compiled_;
  std::function<bool(const std::string&)> valid_;
  std::string whitespace_, python_;
  bool strict_ = true;
  double peer_timeout_ = 120;
  uint64_t seed_ = 0;
  std::vector<std::vector<int32_t>> docs_;
  std::vector<std::pair<size_t, size_t>> mask_steps_;
  std::vector<Metric> metrics_;
  int walks_ = 0, finished_ = 0, valid_walks_ = 0;
  size_t compared_ = 0, extra_ = 0, missing_ = 0;
};

// The peers read every key of their kind, ours and `python`, `peer_timeout`.
const VariantRegistration reg_constrain_compile_xgrammar(
    "constrain-compile",
    peer(host("xgrammar",
              "XGrammar (python package, scripts/constrain_peer.py compiled in, its own process; key `python`) on our "
              "token bytes: one sample = compile_json_schema (grammar + adaptive token-mask cache, our thread count, "
              "its cache off) + GrammarMatcher. Checked first on 8 of our random valid documents (every token and EOS "
              "allowed, read from its masks; 12 masks compared with our DFA's: mask_extra/mask_missing), 8 random walks "
              "under its mask checked by our validator (the note); unsupported (saying why) without the package or when "
              "it refuses the schema")),
    make_variant<PythonPeer>(Mode::Compile, "xgrammar"));
const VariantRegistration reg_constrain_compile_llguidance(
    "constrain-compile",
    peer(host("llguidance",
              "llguidance (python package, as xgrammar): one sample = grammar_from_json_schema + LLMatcher (lexer and "
              "parser; its masks are computed at each step, none here); its tokenizer callback is our greedy longest "
              "match; it has no strict mode (undeclared keys stay allowed)")),
    make_variant<PythonPeer>(Mode::Compile, "llguidance"));
const VariantRegistration reg_constrain_mask_xgrammar(
    "constrain-mask",
    peer(host("xgrammar",
              "XGrammar's GrammarMatcher (python package, its own process; key `python`) on the same documents and "
              "token ids: per step fill_next_token_bitmask + accept_token, timed in python (py_overhead: the cost of a "
              "timed step around two no-op calls), a fresh matcher per document (untimed); gated as ours (every "
              "target token and EOS allowed by its masks)")),
    make_variant<PythonPeer>(Mode::Mask, "xgrammar"));
const VariantRegistration reg_constrain_mask_llguidance(
    "constrain-mask",
    peer(host("llguidance",
              "llguidance's LLMatcher (as xgrammar): per step the mask into the bitmask (unsafe_compute_mask_ptr, what "
              "llguidance.numpy's fill does) + consume_token")),
    make_variant<PythonPeer>(Mode::Mask, "llguidance"));

}  // namespace
}  // namespace ib::constrain
