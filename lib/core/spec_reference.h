// The spec reference that `infer-bench keys` prints: a view of the registry for people, apart from
// the parser (core/spec.h) that no run needs it for.
#pragma once

#include <string>

namespace ib {

// The spec reference in Markdown: common keys, then each kind's keys and variants.
std::string spec_reference_markdown();

}  // namespace ib
