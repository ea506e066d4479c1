// A fake interpreter for the peer tests (torch SDPA, XGrammar/llguidance): an executable `python`
// in a fresh temporary directory that records its arguments (NUL-separated) and runs a shell body.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "../cli/process.h"

namespace ib::test {

struct FakeInterpreter {
  std::string dir = make_temp_dir();
  std::string path = dir + "/python";

  explicit FakeInterpreter(const std::string& body) {
    write_text(path, "#!/bin/sh\nprintf '%s\\0' \"$@\" > '" + dir + "/args'\n" + body + "\n");
    ::chmod(path.c_str(), 0755);
  }
  FakeInterpreter(FakeInterpreter&& o) noexcept : dir(std::move(o.dir)), path(std::move(o.path)) { o.dir.clear(); }
  FakeInterpreter(const FakeInterpreter&) = delete;
  FakeInterpreter& operator=(const FakeInterpreter&) = delete;
  FakeInterpreter& operator=(FakeInterpreter&&) = delete;
  ~FakeInterpreter() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }

  // Prints `out` on stdout (and `err` on stderr), exits with `code`.
  static FakeInterpreter printing(const std::string& out, const std::string& err = "", int code = 0) {
    static const std::string files = make_temp_dir();  // outlives every stub of the run
    static int n = 0;
    const std::string base = files + "/" + std::to_string(++n);
    write_text(base + ".out", out);
    write_text(base + ".err", err);
    return FakeInterpreter("cat '" + base + ".out'\ncat '" + base + ".err' >&2\nexit " + std::to_string(code));
  }

  std::vector<std::string> args() const {
    std::vector<std::string> out;
    std::istringstream in(read_text(dir + "/args"));
    for (std::string a; std::getline(in, a, '\0');) out.push_back(a);
    return out;
  }
  bool ran() const { return path_exists(dir + "/args"); }
  // A file the body wrote beside the interpreter.
  std::string file(const std::string& name) const { return read_text(dir + "/" + name); }
};

}  // namespace ib::test
