// What the constrain kinds share (kind_setup.h): the constraint keys and their spec-time check, the
// constraint and vocabulary a variant loads, the independent validity check; and the registration
// helpers of the kinds' files (constrain_kinds_internal.h). Each kind group is its own file.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "constrain/constrain_kinds_internal.h"
#include "constrain/constraint.h"
#include "constrain/kind_setup.h"
#include "constrain/validator.h"
#include "core/errors.h"
#include "core/json_input.h"
#include "core/registry.h"
#include "core/stats.h"

namespace ib::constrain {

std::vector<KeySpec> constraint_keys(const std::string& default_vocab) {
  return {
      key_spec("constraint", ParamType::String,
               "a bundled schema (experiments/schemas/<name>.json), a schema file, regex:PATTERN or choice:a|b|c",
               Value(std::string("tool_call"))),
      key_spec("vocab", ParamType::String,
               "gpt2 (50,257, built in), llama2 (32,000), deepseek-llm (102,400), a tokenizer.json path, or a checkpoint "
               "(a Hugging Face directory or a GGUF file: its tokenizer, and its own end of sequence)",
               Value(default_vocab)),
      enum_key("whitespace",
               "JSON layout the generator may use: compact, or flexible (up to 2 of space/newline/tab between tokens)", "compact",
               {"compact", "flexible"}),
      key_spec("max_recursion", ParamType::Int, "levels a recursive $ref is expanded to", Value(int64_t{3}), 0.0, 10.0),
      key_spec("strict_properties", ParamType::Bool,
               "without additionalProperties, no keys but the declared ones (true: what a model should write) or any other "
               "keys (false: the JSON Schema meaning)",
               Value(true)),
      enum_key("unique_items",
               "uniqueItems over items that are no finite enumeration: refuse, or validator (compiled without it; the "
               "finished document is checked, the row says so)",
               "refuse", {"refuse", "validator"}),
      enum_key("fallback",
               "a keyword beyond what the mask holds exactly (a oneOf or pattern past the automaton caps, lookaround, "
               "overlapping patternProperties, an allOf it cannot merge, uniqueItems): refuse the schema, or validator (compile "
               "the schema object without it, a superset; the finished document is checked, the row says so)",
               "refuse", {"refuse", "validator"}),
      enum_key("schema_draft", "the draft of a schema whose $schema names none (auto: 2020-12, as the specification says)",
               "auto", {"auto", "4", "6", "7", "2019-09", "2020-12"}),
  };
}

namespace {
// The schema options a point asks for (whitespace, recursion, properties, draft).
SchemaOptions schema_options(const std::string& whitespace, int64_t recursion, bool strict, const std::string& draft,
                             const std::string& unique = "refuse", const std::string& fallback = "refuse") {
  SchemaOptions o;
  o.validator_fallback = fallback == "validator";
  o.unique_items_by_validator = unique == "validator";
  o.whitespace = whitespace == "flexible" ? SchemaOptions::Whitespace::Flexible : SchemaOptions::Whitespace::Compact;
  o.max_recursion = static_cast<int>(recursion);
  o.strict_properties = strict;
  o.default_draft = draft == "auto" ? "" : draft;
  return o;
}
}  // namespace

std::optional<KeyProblem> check_constraint_keys(const std::map<std::string, std::vector<Value>>& values) {
  auto all = [&](const char* key) {
    auto it = values.find(key);
    return it == values.end() ? std::vector<Value>{} : it->second;
  };
  for (const Value& cv : all("constraint")) {
    const std::string& c = std::get<std::string>(cv);
    std::string source;
    try {
      source = constraint_source(c);
    } catch (const InputError& e) {  // the file is there but cannot be read: a FIFO, too large
      return KeyProblem{{"constraint"}, e.what()};
    } catch (const std::exception&) {
      std::vector<std::string> bundled;
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(schema_directory(), ec))
        if (entry.path().extension() == ".json") bundled.push_back(entry.path().stem().string());
      std::sort(bundled.begin(), bundled.end());
      return KeyProblem{{"constraint"},
                        fmt::format("'{}' is no schema file, nor a bundled schema ({}), nor regex:PATTERN or choice:a|b|c", c,
                                    fmt::join(bundled, ", "))};
    }
    if (c.rfind("choice:", 0) == 0) continue;
    std::vector<Value> stricts = all("strict_properties"), drafts = all("schema_draft"), uniques = all("unique_items"),
                       fallbacks = all("fallback");
    if (uniques.empty()) uniques.push_back(Value(std::string("refuse")));
    if (fallbacks.empty()) fallbacks.push_back(Value(std::string("refuse")));
    if (stricts.empty()) stricts.push_back(Value(true));
    if (drafts.empty()) drafts.push_back(Value(std::string("auto")));
    for (const Value& wv : all("whitespace"))
      for (const Value& rv : all("max_recursion"))
        for (const Value& sv : stricts)
          for (const Value& dv : drafts)
            for (const Value& uv : uniques)
              for (const Value& fv : fallbacks) {
                const SchemaOptions options =
                    schema_options(std::get<std::string>(wv), std::get<int64_t>(rv), std::get<bool>(sv),
                                   std::get<std::string>(dv), std::get<std::string>(uv), std::get<std::string>(fv));
                try {
                  if (c.rfind("regex:", 0) == 0) {
                    parse_regex(c.substr(6));
                  } else {
                    nlohmann::ordered_json schema;
                    try {
                      schema = parse_json_bounded<nlohmann::ordered_json>(source, c);
                    } catch (const nlohmann::json::exception& e) {
                      return KeyProblem{{"constraint"}, fmt::format("'{}': the schema is not JSON: {}", c, e.what())};
                    }
                    schema_to_regex(schema, options);
                  }
                } catch (const std::exception& e) {
                  return KeyProblem{{"constraint"}, fmt::format("'{}': {}", c, e.what())};
                }
              }
  }
  for (const Value& vv : all("vocab")) {
    const std::string& v = std::get<std::string>(vv);
    try {
      load_vocabulary(v);
    } catch (const std::exception& e) {
      return KeyProblem{{"vocab"},
                        fmt::format("'{}' is not gpt2, llama2, deepseek-llm nor a readable tokenizer.json ({})", v, e.what())};
    }
  }
  return std::nullopt;
}

void Setup::load(const Point& p, bool with_trie) {
  constraint = p.text("constraint");
  source = constraint_source(constraint);
  options = schema_options(
      p.text("whitespace"), p.integer("max_recursion"), p.find("strict_properties") ? p.flag("strict_properties") : true,
      p.find("schema_draft") ? p.text("schema_draft") : "auto", p.find("unique_items") ? p.text("unique_items") : "refuse",
      p.find("fallback") ? p.text("fallback") : "refuse");
  vocab = load_vocabulary(p.text("vocab"));
  if (with_trie) trie = vocab_trie(vocab);
}

std::function<bool(const std::string&)> validity_check(const CompiledConstraint& c) {
  if (!c.schema) {
    auto dfa = c.dfa;
    return [dfa](const std::string& text) { return dfa->matches(text); };
  }
  auto schema = c.schema;
  Draft draft = Draft::Draft2020_12;
  parse_draft(c.notes.draft, &draft);  // the draft the compiler read it as
  return [schema, draft](const std::string& text) {
    nlohmann::ordered_json doc;
    try {
      doc = parse_json_bounded<nlohmann::ordered_json>(text, "a generated document");
    } catch (const std::exception&) {  // not JSON, or nested past any schema's reach: invalid
      return false;
    }
    return SchemaValidator(*schema, draft).valid(doc);
  };
}

namespace detail {

// ---- registrations ----

KindInfo kind(const std::string& name, const std::string& doc, std::vector<KeySpec> keys) {
  KindInfo k;
  k.name = name;
  k.group = "constrain";
  k.doc = doc;
  k.keys = std::move(keys);
  for (const auto& key : k.keys)
    if (key.name == "constraint") k.check = check_constraint_keys;
  return k;
}

VariantDecl host(std::string name, std::string doc, std::vector<std::string> uses) {
  VariantDecl d{std::move(name), Backend::Cpu, std::move(doc), std::move(uses)};
  d.host = true;
  return d;
}

std::vector<std::string> key_names(const std::vector<KeySpec>& keys) {
  std::vector<std::string> names;
  for (const auto& k : keys) names.push_back(k.name);
  return names;
}

std::vector<KeySpec> with(std::vector<KeySpec> keys, std::vector<KeySpec> more) {
  keys.insert(keys.end(), more.begin(), more.end());
  return keys;
}

std::vector<Metric> mask_step_metrics(const std::vector<double>& step_us, size_t steps, size_t words) {
  const Stats st = summarize(step_us);
  std::vector<double> sorted = step_us;
  std::sort(sorted.begin(), sorted.end());
  return {{"steps_per_run", static_cast<double>(steps), ""},
          {"step_p50", st.median, "us"},
          {"step_p99", percentile_sorted(sorted, 0.99), "us"},
          {"step_mean", st.mean, "us"},
          {"bitmask", static_cast<double>(words * sizeof(uint32_t)), "B"}};
}

std::vector<KeySpec> mask_kind_keys() {
  return with(constraint_keys(), {key_spec("documents", ParamType::Int, "documents decoded per sample", Value(int64_t{8}), 1.0)});
}

}  // namespace detail
}  // namespace ib::constrain
