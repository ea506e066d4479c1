#include "core/data_dir.h"

#include <cstdlib>
#include <filesystem>

namespace ib {

std::string data_directory() {
  if (const char* env = std::getenv("INFER_BENCH_DATA")) return env;
#ifdef INFER_BENCH_SOURCE_DATA_DIR
  return INFER_BENCH_SOURCE_DATA_DIR;
#else
  return "data";
#endif
}

std::string data_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.rfind("data/", 0) != 0 || fs::exists(path, ec)) return path;
  const fs::path under = fs::path(data_directory()) / path.substr(5);
  return fs::exists(under, ec) ? under.string() : path;
}

}  // namespace ib
