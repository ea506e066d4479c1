#include "core/data_dir.h"

#include <cstdlib>

namespace ib {

std::string data_directory() {
  if (const char* env = std::getenv("INFER_BENCH_DATA")) return env;
#ifdef INFER_BENCH_SOURCE_DATA_DIR
  return INFER_BENCH_SOURCE_DATA_DIR;
#else
  return "data";
#endif
}

}  // namespace ib
