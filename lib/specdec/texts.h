// The bundled texts of n-gram drafting (data/texts/), tokenized with GPT-2's BPE tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ib::specdec {

struct TokenizedText {
  std::string name;
  std::vector<int32_t> prompt, output;
};

// data/texts/<name>.txt: prompt, a line "<<<OUTPUT>>>", output. InputError when missing.
TokenizedText load_text(const std::string& name);
std::vector<std::string> text_names();

}  // namespace ib::specdec
