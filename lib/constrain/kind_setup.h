// What the constrain kinds share: the constraint keys, the constraint and vocabulary a variant
// loads in prepare, and the independent validity check of an output document.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "constrain/constraint.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"
#include "core/registry.h"
#include "core/sweep.h"
#include "core/value.h"

namespace ib::constrain {

// constraint, vocab (default `default_vocab`), whitespace, max_recursion.
std::vector<KeySpec> constraint_keys(const std::string& default_vocab = "gpt2");

// Spec-time check of the constraint keys (KindInfo::check of the kinds that have them): every
// constraint is found (a file, a bundled schema, regex: or choice:), parses, and compiles to a
// regex under each whitespace and max_recursion given (unsupported keywords are refused here,
// naming the JSON pointer); every vocab loads (cached for the run).
std::optional<KeyProblem> check_constraint_keys(const std::map<std::string, std::vector<Value>>& values);

// The constraint and vocabulary a variant works on, read in prepare (file reading is not timed).
struct Setup {
  std::string constraint, source;
  SchemaOptions options;
  std::shared_ptr<const Vocabulary> vocab;
  std::shared_ptr<const VocabTrie> trie;

  // `with_trie`: also the vocabulary's trie (what token walks need).
  void load(const Point& p, bool with_trie = true);
  CompiledConstraint compile(SchemaPath path = SchemaPath::Dfa) const {
    return compile_constraint(constraint, source, options, path);
  }
};

// Whether an output is valid, by an oracle independent of the DFA: a schema constraint parses the
// text as JSON and checks it with SchemaValidator; regex: and choice: match the pattern's DFA.
std::function<bool(const std::string&)> validity_check(const CompiledConstraint& c);

}  // namespace ib::constrain
