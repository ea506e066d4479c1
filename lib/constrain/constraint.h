// A constraint as experiments name it, compiled to a DFA:
//   "tool_call"                 a bundled schema (experiments/schemas/<name>.json)
//   "path/to/schema.json"       a JSON Schema file
//   "regex:[a-z]+@[a-z]+"       the whole output matches the pattern (the outlines `regex` feature)
//   "choice:yes|no|maybe"       one of fixed strings (the outlines `choice` feature)
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain/automaton.h"
#include "constrain/grammar.h"
#include "constrain/json_schema.h"

namespace ib::constrain {

struct CompiledConstraint {
  std::shared_ptr<const Dfa> dfa;                        // one of the two: the DFA,
  std::shared_ptr<const Grammar> grammar;                // or a schema's grammar (SchemaPath)
  std::shared_ptr<const nlohmann::ordered_json> schema;  // null for regex / choice
  double regex_seconds = 0;                              // schema or pattern -> regex AST
  double dfa_seconds = 0;                                // AST -> minimal DFA (or the grammar's rules)
  int inlined_rules = 0;                                 // the grammar's rules compiled inline (a product in them)
  SchemaNotes notes;                                     // what a schema's compile read past (its draft, ignored keys, formats)
};

// The text a constraint compiles from: the schema file's contents, or the regex / choice itself.
// Throws std::runtime_error when a schema file cannot be found or read.
std::string constraint_source(const std::string& constraint);
// Compiles it from that text (file reading stays out of compile times); SchemaError / RegexError /
// std::runtime_error on failure.
// A schema goes along `path` (a regex or a choice is always a DFA).
CompiledConstraint compile_constraint(const std::string& constraint, const std::string& source, const SchemaOptions& options,
                                      SchemaPath path = SchemaPath::Dfa);

// A parsed schema compiled along `path` (Auto: see SchemaPath): `dfa` or `grammar` set, times and
// notes filled. Throws SchemaError (refused) or RegexError (an automaton limit: the DFA path's,
// or a grammar rule's).
CompiledConstraint compile_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options, SchemaPath path);
// Where bundled schemas live: $INFER_BENCH_SCHEMAS, else the source tree's experiments/schemas.
std::string schema_directory();

}  // namespace ib::constrain
