#include "kinds/constrain/grammar_documents.h"

#include <random>

#include "constrain/grammar_generate.h"
#include "constrain/grammar_mask.h"

namespace ib::constrain {

std::vector<std::vector<int32_t>> grammar_documents(const Grammar& g, const ConstraintSetup& setup, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const GrammarDistances d = grammar_distances(g);
  std::vector<std::vector<int32_t>> docs;
  for (int64_t i = 0; i < n; ++i)
    docs.push_back(grammar_tokenize_greedy(g, *setup.vocab, *setup.trie, random_grammar_document(g, d, rng)));
  return docs;
}

std::string grammar_path_unsupported(const ConstraintKeys& keys) {
  if (keys.is_schema()) return {};
  return "the grammar path is for JSON Schema constraints (" + keys.constraint + " is one DFA)";
}

}  // namespace ib::constrain
