#include "core/nvtx.h"

#ifdef INFER_BENCH_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace ib {

#ifdef INFER_BENCH_HAVE_NVTX
namespace {
nvtxDomainHandle_t domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("infer-bench");
  return d;
}
}  // namespace

NvtxRange::NvtxRange(const std::string& name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name.c_str();
  nvtxDomainRangePushEx(domain(), &a);
}

NvtxRange::~NvtxRange() { nvtxDomainRangePop(domain()); }

bool nvtx_enabled() { return true; }
#else
NvtxRange::NvtxRange(const std::string&) {}
NvtxRange::~NvtxRange() {}
bool nvtx_enabled() { return false; }
#endif

}  // namespace ib
