#include "specdec/texts.h"

#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/errors.h"

namespace ib::specdec {

std::vector<int32_t> tokenize_longest_match(const std::string& text, const constrain::Vocabulary& vocab) {
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t t = 0; t < vocab.size(); ++t)
    if (!vocab.special[static_cast<size_t>(t)] && !vocab.token_bytes[static_cast<size_t>(t)].empty())
      ids.emplace(vocab.token_bytes[static_cast<size_t>(t)], t);
  std::vector<int32_t> out;
  for (size_t i = 0; i < text.size();) {
    size_t len = std::min(vocab.max_token_bytes, text.size() - i);
    for (; len > 0; --len) {
      auto it = ids.find(text.substr(i, len));
      if (it != ids.end()) {
        out.push_back(it->second);
        break;
      }
    }
    if (len == 0) throw InputError("byte " + std::to_string(static_cast<unsigned char>(text[i])) + " has no token");
    i += len;
  }
  return out;
}

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
  auto vocab = constrain::load_vocabulary("gpt2");
  return {name, tokenize_longest_match(all.substr(0, at), *vocab), tokenize_longest_match(all.substr(at + marker.size()), *vocab)};
}

}  // namespace ib::specdec
