// Kind `ceiling`: the card's copy bandwidth and GEMM rate, the denominators of every report's
// roofline columns (`infer-bench info` prints them).
#include "core/registry.h"

namespace ib {
namespace {

KindInfo ceiling_kind() {
  KindInfo k;
  k.name = "ceiling";
  k.group = "ceiling";
  k.doc = "Peak rates of the machine: copy bandwidth (bytes read + written per second) and dense GEMM "
          "throughput (2·m·n·k FLOP per run). `copy`/`memcpy` use `bytes`; `gemm`/`sgemm` use `m`, `n`, `k`, `dtype`.";
  k.keys = {
      key_spec("bytes", ParamType::Bytes, "size of the copied buffer", Value(int64_t{1} << 30), 4096.0),
      key_spec("m", ParamType::Int, "GEMM rows of A and C", Value(int64_t{8192}), 1.0),
      key_spec("n", ParamType::Int, "GEMM columns of B and C", Value(int64_t{8192}), 1.0),
      key_spec("k", ParamType::Int, "GEMM inner dimension", Value(int64_t{8192}), 1.0),
  };
  KeySpec dtype = key_spec("dtype", ParamType::Enum, "GEMM element type (fp32 accumulation)", Value(std::string("bf16")));
  dtype.choices = {"bf16", "fp16", "fp32"};
  k.keys.push_back(dtype);
  k.variants = {
      {"copy", Backend::Cuda, "cudaMemcpyAsync device to device", {"bytes"}},
      {"gemm", Backend::Cuda, "cuBLAS cublasGemmEx, fp32 accumulation, tensor cores for bf16/fp16", {"m", "n", "k", "dtype"}},
      {"memcpy", Backend::Cpu, "memcpy split over the CPU threads", {"bytes"}},
      {"sgemm", Backend::Cpu, "our blocked, packed (6×16 AVX2/FMA register tile), multithreaded SGEMM; fp32 only",
       {"m", "n", "k", "dtype"}},
  };
  return k;
}

const KindRegistration registration(ceiling_kind());

}  // namespace
}  // namespace ib
