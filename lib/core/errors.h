// Error types that decide exit codes and row statuses.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ib {

// Bad input (spec, flags, files): one-line message, exit code 2, nothing written.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A variant found, once it tried, that it cannot run this point: a limit of the method (an
// automaton past its state cap), not a fault. The row is unsupported, with this message.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A result file could not be written (a full disk, a vanished directory): exit code 3. The last
// complete result files stay where they are (every write goes through a temporary and a rename).
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where something sits in a spec file; line/col are 1-based, line 0 means "not from a file"
// (a --set override, whose `file` is the override itself).
struct SourceLoc {
  std::string file;
  int line = 0;
  int col = 0;
  std::string str() const;  // "file:line:col" or "file" or "--set"
};

// "file:line:col: key.path: message" as an InputError.
InputError spec_error(const SourceLoc& loc, const std::string& key_path, const std::string& message);

// An allocation past the memory limit, or a real allocation failure: the row becomes OOM.
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(const std::string& what, int64_t requested, int64_t in_use, int64_t limit)
      : std::runtime_error(what), requested_(requested), in_use_(in_use), limit_(limit) {}
  int64_t requested() const { return requested_; }
  int64_t in_use() const { return in_use_; }
  int64_t limit() const { return limit_; }

 private:
  int64_t requested_;
  int64_t in_use_;
  int64_t limit_;
};

// An error is one line whatever the input held: newlines and other control characters written
// escaped (\n, \x01), for a message about to be printed.
std::string one_line(const std::string& message);

// Closest candidate by edit distance, or "" when nothing is close enough to suggest.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace ib
