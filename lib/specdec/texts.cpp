#include "specdec/texts.h"

#include <fstream>
#include <sstream>

#include "constrain/vocab.h"
#include "core/errors.h"
#include "tokenizer/tokenizer.h"

namespace ib::specdec {

std::vector<std::string> text_names() { return {"code", "json", "edit"}; }

TokenizedText load_text(const std::string& name) {
  const std::string path = constrain::data_directory() + "/texts/" + name + ".txt";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open (bundled texts: code, json, edit)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string all = ss.str();
  const std::string marker = "<<<OUTPUT>>>\n";
  const size_t at = all.find(marker);
  if (at == std::string::npos) throw InputError(path + ": no '<<<OUTPUT>>>' line");
  // GPT-2's own BPE (tokenizer.json with its merges); the prompt and the output are encoded
  // apart, as a request's prompt and its completion are.
  auto tok = tokenizer::Tokenizer::load("gpt2");
  return {name, tok->encode(all.substr(0, at), false), tok->encode(all.substr(at + marker.size()), false)};
}

}  // namespace ib::specdec
