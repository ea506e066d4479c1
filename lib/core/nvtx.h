// NVTX ranges in the "infer-bench" domain. With the toolkit's NVTX3 headers they cost almost
// nothing unless a tool (Nsight, an injection library) is attached; without them they are no-ops.
#pragma once

#include <string>

namespace ib {

class NvtxRange {
 public:
  explicit NvtxRange(const std::string& name);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// True when this binary was built with NVTX3 (not the no-op shim).
bool nvtx_enabled();

}  // namespace ib
