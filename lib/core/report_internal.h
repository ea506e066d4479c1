// Shared by report_table.cpp and report_summary.cpp (internal to lib/core/report*.cpp): what a
// book row's `role` and a summary's `role:` match a row by.
#pragma once

#include <string>

#include "core/runner.h"

// A namespace of the report's own (not a core-wide detail).
namespace ib::report_detail {

// The role the row's variant plays; the variant's own name when it plays none.
const std::string& role_of(const Row& r);

}  // namespace ib::report_detail
