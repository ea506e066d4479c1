// The shape of every refusal of bad input: an InputError whose message is one line and names
// what the user must fix (the file, the key, the tensor).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/errors.h"

namespace ib::testing_support {

// `f` throws an InputError of one line naming every one of `names`.
inline void expect_input_error(const std::function<void()>& f, const std::vector<std::string>& names) {
  try {
    f();
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const auto& n : names) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

}  // namespace ib::testing_support
