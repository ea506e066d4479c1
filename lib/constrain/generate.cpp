#include "constrain/generate.h"

#include <functional>
#include <stdexcept>

namespace ib::constrain {

std::string random_document(const Dfa& dfa, const std::vector<int32_t>& dist, int32_t s, std::mt19937_64& rng,
                            size_t soft_bytes) {
  std::string out;
  std::vector<int> bytes;
  std::vector<double> weights;
  for (;;) {
    const bool accepting = dfa.accepting[static_cast<size_t>(s)];
    if (accepting && (out.size() >= soft_bytes || rng() % 4 == 0)) return out;
    bytes.clear();
    weights.clear();
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.step(s, static_cast<uint8_t>(b));
      if (t < 0) continue;
      if (out.size() >= soft_bytes && dist[static_cast<size_t>(t)] >= dist[static_cast<size_t>(s)]) continue;
      bytes.push_back(b);
      weights.push_back(b >= 0x20 && b < 0x7F ? 20.0 : 1.0);
    }
    if (bytes.empty()) return out;  // accepting with no way on
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    const int b = bytes[pick(rng)];
    out += static_cast<char>(b);
    s = dfa.step(s, static_cast<uint8_t>(b));
  }
}

std::vector<int32_t> tokenize_greedy(const std::string& text, const Dfa& dfa, int32_t state, const VocabTrie& trie) {
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    // Walk the trie along the text; remember the deepest node that ends a token and keeps the
    // DFA alive. Children of a node are the nodes after it until its subtree ends.
    int32_t node = 0, best_token = -1;
    size_t best_len = 0;
    int32_t s = state, best_state = -1;
    for (size_t d = 0; pos + d < text.size(); ++d) {
      const uint8_t b = static_cast<uint8_t>(text[pos + d]);
      int32_t child = -1;
      for (int32_t c = node + 1; c < trie.subtree_end[static_cast<size_t>(node)]; c = trie.subtree_end[static_cast<size_t>(c)])
        if (trie.byte[static_cast<size_t>(c)] == b) {
          child = c;
          break;
        }
      if (child < 0) break;
      s = dfa.step(s, b);
      if (s < 0) break;
      node = child;
      if (trie.token_begin[static_cast<size_t>(node)] < trie.token_begin[static_cast<size_t>(node) + 1]) {
        best_token = trie.tokens[static_cast<size_t>(trie.token_begin[static_cast<size_t>(node)])];
        best_len = d + 1;
        best_state = s;
      }
    }
    if (best_token < 0) return {};  // no token fits (cannot happen with byte tokens)
    out.push_back(best_token);
    pos += best_len;
    state = best_state;
  }
  return out;
}

std::vector<int16_t> forced_bytes(const Dfa& dfa) {
  std::vector<int16_t> out(static_cast<size_t>(dfa.num_states));
  for (int32_t s = 0; s < dfa.num_states; ++s) out[static_cast<size_t>(s)] = static_cast<int16_t>(dfa.forced_byte(s));
  return out;
}

namespace {

// A token uniformly among those the mask allows (EOS excluded unless it is the only one).
int32_t random_allowed(const uint32_t* mask, size_t words, int32_t eos, std::mt19937_64& rng) {
  std::vector<int32_t> allowed;
  for (size_t w = 0; w < words; ++w)
    for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
      const int32_t t = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
      if (t != eos) allowed.push_back(t);
    }
  if (allowed.empty()) return eos;
  return allowed[rng() % allowed.size()];
}

}  // namespace

EmitterStats emit_constrained(const Dfa& dfa, const std::vector<int32_t>& dist, const Vocabulary& vocab, const VocabTrie& trie,
                              LazyTokenMasker& masker, double epsilon, int documents, std::mt19937_64& rng,
                              const std::function<bool(const std::string&)>& is_valid) {
  EmitterStats st;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  for (int d = 0; d < documents; ++d) {
    ++st.documents;
    ++st.attempts;
    int32_t s = dfa.start;
    std::string text;
    std::vector<int32_t> target = tokenize_greedy(random_document(dfa, dist, s, rng), dfa, s, trie);
    size_t next = 0;
    for (int steps = 0; steps < 4096; ++steps) {
      const uint32_t* mask = masker.mask(s);
      int32_t tok;
      bool from_target = false;
      if (next >= target.size()) {
        tok = vocab.eos;  // the target is complete: end (EOS is allowed: the state accepts)
      } else if (coin(rng) < epsilon) {
        tok = random_allowed(mask, masker.words(), vocab.eos, rng);
      } else {
        tok = target[next++];
        from_target = true;
      }
      ++st.tokens;
      if (tok == vocab.eos) break;
      text += vocab.token_bytes[static_cast<size_t>(tok)];
      s = advance(dfa, vocab, s, tok);
      if (s < 0) throw std::logic_error("emit_constrained: token " + std::to_string(tok) + " left the language");
      if (!from_target) {  // a deviation: continue with a fresh valid target from here
        target = tokenize_greedy(random_document(dfa, dist, s, rng), dfa, s, trie);
        next = 0;
      }
    }
    if (is_valid(text)) ++st.valid;
  }
  return st;
}

EmitterStats emit_unconstrained(const Dfa& dfa, const std::vector<int32_t>& dist, const Vocabulary& vocab, const VocabTrie& trie,
                                double epsilon, int documents, int retries, std::mt19937_64& rng,
                                const std::function<bool(const std::string&)>& is_valid) {
  EmitterStats st;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<int32_t> ordinary;
  for (int32_t t = 0; t < vocab.size(); ++t)
    if (!vocab.special[static_cast<size_t>(t)]) ordinary.push_back(t);
  for (int d = 0; d < documents; ++d) {
    ++st.documents;
    for (int attempt = 0; attempt < retries; ++attempt) {
      ++st.attempts;
      std::vector<int32_t> target = tokenize_greedy(random_document(dfa, dist, dfa.start, rng), dfa, dfa.start, trie);
      std::string text;
      int64_t produced = 0;
      for (int32_t tok : target) {
        if (coin(rng) < epsilon) tok = ordinary[rng() % ordinary.size()];
        text += vocab.token_bytes[static_cast<size_t>(tok)];
        ++produced;
      }
      ++produced;  // EOS
      st.tokens += produced;
      if (is_valid(text)) {
        ++st.valid;
        break;
      }
      st.wasted_tokens += produced;
    }
  }
  return st;
}

}  // namespace ib::constrain
