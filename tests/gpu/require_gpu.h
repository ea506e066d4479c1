// GPU tests skip themselves, naming why, when no CUDA device is usable (CI builds them without one).
#pragma once

#include <gtest/gtest.h>

#include "core/backend.h"

#define REQUIRE_GPU()                                                                              \
  do {                                                                                             \
    if (!::ib::cuda_unavailable_reason().empty()) GTEST_SKIP() << ::ib::cuda_unavailable_reason(); \
  } while (0)
