// The real-world schema corpus (tests/data/schema-corpus/corpus.jsonl, made by
// scripts/collect-schema-corpus from SchemaStore, Kubernetes and BFCL, instances labelled by the
// jsonschema package) and how the compiler fares on it: schemas compiled, compile time, valid
// instances refused and invalid ones accepted — what the `constrain-realworld` experiment and the
// corpus test report.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/json_schema.h"

namespace ib::constrain {

struct CorpusEntry {
  std::string id, source, origin;
  nlohmann::ordered_json schema;
  std::vector<nlohmann::ordered_json> valid, invalid;
};

// Every line of the corpus; std::runtime_error naming the file and line on a bad one.
std::vector<CorpusEntry> load_corpus(const std::string& path);
// The bundled corpus: data/... resolution as the other bundled data (tests/data/schema-corpus).
std::string corpus_path();

// An instance spelt as the compiler writes documents of the schema: compact, each object's keys in
// the order the schema declares them (following $ref, allOf, the anyOf/oneOf branch and the
// if/then/else or dependentSchemas case the instance takes), other keys after them.
std::string canonical_spelling(const nlohmann::ordered_json& instance, const nlohmann::ordered_json& schema);

// One schema's outcome.
struct CorpusResult {
  bool compiled = false;
  std::string refusal;               // the error when not compiled (keyword: message)
  std::string keyword;               // the keyword it names ("" for an automaton limit)
  double compile_ms = 0;             // schema -> regex -> minimal DFA, or the grammar (its rules compiled on first use)
  double rules_ms = 0;               // the grammar path: then every rule the start reaches, each a minimal DFA
  int dfa_states = 0;                // the DFA's, or all the grammar's reachable rules' together
  int rules = 0, inlined_rules = 0;  // the grammar path's rules the start reaches, and those compiled inline (a product in them)
  std::shared_ptr<const Dfa> dfa;    // what compiled, for the mask timing
  std::shared_ptr<const Grammar> grammar;
  int valid = 0, valid_refused = 0;           // refused: the canonical spelling is outside the language
  int invalid = 0, invalid_accepted = 0;      // accepted: the canonical or the instance's own spelling is inside
  std::vector<std::string> accepted_invalid;  // the documents, for the report
  bool validator_decides = false;             // a keyword was left to the validator (SchemaOptions::unique_items_by_validator)
  SchemaNotes notes;
};

// Which compiler path: the whole-schema DFA, the grammar (json_schema.h's schema_to_grammar), or
// auto: the DFA where it compiles and cuts no valid document off (SchemaNotes::cut_off), else the
// grammar (its compile time then includes the DFA attempt).
CorpusResult evaluate_corpus_entry(const CorpusEntry& e, const SchemaOptions& options, SchemaPath path = SchemaPath::Dfa);

}  // namespace ib::constrain
