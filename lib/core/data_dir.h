// Where the data the binary reads at run time lives (tokenizers, bundled texts): the bottom of
// every layer that needs it (tokenizer, constrain, specdec).
#pragma once

#include <string>

namespace ib {

// $INFER_BENCH_DATA, else the source tree's data/ (compiled in), else "data".
std::string data_directory();

// A path as given when it exists; else, for a relative path that starts with `data/`, the same
// file under data_directory() when it is there (the bundled specs name the bundled models and
// texts relative to the repository root, and must work from any directory); else as given.
std::string data_path(const std::string& path);

}  // namespace ib
