// The bundled texts of n-gram drafting (data/texts/), tokenized with the GPT-2 vocabulary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "constrain/vocab.h"

namespace ib::specdec {

struct TokenizedText {
  std::string name;
  std::vector<int32_t> prompt, output;
};

// Greedy longest match over the vocabulary's token bytes (GPT-2 merges would split a little
// differently; the repetition n-gram drafting feeds on is the same).
std::vector<int32_t> tokenize_longest_match(const std::string& text, const constrain::Vocabulary& vocab);
// data/texts/<name>.txt: prompt, a line "<<<OUTPUT>>>", output. InputError when missing.
TokenizedText load_text(const std::string& name);
std::vector<std::string> text_names();

}  // namespace ib::specdec
