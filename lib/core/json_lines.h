// Reading a JSON Lines file a user names (a dataset, a trace) one line at a time, so a file of
// gigabytes is never held whole: only a regular file, each line bounded in length and nesting,
// blank lines skipped, and an error naming the file and line.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace ib {

// Calls `each(value, line)` for the JSON value of each non-blank line of `path` (lines numbered
// from 1) until it returns false or the file ends. A line longer than `max_line` bytes, or not
// JSON, is an InputError "PATH:LINE: ..."; so is a missing, unreadable or irregular file.
void for_each_json_line(const std::string& path, size_t max_line, const std::function<bool(const nlohmann::json&, size_t)>& each);

}  // namespace ib
