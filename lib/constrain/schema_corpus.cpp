#include "constrain/schema_corpus.h"
#include "core/json_input.h"

#include "constrain/constraint.h"

#include <chrono>
#include <fstream>
#include <regex>
#include <stdexcept>

#include "constrain/automaton.h"
#include "constrain/constraint.h"
#include "constrain/schema_dialect.h"
#include "constrain/validator.h"
#include "core/data_dir.h"

namespace ib::constrain {

namespace {

using json = nlohmann::ordered_json;

// The schema objects that apply to a value, in the order the compiler merges them: the object's
// own keywords, its allOf members, its $ref target, the dependent schemas of keys present, the
// if/then/else branch the value takes, the first anyOf/oneOf branch it satisfies.
class Orderer {
 public:
  explicit Orderer(const SchemaValidator& v) : v_(v) {}

  std::string spell(const json& doc, const json& schema, int depth = 0) const {
    std::vector<json> applying;
    collect(schema, doc, applying, 0);
    if (doc.is_object() && depth < 128) {
      std::vector<std::string> order;
      auto listed = [&](const std::string& k) { return std::find(order.begin(), order.end(), k) != order.end(); };
      for (const auto& s : applying)
        if (s.contains("properties") && s["properties"].is_object())
          for (const auto& [k, sub] : s["properties"].items())
            if (doc.contains(k) && !listed(k)) order.push_back(k);
      for (const auto& [k, x] : doc.items())
        if (!listed(k)) order.push_back(k);
      std::string out = "{";
      for (const auto& k : order) {
        if (out.size() > 1) out += ',';
        out += json(k).dump() + ":" + spell(doc[k], member_schema(applying, k), depth + 1);
      }
      return out + "}";
    }
    if (doc.is_array() && depth < 128) {
      std::string out = "[";
      for (size_t i = 0; i < doc.size(); ++i) {
        if (i) out += ',';
        out += spell(doc[i], item_schema(applying, i), depth + 1);
      }
      return out + "]";
    }
    return doc.dump();
  }

 private:
  const SchemaValidator& v_;

  void collect(const json& raw, const json& doc, std::vector<json>& out, int depth) const {
    if (depth > 64 || !raw.is_object()) return;
    const json s = to_2020_12(raw, v_.draft());
    out.push_back(s);
    if (s.contains("allOf") && s["allOf"].is_array())
      for (const auto& m : s["allOf"]) collect(m, doc, out, depth + 1);
    if (s.contains("$ref") && s["$ref"].is_string()) collect(v_.target(s["$ref"].get<std::string>()), doc, out, depth + 1);
    if (s.contains("dependentSchemas") && s["dependentSchemas"].is_object() && doc.is_object())
      for (const auto& [k, sub] : s["dependentSchemas"].items())
        if (doc.contains(k)) collect(sub, doc, out, depth + 1);
    if (s.contains("if")) {
      const char* branch = v_.valid_at(s["if"], doc) ? "then" : "else";
      if (s.contains(branch)) collect(s[branch], doc, out, depth + 1);
    }
    for (const char* comb : {"anyOf", "oneOf"})
      if (s.contains(comb) && s[comb].is_array())
        for (const auto& b : s[comb])
          if (v_.valid_at(b, doc)) {
            collect(b, doc, out, depth + 1);
            break;
          }
  }

  static bool pattern_matches(const std::string& pattern, const std::string& key) {
    try {
      return std::regex_search(key, std::regex(pattern, std::regex::ECMAScript));
    } catch (const std::regex_error&) {
      return false;
    }
  }

  static json all_of(json members) {
    if (members.empty()) return true;
    if (members.size() == 1) return members[0];
    return json{{"allOf", std::move(members)}};
  }

  static json member_schema(const std::vector<json>& applying, const std::string& k) {
    json members = json::array();
    for (const auto& s : applying) {
      bool named = false;
      if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(k)) {
        members.push_back(s["properties"][k]);
        named = true;
      }
      if (s.contains("patternProperties") && s["patternProperties"].is_object())
        for (const auto& [p, sub] : s["patternProperties"].items())
          if (pattern_matches(p, k)) {
            members.push_back(sub);
            named = true;
          }
      if (!named && s.contains("additionalProperties")) members.push_back(s["additionalProperties"]);
    }
    return all_of(std::move(members));
  }

  static json item_schema(const std::vector<json>& applying, size_t i) {
    json members = json::array();
    for (const auto& s : applying) {
      const size_t prefix = s.contains("prefixItems") && s["prefixItems"].is_array() ? s["prefixItems"].size() : 0;
      if (i < prefix)
        members.push_back(s["prefixItems"][i]);
      else if (s.contains("items"))
        members.push_back(s["items"]);
    }
    return all_of(std::move(members));
  }
};

}  // namespace

std::vector<CorpusEntry> load_corpus(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path + ": cannot read the schema corpus");
  std::vector<CorpusEntry> out;
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    try {
      const json e = ib::parse_json<json>(line);
      CorpusEntry c;
      c.id = e.at("id").get<std::string>();
      c.source = e.at("source").get<std::string>();
      c.origin = e.value("origin", std::string());
      c.schema = e.at("schema");
      for (const auto& x : e.at("valid")) c.valid.push_back(x);
      for (const auto& x : e.at("invalid")) c.invalid.push_back(x);
      out.push_back(std::move(c));
    } catch (const json::exception& x) {
      throw std::runtime_error(path + ":" + std::to_string(n) + ": not a corpus line (" + x.what() + ")");
    }
  }
  return out;
}

std::string corpus_path() { return data_path("data/schema-corpus/corpus.jsonl"); }

std::string canonical_spelling(const json& instance, const json& schema) {
  const SchemaValidator v(schema);
  return Orderer(v).spell(instance, schema);
}

CorpusResult evaluate_corpus_entry(const CorpusEntry& e, const SchemaOptions& options, SchemaPath path) {
  CorpusResult r;
  r.valid = static_cast<int>(e.valid.size());
  r.invalid = static_cast<int>(e.invalid.size());
  const auto t0 = std::chrono::steady_clock::now();
  try {
    CompiledConstraint c = compile_schema(e.schema, options, path);
    r.notes = std::move(c.notes);
    r.dfa = std::move(c.dfa);
    r.grammar = std::move(c.grammar);
    if (r.dfa) r.dfa_states = r.dfa->num_states;
    if (r.grammar) {
      r.rules = static_cast<int>(r.grammar->reachable_rules());
      r.inlined_rules = c.inlined_rules;
    }
    r.compiled = true;
  } catch (const SchemaError& x) {
    r.keyword = x.keyword();
    r.refusal = x.what();
  } catch (const std::exception& x) {  // an automaton limit (RegexError) or a bad $schema
    r.refusal = x.what();
  }
  r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (r.compiled && r.grammar) {
    // Every rule the start reaches, as an eager compile would (the corpus counts a schema only when
    // all of them compile, within a budget of their own).
    const auto t1 = std::chrono::steady_clock::now();
    try {
      CompileBudget budget(options.max_compile_seconds);
      r.grammar->compile_all();
      r.dfa_states = static_cast<int>(r.grammar->states());
    } catch (const CompileBudgetExceeded& x) {
      r.compiled = false;
      r.keyword = "max_compile_seconds";
      r.refusal = std::string("compiling the grammar's rules: ") + x.what();
    } catch (const std::exception& x) {
      r.compiled = false;
      r.refusal = std::string("compiling the grammar's rules: ") + x.what();
    }
    r.rules_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  }
  if (!r.compiled) return r;
  const SchemaValidator v(e.schema);
  const Orderer order(v);
  // A keyword left to the validator: a document counts as accepted when the DFA and the validator
  // both accept it (what generation does: mask, then check the finished document).
  r.validator_decides = !r.notes.validator_decides.empty();
  auto accepted = [&](const std::string& doc) {
    if (r.dfa ? !r.dfa->matches(doc) : !grammar_matches(*r.grammar, doc)) return false;
    if (!r.validator_decides) return true;
    const json parsed = ib::parse_json_or_discarded<json>(doc);
    return !parsed.is_discarded() && v.valid(parsed);
  };
  for (const auto& x : e.valid) r.valid_refused += !accepted(order.spell(x, e.schema));
  for (const auto& x : e.invalid) {
    const std::string canonical = order.spell(x, e.schema), own = x.dump();
    if (accepted(canonical) || accepted(own)) {
      ++r.invalid_accepted;
      r.accepted_invalid.push_back(accepted(canonical) ? canonical : own);
    }
  }
  return r;
}

}  // namespace ib::constrain
