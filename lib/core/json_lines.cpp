#include "core/json_lines.h"

#include <fstream>

#include <fmt/format.h>

#include "core/errors.h"
#include "core/input_file.h"
#include "core/json_input.h"

namespace ib {

void for_each_json_line(const std::string& path, size_t max_line,
                        const std::function<bool(const nlohmann::json&, size_t)>& each) {
  regular_file_size(path);  // refuses a FIFO, a device, a directory before it is opened to read
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be read", path));
  std::string line;
  size_t number = 0;
  while (true) {
    line.clear();
    // A line at a time, refusing one past the bound before it is all in memory.
    char c;
    bool any = false;
    while (in.get(c)) {
      any = true;
      if (c == '\n') break;
      if (line.size() >= max_line)
        throw InputError(fmt::format("{}:{}: a line longer than {}", path, number + 1, limit_text(max_line)));
      line.push_back(c);
    }
    if (!any) break;
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json value;
    try {
      value = parse_json_bounded(line, fmt::format("{}:{}", path, number), 64);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}:{}: not JSON ({})", path, number, e.what()));
    }
    if (!each(value, number)) break;
  }
  if (in.bad()) throw InputError(fmt::format("{}: a read failed after line {}", path, number));
}

}  // namespace ib
