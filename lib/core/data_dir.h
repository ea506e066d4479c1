// Where the data the binary reads at run time lives (tokenizers, bundled texts): the bottom of
// every layer that needs it (tokenizer, constrain, specdec).
#pragma once

#include <string>

namespace ib {

// $INFER_BENCH_DATA, else the source tree's data/ (compiled in), else "data".
std::string data_directory();

}  // namespace ib
