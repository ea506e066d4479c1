// The binary under test (IB_BINARY) and the source tree (IB_SOURCE_DIR), for the tests that run
// infer-bench end to end.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "process.h"

namespace ib::test {

inline const std::string kBinary = IB_BINARY;
inline const std::string kSource = IB_SOURCE_DIR;

// infer-bench with these arguments.
inline ProcessResult ib(std::vector<std::string> args, const ProcessOptions& o = {}) {
  args.insert(args.begin(), kBinary);
  return run_process(args, o);
}

inline size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace ib::test
