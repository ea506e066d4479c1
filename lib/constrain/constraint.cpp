#include "constrain/constraint.h"

#include <sys/stat.h>
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"

namespace ib::constrain {

namespace {
// A path that names something other than a directory: read_input_file then accepts it or says
// why not (a FIFO, a device), rather than the constraint being taken for a bundled schema's name.
bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::string schema_directory() {
  if (const char* env = std::getenv("INFER_BENCH_SCHEMAS")) return env;
#ifdef INFER_BENCH_SOURCE_SCHEMA_DIR
  return INFER_BENCH_SOURCE_SCHEMA_DIR;
#else
  return "experiments/schemas";
#endif
}

std::string constraint_source(const std::string& c) {
  if (c.rfind("regex:", 0) == 0 || c.rfind("choice:", 0) == 0) return c;
  std::string path = c;
  if (!is_file(path)) path = schema_directory() + "/" + c + ".json";
  if (!is_file(path)) throw std::runtime_error("constraint '" + c + "': no schema file " + c + " nor " + path);
  // The largest real-world schemas (Kubernetes' full API, SchemaStore's biggest) are a few MiB.
  return read_input_file(path, uint64_t{64} << 20);
}

namespace {
SchemaError past_budget(const CompileBudgetExceeded& e, const SchemaOptions& o) {
  return SchemaError("max_compile_seconds", "",
                     fmt::format("{} (SchemaOptions::max_compile_seconds = {:g})", e.what(), o.max_compile_seconds));
}
}  // namespace

CompiledConstraint compile_schema(const nlohmann::ordered_json& schema, const SchemaOptions& options, SchemaPath path) {
  CompiledConstraint out;
  bool grammar = path == SchemaPath::Grammar;
  if (path != SchemaPath::Grammar) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      CompileBudget budget(options.max_compile_seconds);
      Re re = schema_to_regex(schema, options, &out.notes);
      out.regex_seconds = since(t0);
      auto t1 = std::chrono::steady_clock::now();
      out.dfa = std::make_shared<const Dfa>(compile_dfa(re));
      out.dfa_seconds = since(t1);
      if (path == SchemaPath::Auto && !out.notes.cut_off.empty()) grammar = true;
    } catch (const SchemaError& x) {
      // Malformed or unsatisfiable: the grammar path refuses it too. Past the compile steps:
      // recursion multiplied them, which the grammar does not expand.
      if (path != SchemaPath::Auto || (!x.beyond() && x.keyword() != "max_compile_steps")) throw;
      grammar = true;
    } catch (const RegexError&) {  // an automaton limit
      if (path != SchemaPath::Auto) throw;
      grammar = true;
    } catch (const CompileBudgetExceeded& e) {
      // Auto: the grammar gets a budget of its own (the DFA attempt's time stays in the row).
      if (path != SchemaPath::Auto) throw past_budget(e, options);
      out.regex_seconds = since(t0);
      grammar = true;
    }
  }
  if (grammar) {
    // Auto's DFA attempt stays in the times: it is part of what the choice costs.
    const double tried = out.regex_seconds + out.dfa_seconds;
    out.dfa.reset();
    out.notes = {};
    auto t0 = std::chrono::steady_clock::now();
    try {
      CompileBudget budget(options.max_compile_seconds);
      const SchemaGrammar g = schema_to_grammar(schema, options, &out.notes);
      out.grammar = g.grammar;
      out.inlined_rules = g.inlined_rules;
    } catch (const CompileBudgetExceeded& e) {
      throw past_budget(e, options);
    }
    out.regex_seconds = tried;
    out.dfa_seconds = since(t0);
  }
  return out;
}

CompiledConstraint compile_constraint(const std::string& c, const std::string& source, const SchemaOptions& options,
                                      SchemaPath path) {
  Re re;
  auto t0 = std::chrono::steady_clock::now();
  if (c.rfind("regex:", 0) == 0) {
    re = parse_regex(c.substr(6)).re;  // generation: the whole output matches (anchors implied)
  } else if (c.rfind("choice:", 0) == 0) {
    std::vector<Re> alts;
    std::string rest = c.substr(7);
    size_t pos = 0;
    while (true) {
      size_t bar = rest.find('|', pos);
      alts.push_back(re_literal(rest.substr(pos, bar == std::string::npos ? std::string::npos : bar - pos)));
      if (bar == std::string::npos) break;
      pos = bar + 1;
    }
    re = re_alt(std::move(alts));
  } else {
    nlohmann::ordered_json schema;
    try {
      schema = parse_json_bounded<nlohmann::ordered_json>(source, c);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("constraint '" + c + "': the schema is not JSON: " + e.what());
    }
    const double parse_seconds = since(t0);
    CompiledConstraint out;
    try {
      out = compile_schema(schema, options, path);
    } catch (const RegexError& e) {
      // A limit of the method (states, memory), not a fault of the run: an unsupported row.
      throw Unsupported("the constraint's automaton is past a limit of this compiler: " + std::string(e.what()));
    }
    out.schema = std::make_shared<const nlohmann::ordered_json>(std::move(schema));
    out.regex_seconds += parse_seconds;
    return out;
  }
  CompiledConstraint out;
  out.regex_seconds = since(t0);
  auto t1 = std::chrono::steady_clock::now();
  try {
    out.dfa = std::make_shared<const Dfa>(compile_dfa(re));
  } catch (const RegexError& e) {
    throw Unsupported("the constraint's automaton is past a limit of this compiler: " + std::string(e.what()));
  }
  out.dfa_seconds = since(t1);
  return out;
}

}  // namespace ib::constrain
