// Documents and token streams for the constrain experiments: random documents of a constraint's
// language, greedy tokenisation, forced continuations (jump-forward), and the documented
// synthetic noisy emitter of the validity experiment.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/token_index.h"
#include "constrain/vocab.h"

namespace ib::constrain {

// distance_to_accept (automaton.h): the bytes from each state to the nearest accepting state.

// A random document from `state`: bytes drawn over the live transitions (printable ASCII 20×
// likelier than other bytes, so documents look like what models write), then steered to the
// nearest accepting state once `soft_bytes` are written; stops at an accepting state with
// probability 1/4 per step.
std::string random_document(const Dfa& dfa, const std::vector<int32_t>& dist, int32_t state, std::mt19937_64& rng,
                            size_t soft_bytes = 160);

// Greedy longest-match tokenisation of `text` starting in DFA state `state`: at each position
// the longest token that is a prefix of the rest and keeps the DFA alive. Every single byte is
// a token in the bundled vocabularies, so this succeeds on any text the DFA accepts.
std::vector<int32_t> tokenize_greedy(const std::string& text, const Dfa& dfa, int32_t state, const VocabTrie& trie);

// The byte each state forces (its only live byte, when it does not accept), or -1.
std::vector<int16_t> forced_bytes(const Dfa& dfa);

struct EmitterStats {
  int documents = 0;
  int valid = 0;
  int64_t attempts = 0;
  int64_t tokens = 0;         // all tokens produced, failed attempts included
  int64_t wasted_tokens = 0;  // tokens of attempts that were thrown away
};

// The noisy emitter: it follows a valid target document and, with probability `epsilon` per
// token, emits a different token instead (uniform over the tokens the mask allows when
// constrained, over the whole vocabulary when not). Constrained, it then continues with a new
// valid target from where it is; unconstrained, it keeps following the old target, and the
// document is parsed and validated at the end (`is_valid`), retrying up to `retries` times.
EmitterStats emit_constrained(const Dfa& dfa, const std::vector<int32_t>& dist, const Vocabulary& vocab, const VocabTrie& trie,
                              LazyTokenMasker& masker, double epsilon, int documents, std::mt19937_64& rng,
                              const std::function<bool(const std::string&)>& is_valid);
EmitterStats emit_unconstrained(const Dfa& dfa, const std::vector<int32_t>& dist, const Vocabulary& vocab, const VocabTrie& trie,
                                double epsilon, int documents, int retries, std::mt19937_64& rng,
                                const std::function<bool(const std::string&)>& is_valid);

}  // namespace ib::constrain
