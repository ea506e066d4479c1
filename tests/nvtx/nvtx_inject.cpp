// A minimal NVTX injection library (NVTX_INJECTION64_PATH): records every range push/pop of
// every domain to the file named by IB_NVTX_LOG, one line each, so a test can check the
// ranges a run emits without Nsight or a GPU.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::FILE* g_log = nullptr;
std::mutex g_mutex;

struct Domain {
  std::string name;
};

const char* domain_name(nvtxDomainHandle_t d) { return d ? reinterpret_cast<Domain*>(d)->name.c_str() : "(default)"; }

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(new Domain{name ? name : ""});
}

int NVTX_API range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const char* msg = a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "(non-ascii)";
  std::fprintf(g_log, "push\t%s\t%s\n", domain_name(d), msg);
  std::fflush(g_log);
  return 0;
}

int NVTX_API range_pop(nvtxDomainHandle_t d) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(g_log, "pop\t%s\n", domain_name(d));
  std::fflush(g_log);
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  const char* path = std::getenv("IB_NVTX_LOG");
  g_log = path ? std::fopen(path, "w") : stderr;
  if (!g_log) return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!callbacks) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table) return 0;
  if (size <= NVTX_CBID_CORE2_DomainRangePop || size <= NVTX_CBID_CORE2_DomainCreateA) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(domain_create);
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(range_push);
  *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(range_pop);
  return 1;
}
