#include "kinds/constrain/constrain_keys.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "constrain/keyword_cases.h"
#include "constrain/regex.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "kinds/params/engine_params.h"
#include "kinds/params/text_prompt_params.h"

namespace ib::constrain {
namespace {

SchemaOptions schema_options(const std::string& whitespace, int64_t recursion, bool strict, const std::string& draft,
                             const std::string& unique, const std::string& fallback) {
  SchemaOptions o;
  o.validator_fallback = fallback == "validator";
  o.unique_items_by_validator = unique == "validator";
  o.whitespace = whitespace == "flexible" ? SchemaOptions::Whitespace::Flexible : SchemaOptions::Whitespace::Compact;
  o.max_recursion = static_cast<int>(recursion);
  o.strict_properties = strict;
  o.default_draft = draft == "auto" ? "" : draft;
  return o;
}

// The constraint group; `default_vocab`: gpt2, or the engine's tokenizer for constrain-generate.
ParamSet<ConstraintKeys> constraint_params(const std::string& default_vocab) {
  using K = ConstraintKeys;
  ParamSet<K> s;
  s.add(&K::constraint,
        key_spec("constraint", ParamType::String,
                 "a bundled schema (experiments/schemas/<name>.json), a schema file, regex:PATTERN or choice:a|b|c",
                 Value(std::string("tool_call"))))
      .add(&K::vocab,
           key_spec("vocab", ParamType::String,
                    "gpt2 (50,257, built in), llama2 (32,000), deepseek-llm (102,400), a tokenizer.json path, or a checkpoint "
                    "(a Hugging Face directory or a GGUF file: its tokenizer, and its own end of sequence)",
                    Value(default_vocab)))
      .add(&K::whitespace,
           enum_key("whitespace",
                    "JSON layout the generator may use: compact, or flexible (up to 2 of space/newline/tab between tokens)",
                    "compact", {"compact", "flexible"}))
      .add(&K::max_recursion,
           key_spec("max_recursion", ParamType::Int, "levels a recursive $ref is expanded to", Value(int64_t{3}), 0.0, 10.0))
      .add(&K::strict_properties,
           key_spec("strict_properties", ParamType::Bool,
                    "without additionalProperties, no keys but the declared ones (true: what a model should write) or any other "
                    "keys (false: the JSON Schema meaning)",
                    Value(true)))
      .add(&K::unique_items, enum_key("unique_items",
                                      "uniqueItems over items that are no finite enumeration: refuse, or validator (compiled "
                                      "without it; the finished document is checked, the row says so)",
                                      "refuse", {"refuse", "validator"}))
      .add(&K::fallback,
           enum_key("fallback",
                    "a keyword beyond what the mask holds exactly (a oneOf or pattern past the automaton caps, lookaround, "
                    "overlapping patternProperties, an allOf it cannot merge, uniqueItems): refuse the schema, or validator "
                    "(compile the schema object without it, a superset; the finished document is checked, the row says so)",
                    "refuse", {"refuse", "validator"}))
      .add(&K::schema_draft,
           enum_key("schema_draft", "the draft of a schema whose $schema names none (auto: 2020-12, as the specification says)",
                    "auto", {"auto", "4", "6", "7", "2019-09", "2020-12"}));
  return s;
}

const ParamSet<PythonPeerKeys>& python_peer_params() {
  static const ParamSet<PythonPeerKeys> set = [] {
    using K = PythonPeerKeys;
    ParamSet<K> s;
    s.add(&K::python, key_spec("python", ParamType::String,
                               "xgrammar/llguidance peers: the interpreter that runs the compiled-in scripts/constrain_peer.py "
                               "(searched in PATH); no interpreter, or no such package in it, makes the peer rows unsupported",
                               Value(std::string("python3"))))
        .add(&K::peer_timeout,
             key_spec("peer_timeout", ParamType::Seconds,
                      "xgrammar/llguidance peers: time allowed for python's start, the tokenizer and the checks, on top of the "
                      "row's timeout; the process is killed past it (a FAILED row)",
                      Value(120.0), 1e-3));
    return s;
  }();
  return set;
}

const ParamSet<ConstraintKeys>& gpt2_constraint() {
  static const ParamSet<ConstraintKeys> set = constraint_params("gpt2");
  return set;
}

KeySpec documents_key(const char* doc, int64_t default_documents) {
  return key_spec("documents", ParamType::Int, doc, Value(default_documents), 1.0);
}

}  // namespace

SchemaOptions ConstraintKeys::schema_options() const {
  return constrain::schema_options(whitespace, max_recursion, strict_properties, schema_draft, unique_items, fallback);
}

bool ConstraintKeys::is_schema() const { return constraint.rfind("regex:", 0) != 0 && constraint.rfind("choice:", 0) != 0; }

const ParamSet<CompileKeys>& compile_keys() {
  static const ParamSet<CompileKeys> set = ParamSet<CompileKeys>()
                                               .add_group(&CompileKeys::constraint, gpt2_constraint())
                                               .add_group(&CompileKeys::peer, python_peer_params());
  return set;
}

const ParamSet<MaskKeys>& mask_keys() {
  static const ParamSet<MaskKeys> set = ParamSet<MaskKeys>()
                                            .add_group(&MaskKeys::constraint, gpt2_constraint())
                                            .add(&MaskKeys::documents, documents_key("documents decoded per sample", 8))
                                            .add_group(&MaskKeys::peer, python_peer_params());
  return set;
}

std::vector<std::string> compile_reads() { return gpt2_constraint().names(); }

std::vector<std::string> mask_reads() {
  std::vector<std::string> names = gpt2_constraint().names();
  names.push_back("documents");
  return names;
}

const ParamSet<ValidityKeys>& validity_keys() {
  static const ParamSet<ValidityKeys> set = [] {
    using K = ValidityKeys;
    ParamSet<K> s;
    s.add_group(&K::constraint, gpt2_constraint())
        .add(&K::epsilon,
             key_spec("epsilon", ParamType::Float, "probability that the emitter errs on a token", Value(0.01), 0.0, 1.0))
        .add(&K::retries, key_spec("retries", ParamType::Int, "attempts per document without the mask", Value(int64_t{3}), 1.0))
        .add(&K::documents, documents_key("documents per sample", 50));
    return s;
  }();
  return set;
}

const ParamSet<JumpForwardKeys>& jump_forward_keys() {
  static const ParamSet<JumpForwardKeys> set = ParamSet<JumpForwardKeys>()
                                                   .add_group(&JumpForwardKeys::constraint, gpt2_constraint())
                                                   .add(&JumpForwardKeys::documents, documents_key("documents per sample", 20));
  return set;
}

const ParamSet<KeywordKeys>& keyword_keys() {
  static const ParamSet<KeywordKeys> set =
      ParamSet<KeywordKeys>()
          .add(&KeywordKeys::keyword,
               enum_key("keyword", "the keyword case: a supported keyword, regex, choice, or a refused keyword", "type-null",
                        keyword_case_names()))
          .add(&KeywordKeys::walks,
               key_spec("walks", ParamType::Int, "random documents drawn from the DFA per keyword, each checked by the validator",
                        Value(int64_t{100}), 1.0, 100000.0));
  return set;
}

const ParamSet<OverheadKeys>& overhead_keys() {
  static const ParamSet<OverheadKeys> set =
      ParamSet<OverheadKeys>()
          .add(&OverheadKeys::model,
               enum_key("model",
                        "LM-head shape: llama2-7b (4096 -> 32000), qwen2-0.5b (896 -> 151936), gpt2 (768 -> 50257), tiny (256 -> "
                        "50257)",
                        "llama2-7b", {"llama2-7b", "qwen2-0.5b", "gpt2", "tiny"}))
          .add(&OverheadKeys::mask_density,
               key_spec("mask_density", ParamType::Float, "fraction of tokens the mask allows", Value(0.5), 0.0, 1.0));
  return set;
}

const ParamSet<RealworldKeys>& realworld_keys() {
  static const ParamSet<RealworldKeys> set = [] {
    using K = RealworldKeys;
    ParamSet<K> s;
    s.add(&K::source, enum_key("source", "the corpus part: all, schemastore, kubernetes or bfcl", "all",
                               {"all", "schemastore", "kubernetes", "bfcl"}))
        .add(&K::strict_properties,
             key_spec("strict_properties", ParamType::Bool,
                      "without additionalProperties, no keys but the declared ones (true) or any others (false: the JSON "
                      "Schema meaning, what the instances' labels use)",
                      Value(false)))
        .add(&K::unique_items, enum_key("unique_items",
                                        "uniqueItems over items that are no finite enumeration: refuse, or validator (compiled "
                                        "without it, the document checked after; counted in validator_decides)",
                                        "refuse", {"refuse", "validator"}))
        .add(&K::fallback, enum_key("fallback",
                                    "a keyword beyond what the mask holds exactly: refuse the schema, or validator (the schema "
                                    "object compiled without it, the document checked after; counted in validator_decides; "
                                    "implies unique_items: validator)",
                                    "refuse", {"refuse", "validator"}))
        .add(&K::max_compile_seconds,
             key_spec("max_compile_seconds", ParamType::Float,
                      "CPU seconds one schema's compile may take: past it the schema is refused (keyword "
                      "max_compile_seconds; #49's accounting of XGrammar and llguidance counts compiles past 10 s as "
                      "refused); 0: no budget",
                      Value(10.0), 0.0, 3600.0))
        .add(&K::vocab,
             key_spec("vocab", ParamType::String,
                      "the vocabulary of the mask timing (gpt2, llama2, deepseek-llm, a tokenizer.json or a checkpoint)",
                      Value(std::string("gpt2"))))
        .add(&K::mask_schemas,
             key_spec("mask_schemas", ParamType::Int, "compiled schemas (a seeded sample) whose precomputed masks are timed",
                      Value(int64_t{16}), 0.0, 1000.0));
    return s;
  }();
  return set;
}

const ParamSet<GenerateKeys>& generate_keys() {
  static const ParamSet<GenerateKeys> set = [] {
    using K = GenerateKeys;
    static const ParamSet<ConstraintKeys> llama2_constraint = constraint_params("llama2");
    ParamSet<K> s;
    s.add_group(&K::constraint, llama2_constraint)
        .add(&K::model, model::model_key("deep-narrow"))
        .add(&K::weights, model::weights_key())
        .add(&K::matmul, model::matmul_key(), model::parse_matmul)
        .add(&K::prompt,
             key_spec("prompt", ParamType::Int,
                      "prompt tokens before every document: seeded random ordinary tokens of the vocabulary, the same for every "
                      "document",
                      Value(int64_t{8}), 1.0, 1024.0))
        // A text prompt instead of the random one, tokenized with `vocab` (the constraint's tokenizer).
        .add_group(&K::prompts, kinds::text_prompt_params(/*with_tokenizer=*/false))
        .add(&K::max_tokens,
             key_spec("max_tokens", ParamType::Int,
                      "tokens per attempt, EOS included (constrained: at least the shortest document's bytes + 1)",
                      Value(int64_t{256}), 1.0, 4096.0))
        .add(&K::temperature,
             key_spec("temperature", ParamType::Float,
                      "0 = greedy (argmax of the allowed logits; retries repeat the same text); else sampling on "
                      "the host, seeded per document and attempt",
                      Value(1.0), 0.0))
        .add(&K::retries,
             key_spec("retries", ParamType::Int, "attempts per document without the mask", Value(int64_t{3}), 1.0, 100.0))
        .add(&K::documents, documents_key("documents per sample", 8));
    return s;
  }();
  return set;
}

std::optional<KeyProblem> check_constraint_keys(const SpecKeyValues& values) {
  const SpecValues<ConstraintKeys> v(gpt2_constraint(), values);
  const auto constraints = v.field(&ConstraintKeys::constraint), vocabs = v.field(&ConstraintKeys::vocab);
  // Every way the spec compiles a schema.
  const auto whitespaces = v.field(&ConstraintKeys::whitespace);
  const auto recursions = v.field(&ConstraintKeys::max_recursion);
  const auto stricts = v.field(&ConstraintKeys::strict_properties);
  const auto drafts = v.field(&ConstraintKeys::schema_draft);
  const auto uniques = v.field(&ConstraintKeys::unique_items);
  const auto fallbacks = v.field(&ConstraintKeys::fallback);
  for (const std::string& c : constraints.values) {
    std::string source;
    try {
      source = constraint_source(c);
    } catch (const InputError& e) {  // the file is there but cannot be read: a FIFO, too large
      return KeyProblem{{constraints.key}, e.what()};
    } catch (const std::exception&) {
      std::vector<std::string> bundled;
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(schema_directory(), ec))
        if (entry.path().extension() == ".json") bundled.push_back(entry.path().stem().string());
      std::sort(bundled.begin(), bundled.end());
      return KeyProblem{{constraints.key},
                        fmt::format("'{}' is no schema file, nor a bundled schema ({}), nor regex:PATTERN or choice:a|b|c", c,
                                    fmt::join(bundled, ", "))};
    }
    if (c.rfind("choice:", 0) == 0) continue;
    ConstraintKeys k;
    for (const auto& whitespace : whitespaces.values)
      for (const auto recursion : recursions.values)
        for (const auto strict : stricts.values)
          for (const auto& draft : drafts.values)
            for (const auto& unique : uniques.values)
              for (const auto& fallback : fallbacks.values) {
                k.whitespace = whitespace;
                k.max_recursion = recursion;
                k.strict_properties = strict;
                k.schema_draft = draft;
                k.unique_items = unique;
                k.fallback = fallback;
                try {
                  if (c.rfind("regex:", 0) == 0) {
                    parse_regex(c.substr(6));
                  } else {
                    nlohmann::ordered_json schema;
                    try {
                      schema = parse_json_bounded<nlohmann::ordered_json>(source, c);
                    } catch (const nlohmann::json::exception& e) {
                      return KeyProblem{{constraints.key}, fmt::format("'{}': the schema is not JSON: {}", c, e.what())};
                    }
                    schema_to_regex(schema, k.schema_options());
                  }
                } catch (const std::exception& e) {
                  return KeyProblem{{constraints.key}, fmt::format("'{}': {}", c, e.what())};
                }
              }
  }
  for (const std::string& vocab : vocabs.values) {
    try {
      load_vocabulary(vocab);
    } catch (const std::exception& e) {
      return KeyProblem{
          {vocabs.key},
          fmt::format("'{}' is not gpt2, llama2, deepseek-llm nor a readable tokenizer.json ({})", vocab, e.what())};
    }
  }
  return std::nullopt;
}

}  // namespace ib::constrain
