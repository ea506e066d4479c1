// The JSON-Schema-Test-Suite (tests/data/json-schema-test-suite, MIT; see its README) as the
// compiler tests read it: a file's text, a directory's .json files, and an instance spelt compactly
// with object keys in the order the schema lists its properties (the spelling the compiler writes).
#pragma once

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ib::testing_support {

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<std::string> json_files(const std::string& dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && n.substr(n.size() - 5) == ".json") files.push_back(n);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline nlohmann::ordered_json reorder(const nlohmann::ordered_json& v, const nlohmann::ordered_json& s) {
  if (v.is_object() && s.is_object() && s.contains("properties")) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [k, sub] : s["properties"].items())
      if (v.contains(k)) out[k] = reorder(v[k], sub);
    for (const auto& [k, x] : v.items())
      if (!out.contains(k)) out[k] = x;
    return out;
  }
  if (v.is_array() && s.is_object() && s.contains("items")) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& x : v) out.push_back(reorder(x, s["items"]));
    return out;
  }
  return v;
}

}  // namespace ib::testing_support
