// Runs a program and captures its exit code, stdout and stderr (test helper).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ib::test {

struct ProcessResult {
  int exit_code = -1;  // 128 + signal when killed by a signal
  std::string out;
  std::string err;
};

struct ProcessOptions {
  std::string cwd;                                       // "" = inherit
  std::vector<std::pair<std::string, std::string>> env;  // added to the environment
  int sigint_after_ms = -1;                              // send SIGINT after this long
  // RLIMIT_FSIZE for the child, with SIGXFSZ ignored: a write past it fails (EFBIG) as on a full disk.
  int64_t file_size_limit = -1;
  // stdout through a pipe whose reading end closes after this many bytes (`| head -c N`).
  int close_stdout_after_bytes = -1;
};

ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

std::string make_temp_dir();
void write_text(const std::string& path, const std::string& text);
std::string read_text(const std::string& path);
bool path_exists(const std::string& path);
// Every regular file below dir, as paths relative to it, sorted.
std::vector<std::string> list_files(const std::string& dir);

}  // namespace ib::test
