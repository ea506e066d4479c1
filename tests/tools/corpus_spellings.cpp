// Writes, for every schema of the bundled real-world corpus, each instance as the compiler spells
// documents of that schema (canonical_spelling: compact, keys in the schema's order) beside its own
// compact spelling, one JSON line per schema. scripts/constrain-corpus-peers feeds these to the
// peer engines, so that theirs and ours are asked about the same bytes. Not run by ctest.
//   ib_corpus_spellings [corpus.jsonl] > spellings.jsonl
#include <iostream>

#include <nlohmann/json.hpp>

#include "constrain/schema_corpus.h"

int main(int argc, char** argv) {
  using ib::constrain::canonical_spelling;
  try {
    const auto corpus = ib::constrain::load_corpus(argc > 1 ? argv[1] : ib::constrain::corpus_path());
    for (const auto& e : corpus) {
      nlohmann::json line = {{"id", e.id}, {"valid", nlohmann::json::array()}, {"invalid", nlohmann::json::array()}};
      for (const auto& x : e.valid) line["valid"].push_back({canonical_spelling(x, e.schema), x.dump()});
      for (const auto& x : e.invalid) line["invalid"].push_back({canonical_spelling(x, e.schema), x.dump()});
      std::cout << line.dump() << '\n';
    }
  } catch (const std::exception& ex) {
    std::cerr << "ib_corpus_spellings: " << ex.what() << '\n';
    return 2;
  }
  return 0;
}
